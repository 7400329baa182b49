"""gpu.driver_management, gpu.operator_driver_hold and gpu.operator_driver_node against the
rehearsal cluster's GPU Operator driver container (`cluster.driver_management: operator`),
called as activities in-process; kubectl reads and writes the cluster as a second client."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.gpu_driver import driver_management, operator_driver_hold, operator_driver_node
from pitstop.gpu.operator import UPGRADE_IN_PROGRESS, UPGRADE_STATE_LABEL
from pitstop_sim import SimCluster
from pitstop_sim.annotations import DRIVER_VERSION_LABEL
from tests.integration.kube.conftest import ModuleRunner, StartSim
from tests.integration.sim.conftest import Kubectl, kubectl_for

__all__ = ["kubectl_for"]

OLD, NEW = "550.90.07", "570.86.15"
TIMING = "timing: {time_scale: 50, pod_start_seconds: 2, recreate_delay_seconds: 1}"
OPERATOR = "cluster: {nodes: 4, domains: 2, driver_management: operator}"
NODE_ARGS = {"poll_interval_seconds": 0.05, "timeout_seconds": 30, "version_label": DRIVER_VERSION_LABEL}


def driver_pods(sim: SimCluster) -> dict[str, dict[str, Any]]:
    return {
        p["spec"]["nodeName"]: p
        for p in sim.list("pods", "gpu-operator", label_selector="app=nvidia-driver-daemonset")
        if not p["metadata"].get("deletionTimestamp")
    }


def uids(sim: SimCluster) -> dict[str, str]:
    return {node: pod["metadata"]["uid"] for node, pod in driver_pods(sim).items()}


def versions(sim: SimCluster) -> dict[str, str]:
    """What each node reports: its label and `nvidia-smi` (the simulator's node profile)."""
    out = {}
    for node in sim.gpu_node_names():
        label = (sim.get("nodes", node) or {})["metadata"]["labels"][DRIVER_VERSION_LABEL]
        assert label == sim.node_profile(node).driver_version
        out[node] = label
    return out


def policy_driver(kubectl: Kubectl) -> dict[str, Any]:
    policy = json.loads(kubectl("get", "clusterpolicies.nvidia.com", "cluster-policy", "-o", "json"))
    return dict(policy["spec"]["driver"])


def template_image(sim: SimCluster) -> str:
    ds = sim.get("daemonsets", "nvidia-driver-daemonset", "gpu-operator") or {}
    return str(ds["spec"]["template"]["spec"]["containers"][0]["image"])


def test_with_the_operator_held_driver_pods_roll_only_where_and_when_pitstop_releases_them(
    start_sim: StartSim, module_runner: ModuleRunner, kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    sim = start_sim(TIMING, OPERATOR)
    kubectl = kubectl_for(sim)
    first = uids(sim)
    preview = module_runner(operator_driver_hold, sim, {"version": NEW}, host="localhost", check_mode=True)
    assert (preview.changed, preview.msg) == (
        True,
        f"would set ClusterPolicy cluster-policy: autoUpgrade false, driver.version {OLD} -> {NEW}",
    )
    assert policy_driver(kubectl)["version"] == OLD and policy_driver(kubectl)["upgradePolicy"]["autoUpgrade"]

    held = module_runner(operator_driver_hold, sim, {"version": NEW}, host="localhost")
    assert held.changed and held.data["version_before"] == OLD and held.data["auto_upgrade_before"] is True
    driver = policy_driver(kubectl)
    assert (driver["version"], driver["upgradePolicy"]["autoUpgrade"]) == (NEW, False)
    assert driver["upgradePolicy"]["maxParallelUpgrades"] == 1, "the rest of the policy is kept"
    again = module_runner(operator_driver_hold, sim, {"version": NEW}, host="localhost")
    assert (again.changed, again.msg) == (
        False,
        f"ClusterPolicy cluster-policy already holds the driver ({NEW})",
    )
    sim.wait_for(
        lambda s: template_image(s) == f"nvcr.io/nvidia/driver:{NEW}-ubuntu22.04", what="the template"
    )

    released: list[str] = []
    for node in ("gpu-node-003", "gpu-node-001"):
        # Until pitstop releases a node, its driver pod and version are the ones it started with.
        assert uids(sim)[node] == first[node]
        assert versions(sim)[node] == OLD
        result = module_runner(operator_driver_node, sim, NODE_ARGS, host=node)
        released.append(node)
        assert result.changed and result.msg.startswith(f"{node}: recreated driver pod ")
        assert (result.data["before"]["version"], result.data["after"]["version"]) == (OLD, NEW)
        now = versions(sim)
        assert {n for n, v in now.items() if v == NEW} == set(released)
        assert {n: u for n, u in uids(sim).items() if n not in released} == {
            n: u for n, u in first.items() if n not in released
        }, "no other node's driver pod was touched"
        node_obj = sim.get("nodes", node) or {}
        assert node_obj["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    # The operator never marked a node for its own upgrade.
    assert not any(UPGRADE_STATE_LABEL in (sim.get("nodes", n) or {})["metadata"]["labels"] for n in first)
    # Released again, the node is already there: nothing to do.
    done = module_runner(operator_driver_node, sim, NODE_ARGS, host="gpu-node-003")
    assert done.changed is False and done.msg.startswith("gpu-node-003: found driver pod ")

    # Once every node runs the new driver, the roll goes back to the operator as it was before.
    for node in first:
        if node not in released:
            module_runner(operator_driver_node, sim, NODE_ARGS, host=node)
    pods = uids(sim)
    given = module_runner(operator_driver_hold, sim, {"version": NEW, "auto_upgrade": True}, host="localhost")
    assert (given.changed, given.msg) == (True, "set ClusterPolicy cluster-policy: autoUpgrade true")
    assert policy_driver(kubectl)["upgradePolicy"]["autoUpgrade"] is True
    assert uids(sim) == pods, "nothing left for the operator to roll"


def test_without_the_hold_the_operator_rolls_every_node_itself(
    start_sim: StartSim, module_runner: ModuleRunner, kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    """What pitstop prevents: with autoUpgrade on (the chart's default), a version change alone
    cordons and restarts every node, no pitstop module involved."""
    sim = start_sim(TIMING, OPERATOR)
    kubectl = kubectl_for(sim)
    kubectl("patch", "clusterpolicies.nvidia.com", "cluster-policy", "--type=merge", "-p", json.dumps(
        {"spec": {"driver": {"version": NEW}}}
    ))  # fmt: skip
    seen: set[str] = set()

    def rolled(s: SimCluster) -> bool:
        for node in s.gpu_node_names():
            labels = (s.get("nodes", node) or {})["metadata"]["labels"]
            if labels.get(UPGRADE_STATE_LABEL) in UPGRADE_IN_PROGRESS:
                seen.add(node)
        return set(versions(s).values()) == {NEW}

    sim.wait_for(rolled, timeout=60, what="the operator's own rollout")
    assert seen, "the operator took nodes through its upgrade states"
    # And pitstop refuses to race it.
    with pytest.raises(ApplicationError) as refused:
        module_runner(operator_driver_node, sim, NODE_ARGS, host="gpu-node-001")
    assert refused.value.type == "PolicyViolation"
    assert "autoUpgrade true" in refused.value.message and "gpu.operator_driver_hold" in refused.value.message


def test_driver_management_tells_the_operator_from_host_packages(
    start_sim: StartSim, module_runner: ModuleRunner, kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    operator = start_sim(TIMING, OPERATOR)
    found = module_runner(driver_management, operator, {}, host="gpu-node-002")
    assert found.data["management"] == "operator"
    assert (found.data["version"], found.data["auto_upgrade"], found.data["running_version"]) == (
        OLD,
        True,
        OLD,
    )
    assert found.data["image"] == f"nvcr.io/nvidia/driver:{OLD}-ubuntu22.04"
    assert found.data["driver_pod"] == driver_pods(operator)["gpu-node-002"]["metadata"]["name"]

    kubectl_for(operator)("patch", "clusterpolicies.nvidia.com", "cluster-policy", "--type=merge", "-p",
                          '{"spec": {"driver": {"usePrecompiled": true}}}')  # fmt: skip
    assert (
        module_runner(driver_management, operator, {}, host="gpu-node-002").data["management"]
        == "precompiled"
    )

    host = start_sim(TIMING, "cluster: {nodes: 2, domains: 1}")
    result = module_runner(driver_management, host, {}, host="gpu-node-001")
    assert result.data["management"] == "host"
    assert result.msg == (
        "gpu-node-001: host-managed driver "
        "(ClusterPolicy cluster-policy has driver.enabled false, no driver pod)"
    )


def test_driver_management_fails_closed_while_the_driver_pod_is_away(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim("timing: {time_scale: 50, recreate_delay_seconds: 36000}", OPERATOR)
    sim.delete("pods", driver_pods(sim)["gpu-node-001"]["metadata"]["name"], "gpu-operator")
    sim.wait_for(lambda s: "gpu-node-001" not in driver_pods(s), what="the driver pod to go")
    with pytest.raises(ApplicationError) as unsure:
        module_runner(driver_management, sim, {}, host="gpu-node-001")
    assert unsure.value.type == "PreconditionFailed"
    assert unsure.value.message == (
        "cannot tell how gpu-node-001's driver is managed: ClusterPolicy cluster-policy manages the "
        "driver but gpu-node-001 has no single Ready driver pod in gpu-operator (no driver pod); look "
        "again when the driver pod is Ready"
    )


def test_without_a_cluster_policy_nothing_is_changed_and_the_error_says_why(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(TIMING, "cluster: {nodes: 2, domains: 1, gpu_operator: false}")
    for activity, host in ((operator_driver_hold, "localhost"), (operator_driver_node, "gpu-node-001")):
        with pytest.raises(ApplicationError) as refused:
            module_runner(activity, sim, {"version": NEW}, host=host)
        assert refused.value.type == "PreconditionFailed"
        assert "no ClusterPolicy found in rehearsal" in refused.value.message
        assert refused.value.message.endswith("is the GPU Operator installed? Nothing was changed")
    requests = sim.counters().requests
    assert requests and all(r.split()[0] in ("get", "list") for r in requests), requests
    assert module_runner(driver_management, sim, {}, host="gpu-node-001").data["management"] == "host"


def test_an_unknown_node_is_refused_before_anything_changes(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(TIMING, OPERATOR)
    module_runner(operator_driver_hold, sim, {"version": NEW}, host="localhost")
    first = uids(sim)
    for activity in (operator_driver_node, driver_management):
        with pytest.raises(ApplicationError) as refused:
            module_runner(
                activity, sim, NODE_ARGS if activity is operator_driver_node else {}, host="gpu-node-999"
            )
        assert refused.value.type == "PreconditionFailed"
        assert refused.value.message.startswith("node 'gpu-node-999' not found in rehearsal")
    assert uids(sim) == first


def test_a_driver_that_never_becomes_ready_times_out_with_the_pods_state_and_events(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(
        TIMING,
        OPERATOR,
        'registry: {available: ["nvcr.io/nvidia/k8s*", "nvcr.io/nvidia/driver:550.90.07-*", "registry*"]}',
    )
    module_runner(operator_driver_hold, sim, {"version": NEW}, host="localhost")
    sim.wait_for(lambda s: template_image(s).endswith(f"{NEW}-ubuntu22.04"), what="the template")
    with pytest.raises(ApplicationError) as late:
        module_runner(operator_driver_node, sim, {**NODE_ARGS, "timeout_seconds": 3}, host="gpu-node-002")
    assert late.value.type == "Timeout"
    message = late.value.message
    assert message.startswith(f"gpu-node-002's driver is not {NEW} after ")
    assert "not Ready" in message and ("ErrImagePull" in message or "ImagePullBackOff" in message)
    assert "events: " in message and f"nvcr.io/nvidia/driver:{NEW}-ubuntu22.04" in message
    assert versions(sim)["gpu-node-002"] == OLD
