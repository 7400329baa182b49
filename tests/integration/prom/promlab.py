"""A real Prometheus (and Alertmanager) for tests: Debian's `prometheus` and
`prometheus-alertmanager` packages, each started on a free loopback port with its own storage in
the test's directory, scraping a tiny exporter the test serves (prometheus_client's text format)
every second and evaluating a rule file every second.

Nothing here sleeps for a fixed time: every wait polls a condition (ready, series present, alert
firing) until a deadline, and says what it waited for when the deadline passes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from pitstop.devstack import free_port

PROMETHEUS = "/usr/bin/prometheus"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"


class LabUnavailable(RuntimeError):
    """The binaries are missing and cannot be installed here; the message says why."""


def ensure_installed() -> None:
    """Install Debian's packages when missing and root (as `make` installs openssh-server)."""
    missing = [
        pkg
        for pkg, binary in (("prometheus", PROMETHEUS), ("prometheus-alertmanager", ALERTMANAGER))
        if not Path(binary).exists()
    ]
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise LabUnavailable(f"{', '.join(missing)} not installed and no apt-get to install them")
    import os

    if os.geteuid() != 0:
        raise LabUnavailable(f"{', '.join(missing)} not installed and not root to apt-get install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(
        ["apt-get", "install", "-y", "-q", *missing], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise LabUnavailable(f"apt-get install {' '.join(missing)} failed: {done.stderr[-500:]}")


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll `condition` until it returns something truthy; AssertionError naming `what` otherwise."""
    pause = threading.Event()
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except OSError as exc:
            last = exc
        else:
            if last:
                return last
        pause.wait(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r:.500})")


def get_json(url: str, params: dict[str, str] | None = None) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(url + query, timeout=5) as response:
        return json.loads(response.read())


@contextmanager
def exporter(registry: CollectorRegistry) -> Iterator[str]:
    """Serve `registry` at http://127.0.0.1:<port>/metrics; yields `127.0.0.1:<port>`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class Process:
    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            # Its own session, so stopping it never signals the test runner.
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.proc.args[0]} exited {self.proc.returncode}: {self.tail()}")
        return True

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


def _ready(url: str, process: Process) -> bool:
    process.alive()
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextmanager
def alertmanager(directory: Path) -> Iterator[str]:
    """An Alertmanager with one receiver that sends nowhere; yields its URL."""
    ensure_installed()
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "alertmanager.yml"
    config.write_text(
        "route: {receiver: nowhere, group_wait: 0s, group_interval: 1s, repeat_interval: 1h}\n"
        "receivers: [{name: nowhere}]\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = Process(
        [
            ALERTMANAGER,
            f"--config.file={config}",
            f"--storage.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        directory / "alertmanager.log",
    )
    try:
        wait_for(lambda: _ready(url, process), f"Alertmanager ready at {url}")
        yield url
    finally:
        process.stop()


@contextmanager
def prometheus(
    directory: Path, targets: list[str], rules: str, *, alertmanager_url: str | None = None
) -> Iterator[str]:
    """A Prometheus scraping `targets` (host:port) every second with `rules` loaded; yields its URL."""
    ensure_installed()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "rules.yml").write_text(rules)
    alerting = ""
    if alertmanager_url is not None:
        host = urllib.parse.urlsplit(alertmanager_url).netloc
        alerting = f"alerting:\n  alertmanagers:\n    - static_configs: [{{targets: ['{host}']}}]\n"
    (directory / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [rules.yml]\n"
        f"{alerting}"
        "scrape_configs:\n"
        f"  - job_name: lab\n    static_configs: [{{targets: {json.dumps(targets)}}}]\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = Process(
        [
            PROMETHEUS,
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
        ],
        directory / "prometheus.log",
    )
    try:
        wait_for(lambda: _ready(url, process), f"Prometheus ready at {url}")
        yield url
    finally:
        process.stop()


def series_present(url: str, query: str) -> bool:
    doc = get_json(f"{url}/api/v1/query", {"query": query})
    return bool(doc["data"]["result"])


def alert_state(url: str, name: str) -> set[str]:
    doc = get_json(f"{url}/api/v1/alerts")
    return {a["state"] for a in doc["data"]["alerts"] if a["labels"].get("alertname") == name}
