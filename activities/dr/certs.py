"""`dr.cert_expiry`: the notAfter of every certificate under a control-plane node's
/etc/kubernetes/pki, read from the certificates themselves (x509, `cryptography`).

Only public certificates are read: `find ... -name '*.crt'`, then `cat` of each name that ends
in `.crt` (a name the node returns is checked again here, so a `.key` never reaches the worker).
kubeadm renews its leaf certificates yearly on `kubeadm upgrade`; a cluster not upgraded for a
year loses its control plane when they lapse, which is why this belongs to DR readiness.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cryptography import x509

from activities.dr.remote import KUBERNETES_DIR, find_files, node_connection, run_read
from activities.module_activity import module_activity
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.module_args.dr import CERT_EXPIRY, CertExpiryArgs


def describe(name: str, pem: bytes, now: datetime) -> dict[str, Any]:
    """What a person needs of one certificate: who, issued by whom, until when."""
    cert = x509.load_pem_x509_certificate(pem)
    not_after = cert.not_valid_after_utc
    try:
        is_ca = bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        is_ca = False
    return {
        "name": name,
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "ca": is_ca,
        "not_after": not_after.isoformat().replace("+00:00", "Z"),
        "days_left": int((not_after - now).total_seconds() // 86400),
    }


@module_activity(CERT_EXPIRY)
def cert_expiry(call: ModuleCall, args: CertExpiryArgs) -> ModuleResult:
    directory = f"{KUBERNETES_DIR}/{args.pki_dir}"
    now = datetime.now(UTC)
    certs: list[dict[str, Any]] = []
    unreadable: list[dict[str, str]] = []
    with node_connection(call) as conn:
        found = find_files(conn, directory, "*.crt", args.become, call.host)
        if found is None:
            fail(
                ErrorType.PRECONDITION_FAILED, f"{call.host} has no {directory} (is it a control-plane node?)"
            )
        for path in (p for p in found if p.endswith(".crt")):
            name = path[len(directory) + 1 :]
            read = run_read(conn, ["cat", path], args.become, call.host)
            if read.rc != 0:
                unreadable.append({"name": name, "why": read.stderr.strip()})
                continue
            try:
                certs.append(describe(name, read.stdout.encode(), now))
            except ValueError as exc:
                unreadable.append({"name": name, "why": f"not a PEM certificate: {exc}"})
    if not certs:
        fail(ErrorType.PRECONDITION_FAILED, f"no certificate could be read under {call.host}:{directory}")
    certs.sort(key=lambda c: (c["days_left"], c["name"]))
    expiring = [c for c in certs if c["days_left"] < args.min_days]
    soonest = certs[0]
    data = {
        "node": call.host,
        "directory": directory,
        "as_of": now.isoformat().replace("+00:00", "Z"),
        "min_days": args.min_days,
        "certificates": certs,
        "expiring": [c["name"] for c in expiring],
        "soonest": {k: soonest[k] for k in ("name", "not_after", "days_left")},
        "unreadable": unreadable,
    }
    if expiring:
        listed = ", ".join(f"{c['name']} on {c['not_after'][:10]} ({c['days_left']} days)" for c in expiring)
        message = (
            f"{len(expiring)} of {len(certs)} certificates on {call.host} expire within "
            f"{args.min_days} days: {listed}"
        )
        if args.on_expiring == "fail":
            fail(ErrorType.PRECONDITION_FAILED, message + "; renew them (`kubeadm certs renew all`)")
        return ModuleResult(msg=f"WARNING: {message}", data=data)
    return ModuleResult(
        msg=f"{len(certs)} certificates on {call.host}; the first to expire is {soonest['name']} on "
        f"{soonest['not_after'][:10]} ({soonest['days_left']} days, more than {args.min_days})",
        data=data,
    )
