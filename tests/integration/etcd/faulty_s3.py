"""A small HTTP proxy in front of the moto S3 server that fails one multipart part.

Every request of the first multipart upload for part `fail_part` gets a 500 InternalError
(so botocore's own retries fail too and the error reaches the activity); every other request
is forwarded as it came. The proxy records what it saw, for the test to check that the
failed upload was aborted and retried as a new one.
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

_HOP_BY_HOP = {"host", "connection", "proxy-connection", "keep-alive", "transfer-encoding", "expect"}
_ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>InternalError</Code><Message>injected by the test proxy</Message></Error>"
)


@dataclass
class Seen:
    method: str
    query: dict[str, list[str]]
    status: int


@dataclass
class FaultyS3:
    upstream: str  # http://127.0.0.1:PORT
    fail_part: int = 2
    seen: list[Seen] = field(default_factory=list)
    failed_upload: str | None = None
    failures: int = 0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FaultyS3:
        proxy = self
        target = urlsplit(self.upstream)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                return

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                query = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
                if self.command == "PUT" and query.get("partNumber") == [str(proxy.fail_part)]:
                    upload = query.get("uploadId", [""])[0]
                    with proxy._lock:
                        if proxy.failed_upload in (None, upload):
                            proxy.failed_upload = upload
                            proxy.failures += 1
                            proxy.seen.append(Seen(self.command, query, 500))
                            self._reply(500, [("Content-Type", "application/xml")], _ERROR)
                            return
                upstream = http.client.HTTPConnection(
                    target.hostname or "127.0.0.1", target.port, timeout=120
                )
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                    kept = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP]
                finally:
                    upstream.close()
                with proxy._lock:
                    proxy.seen.append(Seen(self.command, query, response.status))
                self._reply(response.status, kept, data)

            def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response(status)
                has_length = False
                for name, value in headers:
                    if name.lower() == "content-length":
                        # HEAD answers carry the object's length, not the (empty) body's.
                        if self.command != "HEAD":
                            continue
                        has_length = True
                    self.send_header(name, value)
                if not has_length:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def count(self, method: str, *, has: str, status: int | None = None) -> int:
        return sum(
            1
            for s in self.seen
            if s.method == method and has in s.query and (status is None or s.status == status)
        )
