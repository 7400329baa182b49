"""The embedded stack's real Prometheus (Debian's /usr/bin/prometheus, started as the stack's
`prometheus` part) scrapes a rehearsal cluster's exporters with the alert pack loaded: an Xid
injected on one node fires GpuXidError for that node only; without it, nothing fires."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from pitstop.devstack import DevStack, free_port, free_ports_config
from pitstop.prometheus_stack import PROMETHEUS_BINARY, PrometheusLayout
from pitstop_sim import SimCluster
from tests.integration.monitoring.conftest import StartSim

SCENARIO = """
    name: prometheus-rehearsal
    cluster: {nodes: 3, domains: 1, gpus_per_node: 2}
"""


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[DevStack]:
    if not PROMETHEUS_BINARY.is_file():
        pytest.skip(
            f"{PROMETHEUS_BINARY} is not installed (Debian package `prometheus`; `make test` installs it)"
        )
    config = free_ports_config(tmp_path / "home", parts=("prometheus",), prometheus_port=free_port())
    with DevStack(config).running(timeout=60) as stack:
        yield stack


def api(stack: DevStack, path: str, **params: str) -> Any:
    response = httpx.get(stack.prometheus_url + "/api/v1/" + path, params=params, timeout=10)
    response.raise_for_status()
    body = response.json()
    assert body["status"] == "success", body
    return body["data"]


def wait_until(what: str, predicate: Any, timeout: float = 60.0) -> Any:
    """Poll until `predicate()` returns something truthy (Prometheus works on its own clock)."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def xid_alerts(stack: DevStack) -> list[dict[str, Any]]:
    return [a for a in api(stack, "alerts")["alerts"] if a["labels"]["alertname"] == "GpuXidError"]


def evaluated_after(stack: DevStack, group: str, moment: float) -> bool:
    for g in api(stack, "rules")["groups"]:
        if g["name"] == group and g["lastEvaluation"]:
            # RFC 3339 with nanoseconds; Prometheus's own clock is this machine's.
            stamp = g["lastEvaluation"][:26].rstrip("Z") + "+00:00"
            return datetime.fromisoformat(stamp).timestamp() > moment
    return False


def scraping(stack: DevStack, sim: SimCluster) -> None:
    def all_up() -> bool:
        targets = api(stack, "targets", state="active")["activeTargets"]
        sim_targets = [t for t in targets if t["labels"].get("cluster") == "rehearsal"]
        return len(sim_targets) == len(sim.gpu_node_names()) + 1 and all(
            t["health"] == "up" for t in sim_targets
        )

    wait_until("Prometheus to scrape every exporter of the rehearsal cluster", all_up)
    wait_until(
        "DCGM_FI_DEV_XID_ERRORS for every GPU",
        lambda: (
            len(api(stack, "query", query='DCGM_FI_DEV_XID_ERRORS{cluster="rehearsal"}')["result"]) == 3 * 2
        ),
    )


def test_stack_prometheus_loads_the_pack_and_scrapes_the_simulator(
    prometheus: DevStack, start_sim: StartSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = PrometheusLayout(home=prometheus.home)
    assert layout.config_file.is_file() and layout.rules_file.is_file()
    assert [s.name for s in prometheus.status() if s.healthy] == ["prometheus"]
    rules = {r["name"] for g in api(prometheus, "rules")["groups"] for r in g["rules"]}
    assert {"GpuXidError", "KubeNodeNotReady", "EtcdWalFsyncSlow"} <= rules
    sim = start_sim(SCENARIO)
    # Registering the cluster with the worker (as `pitstop sim serve` and the demo do) lists its
    # exporters for the Prometheus of the stack's home.
    monkeypatch.setenv("PITSTOP_HOME", str(prometheus.home))
    sim.register("rehearsal")
    assert (layout.targets_dir("dcgm-exporter") / "rehearsal.json").is_file()
    scraping(prometheus, sim)

    # No fault: rules evaluated over the scraped data, and no Xid alert.
    seen = time.time()
    wait_until("an evaluation of the GPU rules", lambda: evaluated_after(prometheus, "pitstop-gpu", seen))
    assert xid_alerts(prometheus) == []

    # An Xid on gpu-node-002's GPU 0 during the window: the alert fires for that node.
    response = httpx.post(sim.url + "/_sim/nodes/gpu-node-002/xid", json={"xid": 79, "gpu": 0})
    assert response.status_code == 201, response.text
    firing = wait_until(
        "GpuXidError firing for gpu-node-002",
        lambda: [a for a in xid_alerts(prometheus) if a["state"] == "firing"],
    )
    assert [(a["labels"]["node"], a["labels"]["gpu"], a["labels"]["severity"]) for a in firing] == [
        ("gpu-node-002", "0", "critical")
    ]
    assert firing[0]["labels"]["cluster"] == "rehearsal"
    assert firing[0]["annotations"]["summary"] == "Xid 79 on GPU 0 of node gpu-node-002"
    # prom.alerts-style selection by node: the API filters by the node label.
    by_node = api(prometheus, "query", query='ALERTS{alertstate="firing",node="gpu-node-002"}')["result"]
    assert {r["metric"]["alertname"] for r in by_node} >= {"GpuXidError"}

    # The GPU is reset: the alert resolves.
    assert httpx.delete(sim.url + "/_sim/nodes/gpu-node-002/xid").status_code == 200
    wait_until("GpuXidError to resolve", lambda: xid_alerts(prometheus) == [])
    # A stopped cluster is no longer scraped.
    sim.stop()
    assert list(layout.root.glob("targets/*/rehearsal.json")) == []
