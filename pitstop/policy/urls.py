"""Endpoint URLs compared the way a connection sees them: scheme, host and port only.

`http://MinIO.internal:9000/` and `http://minio.internal:9000` are the same endpoint;
`https://s3.amazonaws.com` is `https://s3.amazonaws.com:443`. A path, a query or user
information in an endpoint is refused: nothing but the server may differ between two URLs
that the policy treats as one.
"""

from __future__ import annotations

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
