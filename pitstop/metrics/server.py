"""The worker's `/metrics`: pitstop's families, then the Temporal SDK's, on one address.

The Temporal SDK's metrics come from its Rust core, whose Prometheus exporter
(`Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=...)))`) serves its
own HTTP endpoint; Python cannot add families to it, and it cannot be handed to
prometheus_client. Two public ports would mean two scrape targets, two NetworkPolicy holes and
two things to keep in step, so the core's exporter binds to a free *loopback* port and this
server, on the one address the operator chose (`--metrics-address`), answers each scrape with
pitstop's families followed by the core's text, fetched at that moment. Both are the
Prometheus text format 0.0.4; pitstop's names start with `pitstop_` (plus prometheus_client's
`process_`/`python_` families), the core's with `temporal_`, so no family appears twice.
`pitstop_temporal_sdk_metrics_up` says whether the core's part could be read.
"""

from __future__ import annotations

import logging
import socket
import threading
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import generate_latest
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from pitstop.metrics.registry import REGISTRY
from pitstop.metrics.runs import RunsCollector

log = logging.getLogger("pitstop.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
METRICS_ENV = "PITSTOP_METRICS_ADDRESS"
SDK_FETCH_TIMEOUT = 5.0


class MetricsAddressError(ValueError):
    """`--metrics-address` is not HOST:PORT, or the port cannot be bound."""


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise MetricsAddressError(f"metrics address {text!r} is not HOST:PORT (e.g. 0.0.0.0:9464)")
    return host.strip("[]") or "0.0.0.0", int(port)


def _free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def install_sdk_runtime() -> str:
    """Make the Temporal SDK's default runtime export its metrics on a loopback port; its URL.

    Must run before the first client connects (the client takes the default runtime then)."""
    address = f"127.0.0.1:{_free_loopback_port()}"
    runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=address)))
    try:
        Runtime.set_default(runtime, error_if_already_set=True)
    except RuntimeError as exc:
        raise MetricsAddressError(
            f"the Temporal runtime is already set up, cannot add metrics: {exc}"
        ) from None
    return f"http://{address}/metrics"


def _sdk_text(url: str) -> tuple[bytes, bool]:
    try:
        # Loopback, never through an environment proxy (HTTP_PROXY would answer instead).
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=SDK_FETCH_TIMEOUT) as response:
            return response.read(), True
    except OSError as exc:
        log.warning("Temporal SDK metrics not read from %s: %s", url, exc)
        return b"", False


def exposition(sdk_url: str | None) -> bytes:
    """pitstop's families, then the SDK's (when it runs), then whether the SDK's were read."""
    ours = generate_latest(REGISTRY)
    if sdk_url is None:
        return ours
    theirs, ok = _sdk_text(sdk_url)
    up = (
        b"# HELP pitstop_temporal_sdk_metrics_up 1 when the Temporal SDK metrics were read.\n"
        b"# TYPE pitstop_temporal_sdk_metrics_up gauge\n"
        b"pitstop_temporal_sdk_metrics_up " + (b"1" if ok else b"0") + b"\n"
    )
    if theirs and not theirs.endswith(b"\n"):
        theirs += b"\n"
    return ours + up + theirs


@dataclass
class MetricsServer:
    address: str  # host:port it listens on
    sdk_url: str | None
    runs: RunsCollector
    httpd: ThreadingHTTPServer
    thread: threading.Thread

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
        REGISTRY.unregister(self.runs)


def start_metrics(address: str, *, with_sdk: bool = True) -> MetricsServer:
    """Serve `/metrics` on `address` (HOST:PORT) from a daemon thread; the SDK's runtime is
    installed first when `with_sdk`. MetricsAddressError when the address cannot be used."""
    host, port = parse_address(address)
    sdk_url = install_sdk_runtime() if with_sdk else None
    runs = RunsCollector()
    REGISTRY.register(runs)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "pitstop serves /metrics")
                return
            body = exposition(sdk_url)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    try:
        httpd = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        REGISTRY.unregister(runs)
        raise MetricsAddressError(f"cannot serve metrics on {address}: {exc.strerror or exc}") from None
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="pitstop-metrics", daemon=True)
    thread.start()
    bound = f"{host}:{httpd.server_address[1]}"
    log.info("metrics on http://%s/metrics (Temporal SDK's: %s)", bound, sdk_url or "off")
    return MetricsServer(address=bound, sdk_url=sdk_url, runs=runs, httpd=httpd, thread=thread)
