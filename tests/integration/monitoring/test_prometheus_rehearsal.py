"""The embedded stack's real Prometheus (Debian's /usr/bin/prometheus, started as the stack's
`prometheus` part) scrapes a rehearsal cluster's exporters with the alert pack loaded: an Xid
injected on one node fires GpuXidError for that node only; without it, nothing fires. A slow
etcd disk on a control-plane node fires EtcdWalFsyncSlow for that node."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from pitstop.devstack import DevStack
from pitstop.prometheus_stack import PrometheusLayout, write_sim_targets
from tests.integration.monitoring.conftest import StartSim
from tests.integration.monitoring.promstack import alerts_named, api, evaluated_after, scraping, wait_until

SCENARIO = """
    name: prometheus-rehearsal
    cluster: {nodes: 3, domains: 1, gpus_per_node: 2}
"""


def xid_alerts(stack: DevStack) -> list[dict[str, Any]]:
    return alerts_named(stack, "GpuXidError")


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
    scraping(prometheus, sim, "rehearsal")

    # No fault: the rules were evaluated over the scraped data, and no Xid alert.
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


def test_slow_etcd_fsync_on_a_control_plane_node_fires_for_that_node(
    prometheus: DevStack, start_sim: StartSim
) -> None:
    sim = start_sim(
        """
        name: etcd-rehearsal
        cluster: {nodes: 1, domains: 1, gpus_per_node: 1}
        platform:
          kubernetes_version: v1.30.6
          control_plane: {nodes: 1, name_prefix: cp-}
        """
    )
    write_sim_targets(prometheus.home, "etcd", sim.url, sim.gpu_node_names(), sim.control_plane_names())
    fsyncs = 'etcd_disk_wal_fsync_duration_seconds_count{node="cp-001"} > 0'
    wait_until("the etcd member's fsync histogram", lambda: api(prometheus, "query", query=fsyncs)["result"])
    seen = time.time()
    wait_until("an evaluation of the etcd rules", lambda: evaluated_after(prometheus, "pitstop-etcd", seen))
    assert alerts_named(prometheus, "EtcdWalFsyncSlow") == []

    slow = httpx.post(sim.url + "/_sim/nodes/cp-001/telemetry", json={"etcd_wal_fsync_seconds": 0.025})
    assert slow.status_code == 200, slow.text
    firing = wait_until(
        "EtcdWalFsyncSlow firing for cp-001",
        lambda: [a for a in alerts_named(prometheus, "EtcdWalFsyncSlow") if a["state"] == "firing"],
    )
    assert [(a["labels"]["node"], a["labels"]["cluster"]) for a in firing] == [("cp-001", "etcd")]
