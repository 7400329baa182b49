"""`kube.wave_replicas` against the rehearsal cluster: a wave (one zone's nodes) that holds more
than the allowed share of a serving Deployment's replicas is refused, naming the Deployment and
the counts; a Deployment spread over the zones, a CPU Deployment, or another zone pass. The
counts come from where the simulator's scheduler put the pods, read back with the official
client, not from the scenario."""

from __future__ import annotations

from collections import Counter

import pytest
from kubernetes import client as k8s
from kubernetes import config
from temporalio.exceptions import ApplicationError

from activities.kube.serving import wave_replicas
from tests.integration.kube.conftest import ModuleRunner
from tests.integration.sim.conftest import StartSim

SCENARIO = """
name: wave-replicas
cluster: {nodes: 6, domains: 3, gpus_per_node: 8}
workloads:
  deployments:
    - name: packed
      namespace: serving
      replicas: 4
      gpus: 1
      placement: [gpu-node-001, gpu-node-002, gpu-node-002, gpu-node-003]
    - name: spread
      namespace: serving
      replicas: 3
      gpus: 1
      topology_spread: [{max_skew: 1}]
    - name: web
      namespace: serving
      replicas: 2
      placement: [gpu-node-001, gpu-node-002]
"""


def _zones(core: k8s.CoreV1Api) -> dict[str, list[str]]:
    zones: dict[str, list[str]] = {}
    for node in core.list_node().items:
        zones.setdefault(node.metadata.labels["topology.kubernetes.io/zone"], []).append(node.metadata.name)
    return zones


def _scheduled(core: k8s.CoreV1Api) -> bool:
    pods = core.list_namespaced_pod("serving").items
    return len(pods) == 9 and all(p.spec.node_name for p in pods)


def test_a_wave_holding_too_much_of_a_deployment_is_refused(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(SCENARIO)
    core = k8s.CoreV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig_path)))
    sim.wait_for(lambda _: _scheduled(core), what="every serving replica on a node")
    zones = _zones(core)
    pods = core.list_namespaced_pod("serving").items
    placed = Counter(
        (p.metadata.name.rsplit("-", 2)[0], zone)
        for p in pods
        for zone, nodes in zones.items()
        if p.spec.node_name in nodes
    )
    zone_a = zones["zone-a"]
    assert placed[("packed", "zone-a")] == 3  # gpu-node-001 and -002 (the scenario's placement)
    before = sim.counters().requests

    refused = module_runner(wave_replicas, sim, {"nodes": zone_a, "max_percent": 50}, host="localhost")
    assert refused.failed and not refused.changed
    assert refused.msg.startswith(
        "1 serving Deployment(s) would move more than 50% of their replicas to the new version at "
        f"once on {len(zone_a)} node(s): serving/packed: 3 of 4 replicas on these nodes (at most 2)"
    ), refused.msg
    rows = {r["deployment"]: r for r in refused.data["deployments"]}
    # The spread Deployment has one replica per zone; the CPU one is not serving on GPUs.
    assert rows["serving/spread"]["on_wave"] == placed[("spread", "zone-a")] == 1
    assert "serving/web" not in rows

    assert not module_runner(
        wave_replicas, sim, {"nodes": zone_a, "max_percent": 75}, host="localhost"
    ).failed
    other = module_runner(wave_replicas, sim, {"nodes": zones["zone-c"]}, host="localhost")
    assert not other.failed, other.msg
    assert other.msg.endswith("none more than 50%")
    # Read-only.
    writes = {
        k: v - before.get(k, 0)
        for k, v in sim.counters().requests.items()
        if not k.startswith(("get", "list", "watch"))
    }
    assert not any(writes.values()), writes


def test_bad_arguments_say_what_is_wrong(start_sim: StartSim, module_runner: ModuleRunner) -> None:
    sim = start_sim(SCENARIO)
    for args, said in (
        ({"nodes": []}, "nodes"),
        ({"nodes": ["gpu-node-001"], "max_percent": 0}, "max_percent"),
        ({"nodes": ["Not A Node!"]}, "node name"),
    ):
        with pytest.raises(ApplicationError) as refused:
            module_runner(wave_replicas, sim, args, host="localhost")
        assert refused.value.type == "InvalidArgs"
        assert refused.value.message.startswith("kube.wave_replicas: ") and said in refused.value.message
