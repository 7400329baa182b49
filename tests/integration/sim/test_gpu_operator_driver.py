"""The simulator's GPU Operator driver container (`cluster.driver_management: operator`): the
driver DaemonSet follows the ClusterPolicy's version, is OnDelete, a recreated pod brings its
driver to the node, and with autoUpgrade the operator rolls nodes itself."""

from __future__ import annotations

from typing import Any

from pitstop_sim import SimCluster
from pitstop_sim.annotations import DRIVER_VERSION_LABEL
from pitstop_sim.gpu_operator import UPGRADE_DONE, UPGRADE_STATE_LABEL, default_upgrade_policy
from tests.integration.sim.conftest import StartSim

TIMING = "timing: {time_scale: 50, pod_start_seconds: 2, recreate_delay_seconds: 1}"
OPERATOR = """
cluster: {nodes: 3, domains: 1, driver_management: operator}
"""
NEW = "570.86.15"
IN_PROGRESS = {
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
    "pod-restart-required",
    "validation-required",
    "uncordon-required",
}


def driver_pods(sim: SimCluster) -> dict[str, dict[str, Any]]:
    return {
        p["spec"]["nodeName"]: p
        for p in sim.list("pods", "gpu-operator", label_selector="app=nvidia-driver-daemonset")
        if not p["metadata"].get("deletionTimestamp")
    }


def driver_version(sim: SimCluster, node: str) -> str:
    return str((sim.get("nodes", node) or {})["metadata"]["labels"][DRIVER_VERSION_LABEL])


def set_policy(sim: SimCluster, driver: dict[str, Any]) -> None:
    sim.patch("clusterpolicies", "cluster-policy", {"spec": {"driver": driver}})


def test_an_operator_managed_driver_is_seeded_as_the_operator_deploys_it(start_sim: StartSim) -> None:
    sim = start_sim(TIMING, OPERATOR)
    policy = sim.get("clusterpolicies", "cluster-policy")
    assert policy is not None
    driver = policy["spec"]["driver"]
    assert driver["enabled"] is True and driver["version"] == "550.90.07"
    assert driver["upgradePolicy"] == default_upgrade_policy()
    ds = sim.get("daemonsets", "nvidia-driver-daemonset", "gpu-operator")
    assert ds is not None and ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "nvcr.io/nvidia/driver:550.90.07-ubuntu22.04"
    assert sorted(driver_pods(sim)) == sim.gpu_node_names()


def test_a_host_managed_driver_has_no_driver_container(start_sim: StartSim) -> None:
    sim = start_sim(TIMING, "cluster: {nodes: 2, domains: 1}")
    policy = sim.get("clusterpolicies", "cluster-policy")
    assert policy is not None and policy["spec"]["driver"]["enabled"] is False
    assert sim.get("daemonsets", "nvidia-driver-daemonset", "gpu-operator") is None
    assert driver_pods(sim) == {}
    assert sim.get("daemonsets", "nvidia-device-plugin-daemonset", "gpu-operator") is not None


def test_with_auto_upgrade_off_only_a_deleted_driver_pod_brings_the_new_driver(start_sim: StartSim) -> None:
    sim = start_sim(TIMING, OPERATOR)
    before = driver_pods(sim)
    set_policy(sim, {"version": NEW, "upgradePolicy": {"autoUpgrade": False}})
    sim.wait_for(
        lambda s: (
            (s.get("daemonsets", "nvidia-driver-daemonset", "gpu-operator") or {})["spec"]["template"][
                "spec"
            ]["containers"][0]["image"]
            == f"nvcr.io/nvidia/driver:{NEW}-ubuntu22.04"
        ),
        what="the DaemonSet to follow the ClusterPolicy",
    )
    assert {n: p["metadata"]["uid"] for n, p in driver_pods(sim).items()} == {
        n: p["metadata"]["uid"] for n, p in before.items()
    }, "OnDelete: no pod was replaced"
    sim.delete("pods", before["gpu-node-002"]["metadata"]["name"], "gpu-operator")
    sim.wait_for(lambda s: driver_version(s, "gpu-node-002") == NEW, what="the new driver on gpu-node-002")
    node = sim.get("nodes", "gpu-node-002") or {}
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == node["status"]["capacity"]["nvidia.com/gpu"]
    assert sim.node_profile("gpu-node-002").driver_version == NEW
    assert [driver_version(sim, n) for n in ("gpu-node-001", "gpu-node-003")] == ["550.90.07"] * 2
    after = driver_pods(sim)
    assert after["gpu-node-001"]["metadata"]["uid"] == before["gpu-node-001"]["metadata"]["uid"]
    assert not any(UPGRADE_STATE_LABEL in (sim.get("nodes", n) or {})["metadata"]["labels"] for n in after)


def test_with_auto_upgrade_on_the_operator_rolls_every_node_one_at_a_time(start_sim: StartSim) -> None:
    sim = start_sim(TIMING, OPERATOR)
    sim.wait_for(
        lambda s: all(
            (s.get("nodes", n) or {})["metadata"]["labels"].get(UPGRADE_STATE_LABEL) == UPGRADE_DONE
            for n in s.gpu_node_names()
        ),
        what="every node upgrade-done (in sync)",
    )
    set_policy(sim, {"version": NEW})
    most_at_once = 0

    def rolled(s: SimCluster) -> bool:
        nonlocal most_at_once
        states = [
            (s.get("nodes", n) or {})["metadata"]["labels"].get(UPGRADE_STATE_LABEL)
            for n in s.gpu_node_names()
        ]
        most_at_once = max(most_at_once, sum(1 for state in states if state in IN_PROGRESS))
        return all(state == UPGRADE_DONE for state in states) and all(
            driver_version(s, n) == NEW for n in s.gpu_node_names()
        )

    sim.wait_for(rolled, timeout=60, what="the operator to roll every node")
    assert most_at_once <= 1
    assert not any((sim.get("nodes", n) or {})["spec"].get("unschedulable") for n in sim.gpu_node_names())
