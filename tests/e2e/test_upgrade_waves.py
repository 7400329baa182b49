"""The platform upgrade's widen stage in waves, on a rehearsal cluster of three failure domains
and two GPU products (runbooks/platform-upgrade.yaml, docs/upgrade-process.md "Widen"):

- with a canary of each product, the upgrade succeeds; the simulator's own node timeline shows
  that no two failure domains ever had a node out of service at once while the fleet widened,
  and the run shows a gate and an observe window for every wave;
- with a canary of one product only, the run is refused when it is planned, naming the product
  and the nodes no canary stood for, and no node is touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from ruamel.yaml import YAML
from temporalio.client import Client

from pitstop.demo import upgrade as du
from pitstop_sim.models import TimelineEvent
from tests.e2e.test_platform_upgrade import Upgrade, _failures, _run, _served, worker

__all__ = ["worker"]

pytestmark = pytest.mark.integration

A100 = "NVIDIA-A100-SXM4-80GB"
CANARIES = ["gpu-node-001", "gpu-node-006"]  # H100 in zone-a, A100 in zone-c


def _scenario(tmp_path: Path) -> Path:
    """The shipped upgrade rehearsal, widened to six GPU nodes in three zones (two each), the
    last one an A100 of the training pool, plus a CPU node of the system pool in zone-a and three
    control-plane nodes."""
    yaml = YAML(typ="safe")
    doc = yaml.load(du.SCENARIO.read_text())
    doc["name"] = "platform-upgrade-waves"
    doc["cluster"].update(nodes=7, domains=3)
    overrides = doc["cluster"]["node_overrides"]
    overrides["gpu-node-006"] = {"gpu_product": A100, "labels": {"pitstop.dev/pool": "training"}}
    overrides["gpu-node-007"] = {"gpus": 0, "labels": {"pitstop.dev/pool": "system"}}
    zones = ["zone-a", "zone-a", "zone-b", "zone-b", "zone-c", "zone-c", "zone-a"]
    for i, zone in enumerate(zones, start=1):
        overrides.setdefault(f"gpu-node-{i:03d}", {})["domain"] = zone
    doc["platform"]["control_plane"]["nodes"] = 3
    # The driver runs as the GPU Operator's container (ClusterPolicy driver.version), not from
    # host packages: the upgrade takes the operator path.
    doc["cluster"]["driver_management"] = "operator"
    path = tmp_path / "platform-upgrade-waves.yaml"
    with path.open("w") as out:
        yaml.dump(doc, out)
    return path


@pytest.fixture
def fleet(
    tmp_path: Path, s3_endpoint: str, etcd_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Upgrade]:
    yield from _served(_scenario(tmp_path), tmp_path, s3_endpoint, etcd_endpoint, monkeypatch)


def _canaries(up: Upgrade, canaries: list[str], etcd_endpoint: str) -> None:
    du.write_inventory(
        up.sim, up.inventory, s3_endpoint=up.s3_endpoint, etcd_endpoint=etcd_endpoint, canary=canaries
    )


def _domains_out_at_once(timeline: list[TimelineEvent], nodes: set[str]) -> int:
    """Most failure domains that had one of `nodes` out of service (cordoned or not Ready) at
    the same moment, walking the simulator's timeline in order."""
    out: dict[str, str] = {}
    most = 0
    for event in timeline:
        if event.node not in nodes:
            continue
        if event.unavailable:
            out[event.node] = event.domain
        else:
            out.pop(event.node, None)
        most = max(most, len(set(out.values())))
    return most


@pytest.mark.timeout(300)
async def test_a_product_without_a_canary_is_refused_before_any_node_is_touched(
    temporal_client: Client, worker: str, fleet: Upgrade, etcd_endpoint: str
) -> None:
    _canaries(fleet, ["gpu-node-001"], etcd_endpoint)
    before = fleet.sim.counters()
    report = await _run(temporal_client, worker, fleet.request(), within=120)
    assert report.status == "failed"
    assert (
        "stage 'widen' would change hosts that no canary in stage 'canary' stands for "
        f"(waves.canary.cover): {{{{ gpu_product if gpu_product is defined else "
        f"labels['nvidia.com/gpu.product'] }}}} = '{A100}' on 1 host (gpu-node-006)"
    ) in report.msg, report.msg
    after = fleet.sim.counters()
    assert (after.cordons, after.evictions_total, after.reboots) == (
        before.cordons,
        before.evictions_total,
        before.reboots,
    )


@pytest.mark.timeout(480)
async def test_the_fleet_widens_one_failure_domain_at_a_time_each_gated_and_observed(
    temporal_client: Client, worker: str, fleet: Upgrade, etcd_endpoint: str
) -> None:
    _canaries(fleet, CANARIES, etcd_endpoint)
    sim = fleet.sim
    report = await _run(temporal_client, worker, fleet.request(), within=420)
    assert report.status == "succeeded", (report.msg, _failures(report))
    for node in sim.gpu_node_names():
        if node != "gpu-node-007":  # the CPU node has no driver to upgrade
            assert sim.node_profile(node).driver_version == "570.86.15", node
        assert not sim.get("nodes", node)["spec"].get("unschedulable"), node

    # kubeadm's procedure: `upgrade apply` on the first control-plane node, `upgrade node` on
    # the others (the command each node ran, and each succeeded).
    ran = {
        h.host: [(t.data.get("cmd"), t.status) for t in h.tasks if t.name.startswith("Upgrade the control")]
        for h in next(s for s in report.stages if s.name == "control-plane").hosts
    }
    assert ran == {
        "cp-001": [("'kubeadm upgrade apply v1.31.2 --yes'", "changed")],
        "cp-002": [("'kubeadm upgrade node'", "changed")],
        "cp-003": [("'kubeadm upgrade node'", "changed")],
    }
    # Every pool's kubelets, the CPU node of the system pool too, by zone.
    components = next(s for s in report.stages if s.name == "node-components")
    assert "gpu-node-007" in {h.host for h in components.hosts if h.status == "ok"}
    assert sorted(w.wave for w in components.waves) == ["zone-a", "zone-b", "zone-c"]
    for node in sim.node_names():
        assert sim.get("nodes", node)["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.2", node

    widen = next(s for s in report.stages if s.name == "widen")
    # One wave per zone (in the order the inventory first names each zone's nodes).
    assert {w.wave: w.hosts for w in widen.waves} == {"zone-a": 1, "zone-b": 2, "zone-c": 1}
    # A gate before every wave: acceptance's for the first, the wave gates for the others.
    gates = {g.rule.gate_id: g for g in report.gates}
    assert gates["acceptance:after"].status == "approved"
    assert [w.gate for w in widen.waves] == [None] + [f"widen:wave-{w.wave}" for w in widen.waves[1:]]
    assert all(gates[w.gate].status == "approved" for w in widen.waves[1:] if w.gate)
    # Every wave was judged by the serving replica limit as it started, and let through.
    for wave in widen.waves:
        assert wave.checks is not None and wave.checks.endswith("none more than 50%"), wave.checks
    # ... and a window after every wave, before the next one's gate opened.
    for wave, following in zip(widen.waves, [*widen.waves[1:], None], strict=True):
        assert wave.started_at and wave.hosts_ended_at and wave.observed_until
        assert wave.hosts_ended_at < wave.observed_until
        if following is not None and following.gate:
            assert wave.observed_until <= gates[following.gate].opened_at
    assert len(widen.observations) >= 3 and all(o.status == "ok" for o in widen.observations)

    # The operator path: the operator was held off its own roll, and each GPU node's driver pod
    # was recreated while pitstop had that node cordoned (its last cordon of the run), never
    # before pitstop released it.
    policy = sim.get("clusterpolicies", "cluster-policy")
    assert policy is not None
    assert policy["spec"]["driver"]["version"] == "570.86.15"
    # Held through the run; given back at cleanup (every node runs the target: nothing to roll).
    assert policy["spec"]["driver"]["upgradePolicy"]["autoUpgrade"] is True
    cleanup = next(s for s in report.stages if s.name == "cleanup")
    [given] = [t for t in cleanup.hosts[0].tasks if t.name.startswith("Give the driver roll back")]
    assert given.status == "changed" and "autoUpgrade true" in given.msg
    pods = {
        p["spec"]["nodeName"]: p
        for p in sim.list("pods", "gpu-operator")
        if (p["metadata"].get("labels") or {}).get("app") == "nvidia-driver-daemonset"
    }
    gpu_nodes = [n for n in sim.gpu_node_names() if n != "gpu-node-007"]
    assert sorted(pods) == gpu_nodes
    everything = sim.timeline()
    for node in gpu_nodes:
        pod = pods[node]
        assert pod["spec"]["containers"][0]["image"].endswith(":570.86.15-ubuntu22.04"), node
        labels = sim.get("nodes", node)["metadata"].get("labels") or {}
        state = labels.get("nvidia.com/gpu-driver-upgrade-state")
        assert state in (None, "upgrade-done"), (node, state)
        cordoned = max(e.at for e in everything if e.node == node and e.event == "cordoned")
        uncordoned = max(e.at for e in everything if e.node == node and e.event == "uncordoned")
        created = datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        assert cordoned.replace(microsecond=0) <= created <= uncordoned, (node, cordoned, created, uncordoned)

    # The simulator's own record: while the fleet widened, never two zones out at once.
    widened = {h.host for h in widen.hosts}
    assert widened == {"gpu-node-002", "gpu-node-003", "gpu-node-004", "gpu-node-005"}
    start = min(h.started_at for h in widen.hosts)
    timeline = [e for e in sim.timeline() if e.at >= start]
    assert any(e.event == "cordoned" and e.node in widened for e in timeline)
    assert _domains_out_at_once(timeline, widened) == 1
