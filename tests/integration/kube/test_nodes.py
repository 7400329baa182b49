"""kube.cordon / uncordon / taint / untaint / annotate / wait_node_ready against the rehearsal
cluster, called as activities in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.nodes import annotate, cordon, taint, uncordon, untaint, wait_node_ready
from pitstop.kube.objects import node_is_ready
from pitstop.policy.clusters import register_cluster
from pitstop.runbook.inventory import ClusterConfig
from pitstop_sim import ApiErrorFault, SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim

CLUSTER = """
cluster:
  nodes: 3
  domains: 1
  node_overrides:
    gpu-node-002: {unschedulable: true}
timing: {time_scale: 50, reboot_seconds: 20}
faults:
  nodes_never_return: [gpu-node-003]
"""


def node(sim: SimCluster, name: str) -> dict[str, object]:
    found = sim.get("nodes", name)
    assert found is not None
    return found


def notes(sim: SimCluster, name: str) -> dict[str, str]:
    return dict(node(sim, name)["metadata"].get("annotations") or {})  # type: ignore[index, union-attr]


def unschedulable(sim: SimCluster, name: str) -> bool:
    return bool(node(sim, name)["spec"].get("unschedulable"))  # type: ignore[index, union-attr]


def test_cordon_records_the_prior_state_and_uncordon_restores_it(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    first = module_runner(cordon, sim, {"reason": "firmware 96.00.9F"}, run_id="run-42")
    assert (first.changed, first.msg) == (True, "cordoned gpu-node-001")
    assert unschedulable(sim, "gpu-node-001")
    assert {k: v for k, v in notes(sim, "gpu-node-001").items() if k.startswith("pitstop.dev/")} == {
        "pitstop.dev/cordoned-by": "run-42",
        "pitstop.dev/was-unschedulable": "false",
        "pitstop.dev/cordon-reason": "firmware 96.00.9F",
    }
    again = module_runner(cordon, sim, {}, run_id="run-42")
    assert (again.changed, again.msg) == (False, "gpu-node-001 is already cordoned by pitstop (run run-42)")
    back = module_runner(uncordon, sim, {})
    assert (back.changed, back.msg, back.data["left_cordoned"]) == (True, "uncordoned gpu-node-001", False)
    assert not unschedulable(sim, "gpu-node-001")
    assert not any(k.startswith("pitstop.dev/") for k in notes(sim, "gpu-node-001"))
    assert module_runner(uncordon, sim, {}).changed is False
    counters = sim.counters()
    assert (counters.cordons, counters.uncordons) == ({"gpu-node-001": 1}, {"gpu-node-001": 1})


def test_a_node_cordoned_before_maintenance_is_still_cordoned_afterwards(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    recorded = module_runner(cordon, sim, {}, host="gpu-node-002")
    assert recorded.changed
    assert recorded.msg == (
        "recorded that gpu-node-002 was already unschedulable, so that kube.uncordon leaves it cordoned"
    )
    assert recorded.data["was_unschedulable"] is True
    assert notes(sim, "gpu-node-002")["pitstop.dev/was-unschedulable"] == "true"
    result = module_runner(uncordon, sim, {}, host="gpu-node-002")
    assert result.msg == "left cordoned: it was unschedulable before pitstop cordoned it (gpu-node-002)"
    assert result.data["left_cordoned"] is True
    assert unschedulable(sim, "gpu-node-002")
    assert not any(k.startswith("pitstop.dev/") for k in notes(sim, "gpu-node-002"))
    # No record any more: still left alone, with the reason why.
    again = module_runner(uncordon, sim, {}, host="gpu-node-002")
    assert (again.changed, again.data["left_cordoned"]) == (False, True)
    assert "pitstop has no record of cordoning gpu-node-002" in again.msg
    assert sim.counters().uncordons == {}
    forced = module_runner(uncordon, sim, {"force": True}, host="gpu-node-002")
    assert (forced.changed, forced.msg) == (True, "uncordoned gpu-node-002 (force: true)")
    assert not unschedulable(sim, "gpu-node-002")


def test_a_node_marked_maintenance_failed_stays_cordoned_until_forced(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    module_runner(cordon, sim, {})
    marked = module_runner(
        annotate, sim, {"annotations": {"pitstop.dev/maintenance-failed": "dcgm diag: Memory failed"}}
    )
    assert (marked.changed, marked.msg) == (True, "annotated gpu-node-001: pitstop.dev/maintenance-failed")
    assert (
        module_runner(
            annotate, sim, {"annotations": {"pitstop.dev/maintenance-failed": "dcgm diag: Memory failed"}}
        ).changed
        is False
    )
    result = module_runner(uncordon, sim, {})
    assert result.changed is False
    assert result.msg == (
        "left cordoned: gpu-node-001 is marked pitstop.dev/maintenance-failed: dcgm diag: Memory failed "
        "(force: true uncordons it)"
    )
    assert unschedulable(sim, "gpu-node-001")
    cleared = module_runner(annotate, sim, {"annotations": {"pitstop.dev/maintenance-failed": None}})
    assert cleared.changed and "pitstop.dev/maintenance-failed" not in notes(sim, "gpu-node-001")
    assert module_runner(uncordon, sim, {}).msg == "uncordoned gpu-node-001"


def test_check_mode_reports_and_changes_nothing(start_sim: StartSim, module_runner: ModuleRunner) -> None:
    sim = start_sim(CLUSTER)
    before = node(sim, "gpu-node-001")["metadata"]["resourceVersion"]  # type: ignore[index]
    planned = module_runner(cordon, sim, {}, check_mode=True)
    assert (planned.changed, planned.msg) == (True, "would cordon gpu-node-001")
    tainted = module_runner(taint, sim, {"key": "pitstop.dev/maintenance"}, check_mode=True)
    assert tainted.msg == "would taint gpu-node-001 with pitstop.dev/maintenance:NoSchedule"
    marked = module_runner(annotate, sim, {"annotations": {"a": "b"}}, check_mode=True)
    assert marked.msg == "would annotate gpu-node-001: a"
    assert module_runner(uncordon, sim, {}, check_mode=True).changed is False
    assert node(sim, "gpu-node-001")["metadata"]["resourceVersion"] == before  # type: ignore[index]
    assert not unschedulable(sim, "gpu-node-001")


def test_taints_default_to_noschedule_and_noexecute_needs_to_be_allowed(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    added = module_runner(taint, sim, {"key": "pitstop.dev/maintenance", "value": "fw"})
    assert (added.changed, added.msg) == (
        True,
        "tainted gpu-node-001 with pitstop.dev/maintenance=fw:NoSchedule",
    )
    assert module_runner(taint, sim, {"key": "pitstop.dev/maintenance", "value": "fw"}).changed is False
    taints = node(sim, "gpu-node-001")["spec"]["taints"]  # type: ignore[index]
    assert {"key": "pitstop.dev/maintenance", "value": "fw", "effect": "NoSchedule"} in taints
    with pytest.raises(ApplicationError) as refused:
        module_runner(taint, sim, {"key": "evict-now", "effect": "NoExecute"})
    assert refused.value.type == "PolicyViolation" and refused.value.non_retryable
    assert "NoExecute evicts running pods at once" in refused.value.message
    assert "allow_noexecute: true" in refused.value.message
    allowed = module_runner(taint, sim, {"key": "evict-now", "effect": "NoExecute", "allow_noexecute": True})
    assert allowed.changed
    removed = module_runner(untaint, sim, {"key": "pitstop.dev/maintenance"})
    assert (removed.changed, removed.data["removed"]) == (True, ["pitstop.dev/maintenance=fw:NoSchedule"])
    assert module_runner(untaint, sim, {"key": "pitstop.dev/maintenance"}).changed is False
    keys = [t["key"] for t in node(sim, "gpu-node-001")["spec"]["taints"]]  # type: ignore[index]
    assert "pitstop.dev/maintenance" not in keys and "evict-now" in keys


def test_node_comes_from_args_then_node_name_var_then_host(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    by_var = module_runner(cordon, sim, {}, host="h1", host_vars={"node_name": "gpu-node-003"})
    assert by_var.data["node"] == "gpu-node-003"
    by_arg = module_runner(
        cordon, sim, {"node": "gpu-node-001"}, host="h1", host_vars={"node_name": "gpu-node-003"}
    )
    assert by_arg.data["node"] == "gpu-node-001"
    with pytest.raises(ApplicationError) as missing:
        module_runner(cordon, sim, {}, host="gpu-node-009")
    assert missing.value.type == "PreconditionFailed"
    assert "node 'gpu-node-009' not found in rehearsal" in missing.value.message
    with pytest.raises(ApplicationError) as bad:
        module_runner(cordon, sim, {"reason": "x", "drain": True})
    assert (
        bad.value.type == "InvalidArgs"
        and "kube.cordon: drain: Extra inputs are not permitted" in bad.value.message
    )


def test_a_server_error_is_retryable_and_the_retry_succeeds(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    sim.add_fault(ApiErrorFault(verb="patch", resource="nodes", status=503, count=1))
    with pytest.raises(ApplicationError) as transient:
        module_runner(cordon, sim, {})
    assert transient.value.type == "KubeApiError" and not transient.value.non_retryable
    assert "HTTP 503" in transient.value.message and "will retry" in transient.value.message
    assert module_runner(cordon, sim, {}).changed
    assert unschedulable(sim, "gpu-node-001")


def test_wait_node_ready_waits_out_a_reboot_and_times_out_on_a_node_that_never_returns(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    sim.reboot("gpu-node-001")
    planned = module_runner(wait_node_ready, sim, {}, check_mode=True)
    assert planned.msg.startswith("would wait for gpu-node-001 to become Ready (now: Ready=Unknown")
    ready = module_runner(wait_node_ready, sim, {"poll_interval_seconds": 0.1, "timeout_seconds": 20})
    assert ready.msg == (
        "gpu-node-001 is Ready (8 nvidia.com/gpu allocatable; "
        "no DaemonSet gpu-operator/nvidia-operator-validator)"
    )
    assert sim.counters().reboots == {"gpu-node-001": 1}
    sim.reboot("gpu-node-003")
    with pytest.raises(ApplicationError) as stuck:
        module_runner(
            wait_node_ready, sim, {"poll_interval_seconds": 0.1, "timeout_seconds": 1.5}, host="gpu-node-003"
        )
    assert stuck.value.type == "Timeout" and stuck.value.non_retryable
    assert stuck.value.message.startswith("gpu-node-003 is not Ready after 2s: Ready=")


def test_a_rejected_token_is_unauthorized_and_not_retried(
    start_sim: StartSim, module_runner: ModuleRunner, tmp_path: Path
) -> None:
    sim = start_sim(CLUSTER)
    assert sim.kubeconfig_path is not None
    wrong = sim.kubeconfig_path.read_text().replace("pitstop-sim-token", "stolen-token")
    register_cluster("wrong-token", kubeconfig=wrong)
    request = module_runner.call(sim, "kube.cordon", {})
    request = request.model_copy(update={"cluster": ClusterConfig(name="wrong-token")})
    with pytest.raises(ApplicationError) as denied:
        module_runner.env().run(cordon, request)
    assert denied.value.type == "Unauthorized" and denied.value.non_retryable
    assert "check the credentials and RBAC of the kubeconfig" in denied.value.message
    assert not unschedulable(sim, "gpu-node-001")


def test_a_rebooted_node_counts_as_back_only_with_its_gpus_and_the_gpu_operator_validator(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # Ready comes first, then the device plugin re-registers the GPUs and the validator pod
    # restarts: a probe pinned to the node before that would be rejected by the kubelet.
    sim = start_sim(
        "cluster: {nodes: 2, domains: 1}\n"
        "timing: {time_scale: 10, reboot_seconds: 5, device_plugin_seconds: 20, pod_start_seconds: 2}\n"
        "workloads:\n  daemonsets:\n    - {name: nvidia-operator-validator, namespace: gpu-operator}\n"
    )
    sim.reboot("gpu-node-001")
    sim.wait_for(lambda s: node_is_ready(s.get("nodes", "gpu-node-001") or {}), what="Ready again")
    status = node(sim, "gpu-node-001")["status"]
    assert status["allocatable"]["nvidia.com/gpu"] == "0" and status["capacity"]["nvidia.com/gpu"] == "8"  # type: ignore[index]
    module_runner.heartbeats.clear()
    ready = module_runner(wait_node_ready, sim, {"poll_interval_seconds": 0.1, "timeout_seconds": 30})
    seen = [str(h.get("state")) for h in module_runner.heartbeats if isinstance(h, dict)]
    assert any("nvidia.com/gpu allocatable 0 of 8" in state for state in seen), seen
    assert ready.msg == (
        "gpu-node-001 is Ready (8 nvidia.com/gpu allocatable; gpu-operator/nvidia-operator-validator Ready)"
    )
    assert node(sim, "gpu-node-001")["status"]["allocatable"]["nvidia.com/gpu"] == "8"  # type: ignore[index]
    # Without asking for them, Ready alone is enough (the old behaviour, for nodes without GPUs).
    sim.reboot("gpu-node-002")
    sim.wait_for(lambda s: node_is_ready(s.get("nodes", "gpu-node-002") or {}), what="Ready again")
    bare = module_runner(
        wait_node_ready,
        sim,
        {"gpu_resource": None, "validator": None, "poll_interval_seconds": 0.1},
        host="gpu-node-002",
    )
    assert bare.msg == "gpu-node-002 is Ready"
