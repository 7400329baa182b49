"""A `tls` target of `dr.http_check`: does the name resolve, and does the certificate its
server presents cover the name and last long enough?

Only the handshake: no HTTP request is sent. The certificate is read, not trusted (the point is
its dates and names, which a private CA's certificate has too), so the context does not verify
the chain; the name is matched here against the certificate's DNS names (one wildcard label, as
RFC 6125 allows). The endpoint is checked against the worker policy by the caller first.
"""

from __future__ import annotations

import socket
import ssl
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509


def _covers(pattern: str, host: str) -> bool:
    pattern, host = pattern.lower().rstrip("."), host.lower().rstrip(".")
    if pattern.startswith("*."):
        head, _, rest = host.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == host


def check_tls(url: str, timeout: float, min_days: int) -> dict[str, Any]:
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    try:
        addresses = sorted(
            {str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
        )
    except socket.gaierror as exc:
        return {"reachable": False, "why": f"{host} does not resolve: {exc.strerror}"}
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError) as exc:
        return {
            "reachable": False,
            "addresses": addresses,
            "why": f"no TLS handshake with {host}:{port}: {exc}",
        }
    if not der:
        return {"reachable": False, "addresses": addresses, "why": f"{host}:{port} presented no certificate"}
    cert = x509.load_der_x509_certificate(der)
    try:
        names = cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        ).value.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = []
    not_after = cert.not_valid_after_utc
    until = not_after.isoformat().replace("+00:00", "Z")
    days = int((not_after - datetime.now(UTC)).total_seconds() // 86400)
    row = {"addresses": addresses, "names": names, "not_after": until, "days_left": days}
    summary = f"{host} resolves to {', '.join(addresses)}; certificate valid until {until[:10]} ({days} days)"
    if not any(_covers(n, host) for n in names):
        return {
            **row,
            "reachable": False,
            "why": f"{summary}, but it names {', '.join(names) or 'no DNS name'}, not {host}",
        }
    if days < min_days:
        return {**row, "reachable": False, "why": f"{summary}: expires within {min_days} days"}
    return {**row, "reachable": True, "why": summary}
