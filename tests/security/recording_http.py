"""A local HTTP server that records every request it receives and answers with a canned
response: what an attacker's endpoint would see. A refusal "before any request" is proven by
its record staying empty."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class RecordingServer:
    status: int = 403
    body: bytes = b""
    content_type: str = "application/xml"
    received: list[Received] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> RecordingServer:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with recorder._lock:
                    recorder.received.append(Received(self.command, self.path, dict(self.headers), body))
                self.send_response(recorder.status)
                self.send_header("Content-Type", recorder.content_type)
                self.send_header("Content-Length", str(len(recorder.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(recorder.body)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
