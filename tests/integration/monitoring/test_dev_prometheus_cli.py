"""`pitstop dev up --with prometheus | status | down` as a user runs them (separate processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pitstop.devstack import free_port, port_free, process_alive
from pitstop.prometheus_stack import PROMETHEUS_BINARY


def dev(home: Path, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pitstop.cli.dev", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "400", "PITSTOP_PROMETHEUS_PORT": str(port)},
    )


def test_dev_up_with_prometheus_prints_its_url_and_down_stops_it(tmp_path: Path) -> None:
    if not PROMETHEUS_BINARY.is_file():
        pytest.skip(
            f"{PROMETHEUS_BINARY} is not installed (Debian package `prometheus`; `make test` installs it)"
        )
    home = tmp_path / "home"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    pid: int | None = None
    try:
        # Of the default parts only etcd (the quickest to start), plus Prometheus.
        up = dev(
            home,
            port,
            "up",
            "--parts",
            "etcd",
            "--etcd-port",
            str(free_port()),
            "--etcd-peer-port",
            str(free_port()),
            "--with",
            "prometheus",
        )
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"Prometheus: {url}" in up.stdout
        assert httpx.get(url + "/-/ready", timeout=5).status_code == 200
        pid = int((home / "run" / "prometheus.pid").read_text())
        # Runbooks' prom.* modules may query it under the stack's worker policy.
        assert f"prometheus:\n  endpoints: [{url}]" in (home / "worker-policy.yaml").read_text()
        status = dev(home, port, "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"Prometheus: {url}" in status.stdout
        assert "prometheus" in status.stdout
    finally:
        down = dev(home, port, "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "prometheus" in down.stdout
    assert pid is not None and not process_alive(pid)
    assert port_free("127.0.0.1", port)


def test_dev_up_refuses_an_unknown_optional_part(tmp_path: Path) -> None:
    result = dev(tmp_path / "home", free_port(), "up", "--with", "grafana")
    assert result.returncode == 2
    assert "unknown optional part 'grafana'" in result.stderr
