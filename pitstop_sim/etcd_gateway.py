"""A small client for etcd's v3 JSON gRPC gateway (`POST /v3/kv/...` on the client port).

Only what the simulator's etcd-backed store needs: read a prefix page by page at one revision,
count it, delete it, and apply a batch of puts and deletes as one transaction. Keys and
values travel base64-encoded, as the gateway's protobuf-JSON mapping wants; int64 fields come
back as strings and are omitted when zero. Plain `http://` endpoints only (the embedded
stack's etcd); no TLS, no auth.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

# etcd's defaults: --max-txn-ops 128 and --max-request-bytes 1.5 MiB (base64 adds a third).
MAX_TXN_OPS = 128
MAX_TXN_BYTES = 768 * 1024
_PAGE = 500


class EtcdGatewayError(Exception):
    """etcd could not be reached, or refused a request; the message names the endpoint."""


class EtcdUnreachable(EtcdGatewayError):
    """No answer (connection refused, timeout, 5xx): worth retrying."""


class EtcdRefused(EtcdGatewayError):
    """etcd answered with an error about the request itself: retrying the same request fails again."""


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def prefix_end(prefix: bytes) -> bytes:
    """The range end that selects every key starting with `prefix` (etcdctl --prefix)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # every key


class EtcdGateway:
    def __init__(self, endpoint: str, *, timeout: float = 5.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._http = httpx.Client(base_url=self.endpoint, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise EtcdUnreachable(
                f"cannot reach etcd at {self.endpoint}: {exc or type(exc).__name__}"
            ) from None
        try:
            reply: dict[str, Any] = response.json()
        except ValueError:
            reply = {}
        if response.status_code == 200:
            return reply
        message = reply.get("message") or response.text.strip() or f"HTTP {response.status_code}"
        error = EtcdUnreachable if response.status_code >= 500 else EtcdRefused
        raise error(f"etcd at {self.endpoint} refused {path}: {message}")

    def revision(self) -> int:
        """The store's current revision (every write moves it on)."""
        reply = self._post("/v3/kv/range", {"key": _b64(b"\0"), "count_only": True})
        return int(reply["header"]["revision"])

    def get(self, key: str) -> bytes | None:
        reply = self._post("/v3/kv/range", {"key": _b64(key.encode())})
        kvs = reply.get("kvs") or []
        return _unb64(kvs[0].get("value", "")) if kvs else None

    def count(self, prefix: str) -> int:
        raw = prefix.encode()
        reply = self._post(
            "/v3/kv/range", {"key": _b64(raw), "range_end": _b64(prefix_end(raw)), "count_only": True}
        )
        return int(reply.get("count", 0))

    def scan(self, prefix: str) -> tuple[int, Iterator[tuple[str, bytes]]]:
        """(revision, every key and value under `prefix` as of that revision, in key order)."""
        raw = prefix.encode()
        end = _b64(prefix_end(raw))
        first = self._post("/v3/kv/range", {"key": _b64(raw), "range_end": end, "limit": _PAGE})
        revision = int(first["header"]["revision"])

        def pages() -> Iterator[tuple[str, bytes]]:
            reply = first
            while True:
                kvs = reply.get("kvs") or []
                for kv in kvs:
                    yield _unb64(kv["key"]).decode(), _unb64(kv.get("value", ""))
                if not reply.get("more") or not kvs:
                    return
                # The next page starts just after the last key, at the first page's revision.
                after = _unb64(kvs[-1]["key"]) + b"\0"
                reply = self._post(
                    "/v3/kv/range",
                    {"key": _b64(after), "range_end": end, "limit": _PAGE, "revision": revision},
                )

        return revision, pages()

    def delete_prefix(self, prefix: str) -> int:
        raw = prefix.encode()
        reply = self._post("/v3/kv/deleterange", {"key": _b64(raw), "range_end": _b64(prefix_end(raw))})
        return int(reply.get("deleted", 0))

    def apply(self, ops: Sequence[tuple[str, bytes | None]]) -> None:
        """Puts (value) and deletes (None) in one transaction. Keys must be distinct (etcd refuses
        a key twice in one transaction) and the batch within MAX_TXN_OPS / MAX_TXN_BYTES."""
        requests: list[dict[str, Any]] = []
        for key, value in ops:
            if value is None:
                requests.append({"request_delete_range": {"key": _b64(key.encode())}})
            else:
                requests.append({"request_put": {"key": _b64(key.encode()), "value": _b64(value)}})
        if requests:
            self._post("/v3/kv/txn", {"success": requests})
