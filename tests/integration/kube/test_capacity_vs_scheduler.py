"""pitstop's pre-drain capacity check and the rehearsal cluster's scheduler, each written from
kube-scheduler's PodTopologySpread and InterPodAffinity filters on its own, agree: a drain the
check refuses because a replica would have nowhere its spread or anti-affinity allows leaves that
replica Pending when it is done anyway, through the API, with kube-scheduler's reasons."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, config
from temporalio.exceptions import ApplicationError

from activities.kube.capacity import capacity_check
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim

Obj = dict[str, Any]

CLUSTERS = {
    "anti-affinity": (
        """
        cluster: {nodes: 3, domains: 1, gpus_per_node: 8}
        timing: {time_scale: 20}
        workloads:
          deployments:
            - name: web
              namespace: serving
              replicas: 3
              gpus: 4
              pdb: {max_unavailable: 1}
              anti_affinity: kubernetes.io/hostname
        """,
        "anti-affinity with app=web on kubernetes.io/hostname",
        "2 node(s) didn't match pod anti-affinity rules",
    ),
    "zone spread": (
        """
        cluster: {nodes: 3, domains: 3, gpus_per_node: 8}
        timing: {time_scale: 20}
        workloads:
          deployments:
            - name: web
              namespace: serving
              replicas: 3
              gpus: 4
              pdb: {max_unavailable: 1}
              topology_spread: [{max_skew: 1}]
        """,
        "topology spread on topology.kubernetes.io/zone (app=web): maxSkew 1 would be exceeded",
        "2 node(s) didn't match pod topology spread constraints",
    ),
}


def _replicas(sim: SimCluster) -> list[Obj]:
    return [
        p
        for p in sim.list("pods", "serving", label_selector="app=web")
        if not p["metadata"].get("deletionTimestamp")
    ]


def _unschedulable_message(pod: Obj) -> str | None:
    for c in pod["status"].get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
            return str(c["message"])
    return None


@pytest.mark.parametrize("case", sorted(CLUSTERS))
def test_a_drain_the_capacity_check_refuses_leaves_the_replacement_pending(
    start_sim: StartSim, module_runner: ModuleRunner, case: str
) -> None:
    scenario, check_reason, scheduler_reason = CLUSTERS[case]
    sim = start_sim(scenario)
    # One replica per node, placed by the scheduler at start.
    sim.wait_for(
        lambda s: (
            sorted(p["spec"].get("nodeName") or "" for p in _replicas(s))
            == ["gpu-node-001", "gpu-node-002", "gpu-node-003"]
            and all(p["status"].get("phase") == "Running" for p in _replicas(s))
        ),
        timeout=30,
        what="one running replica per node",
    )

    with pytest.raises(ApplicationError) as refused:
        module_runner(capacity_check, sim, {"nodes": ["gpu-node-001"]})
    assert refused.value.type == "PreconditionFailed"
    message = refused.value.message
    assert message.startswith("not enough capacity if gpu-node-001 leave: not enough GPUs: ")
    assert check_reason in message, message

    # Drained anyway, through the API: cordoned, its replica evicted.
    api_client = config.new_client_from_config(config_file=str(sim.kubeconfig_path))
    try:
        core = client.CoreV1Api(api_client)
        core.patch_node("gpu-node-001", {"spec": {"unschedulable": True}})
        (evicted,) = [p for p in _replicas(sim) if p["spec"].get("nodeName") == "gpu-node-001"]
        name = evicted["metadata"]["name"]
        core.create_namespaced_pod_eviction(
            name, "serving", client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace="serving"))
        )
    finally:
        api_client.close()

    expected = (
        f"0/3 nodes are available: 1 node(s) were unschedulable, {scheduler_reason}."
        " preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )

    def replacement_waits(s: SimCluster) -> bool:
        return any(_unschedulable_message(p) == expected for p in _replicas(s))

    # The scheduler judges again on every pod or node change, never on time alone: its verdict,
    # once given, is the state to check (no fixed wait for "later").
    sim.wait_for(replacement_waits, timeout=30, what="the replacement to be unschedulable")
    pods = _replicas(sim)
    assert len(pods) == 3
    (replacement,) = [p for p in pods if not p["spec"].get("nodeName")]
    assert replacement["metadata"]["name"] != name
    assert replacement["status"]["phase"] == "Pending"
    assert _unschedulable_message(replacement) == expected
    assert sorted(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")) == [
        "gpu-node-002",
        "gpu-node-003",
    ]
