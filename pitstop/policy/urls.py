"""Endpoint URLs compared the way a connection sees them: scheme, host and port only.

`http://MinIO.internal:9000/` and `http://minio.internal:9000` are the same endpoint;
`https://s3.amazonaws.com` is `https://s3.amazonaws.com:443`. A path, a query or user
information in an endpoint is refused: nothing but the server may differ between two URLs
that the policy treats as one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol
from urllib.parse import urlsplit

AWS = "aws"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_endpoint(url: str) -> str:
    """`scheme://host:port` of an http(s) URL; ValueError saying what is wrong otherwise."""
    text = url.strip()
    if text.lower() == AWS:
        return AWS
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError(f"{url!r} must start with http:// or https://")
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{url!r} carries user information; credentials belong in secrets")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{url!r} has a path or query; give only scheme://host:port")
    host = parts.hostname.lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or _DEFAULT_PORTS[scheme]}"


def server_of(url: str, *, base_only: bool = False) -> str:
    """`scheme://host:port` of a URL that may carry a path (a route prefix, a proxy path);
    `base_only` also refuses a query or fragment. ValueError naming the problem."""
    parts = urlsplit(url.strip())
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{url!r} carries user information; credentials belong in secrets")
    if base_only and (parts.query or parts.fragment):
        raise ValueError(f"{url!r} has a query or fragment; give the server's base URL")
    return normalize_endpoint(f"{parts.scheme}://{parts.netloc}")


class EndpointRule(Protocol):
    @property
    def endpoint(self) -> str: ...

    @property
    def shown(self) -> str: ...


def allowed_server(
    url: str, what: str, rules: Iterable[EndpointRule], *, refusal: str, base_only: bool = False
) -> str:
    """The server of `url` when one of `rules` lists it; else a PolicyViolation saying
    "`what`: `url` is not `refusal` (policy ...: listed)"."""
    from pitstop.policy.errors import ASK_OPERATOR, policy_violation

    listed = list(rules)
    try:
        endpoint = server_of(url, base_only=base_only)
    except ValueError as exc:
        raise policy_violation(f"{what}: url {exc}", fix=None) from None
    if endpoint not in {rule.endpoint for rule in listed}:
        shown = ", ".join(rule.shown for rule in listed) or "none"
        raise policy_violation(f"{what}: {url} is not {refusal}: {shown})", fix=ASK_OPERATOR)
    return endpoint
