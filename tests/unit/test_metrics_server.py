"""The worker's metrics server without a Temporal runtime: address parsing, what a scrape
returns, and an address that cannot be used is refused with one line."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest

from pitstop.metrics.registry import MODULE_FAILURES
from pitstop.metrics.server import MetricsAddressError, parse_address, start_metrics


def test_addresses() -> None:
    assert parse_address("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_address(":9464") == ("0.0.0.0", 9464)
    assert parse_address("[::1]:9464") == ("::1", 9464)
    for bad in ("9464", "host:", "host:70000", "host:http"):
        with pytest.raises(MetricsAddressError, match="is not HOST:PORT"):
            parse_address(bad)


def test_a_scrape_serves_pitstops_families_and_only_on_metrics() -> None:
    server = start_metrics("127.0.0.1:0", with_sdk=False)
    try:
        MODULE_FAILURES.labels("test.module", "Timeout").inc()
        with urllib.request.urlopen(f"http://{server.address}/metrics", timeout=5) as response:
            text = response.read().decode()
            assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert 'pitstop_module_failures_total{error_type="Timeout",module="test.module"} 1.0' in text
        assert "pitstop_runs_sweep_ok 0.0" in text and "pitstop_gates_waiting 0.0" in text
        with pytest.raises(urllib.error.HTTPError) as other:
            urllib.request.urlopen(f"http://{server.address}/", timeout=5)
        assert other.value.code == 404
    finally:
        server.stop()


def test_a_taken_port_is_refused_in_one_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(MetricsAddressError, match=f"cannot serve metrics on 127.0.0.1:{port}: "):
            start_metrics(f"127.0.0.1:{port}", with_sdk=False)
