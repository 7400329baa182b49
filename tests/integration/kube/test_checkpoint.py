"""kube.wait_for_workloads (the checkpoint protocol) with gang training jobs on the rehearsal
cluster, and the drain that follows it."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

import activities.kube.checkpoint as checkpoint_module
from activities.kube.checkpoint import wait_for_workloads
from activities.kube.drain import drain_node
from activities.kube.nodes import cordon
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim

CLUSTER = """
cluster: {nodes: 3, domains: 1, gpus_per_node: 8}
timing: {time_scale: 20, checkpoint_seconds: 10, pod_start_seconds: 2}
workloads:
  training_jobs:
    - name: llm-pretrain
      pods: 2
      gpus_per_pod: 8
      placement: [gpu-node-001, gpu-node-002]
    - name: legacy
      pods: 1
      gpus_per_pod: 4
      checkpoint_protocol: false
      placement: [gpu-node-003]
"""
FAST = {"poll_interval_seconds": 0.1, "timeout_seconds": 30}


def gang(sim: SimCluster, name: str) -> dict[str, dict[str, str]]:
    """node -> annotations of the gang's pods."""
    pods = sim.list("pods", "training", label_selector=f"pitstop.dev/gang={name}")
    return {p["spec"]["nodeName"]: p["metadata"].get("annotations") or {} for p in pods}


def test_a_gang_spanning_two_nodes_checkpoints_as_a_whole_before_its_pod_is_drained(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    result = module_runner(wait_for_workloads, sim, FAST, run_id="run-9")
    assert result.changed
    assert result.data["gangs"] == ["training/llm-pretrain"]
    assert len(result.data["workloads"]) == 2 and len(result.data["requested"]) == 2
    assert (
        result.msg
        == "2 workloads acknowledged checkpoint run-9/gpu-node-001 or finished (gangs: training/llm-pretrain)"
    )
    members = gang(sim, "llm-pretrain")
    assert sorted(members) == ["gpu-node-001", "gpu-node-002"]
    for notes in members.values():
        assert notes["pitstop.dev/checkpoint-requested"] == "run-9/gpu-node-001"
        assert notes["pitstop.dev/checkpoint-done"] == "run-9/gpu-node-001"
    assert sim.counters().checkpoint_acks == 2
    again = module_runner(wait_for_workloads, sim, FAST, run_id="run-9")
    assert again.changed is False and again.data["requested"] == []
    module_runner(cordon, sim, {})
    drained = module_runner(drain_node, sim, {"retry_interval_seconds": 0.1})
    assert [p.split("/")[1].startswith("llm-pretrain-0") for p in drained.data["evicted"]] == [True]
    counters = sim.counters()
    assert counters.evictions == {"gpu-node-001": 1}
    assert counters.training_evictions_unacknowledged == 0
    assert counters.training_evictions_without_protocol == 0


def test_check_mode_names_the_workloads_and_writes_nothing(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    planned = module_runner(wait_for_workloads, sim, FAST, check_mode=True, host="gpu-node-002")
    assert planned.msg == (
        "would request checkpoint run-1/gpu-node-002 from 2 workloads (gangs: training/llm-pretrain)"
    )
    assert all("pitstop.dev/checkpoint-requested" not in n for n in gang(sim, "llm-pretrain").values())
    assert sim.counters().checkpoint_acks == 0


def test_workloads_without_the_protocol_fail_by_name_unless_waited_for(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    legacy = sim.list("pods", "training", label_selector="pitstop.dev/gang=legacy")[0]["metadata"]["name"]
    with pytest.raises(ApplicationError) as refused:
        module_runner(wait_for_workloads, sim, FAST, host="gpu-node-003")
    assert refused.value.type == "PolicyViolation" and refused.value.non_retryable
    assert refused.value.message.startswith(
        f"workloads on gpu-node-003 without a checkpoint protocol: training/{legacy}"
    )
    assert "on_no_protocol: wait_for_completion" in refused.value.message
    with pytest.raises(ApplicationError) as waited:
        module_runner(
            wait_for_workloads,
            sim,
            {**FAST, "on_no_protocol": "wait_for_completion", "timeout_seconds": 0.5},
            host="gpu-node-003",
        )
    assert waited.value.type == "Timeout"
    assert (
        f"neither acknowledged checkpoint run-1/gpu-node-003 nor finished: training/{legacy}"
        in waited.value.message
    )


def test_a_selected_pod_that_finishes_releases_the_wait(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    sim.create(
        "pods",
        {
            "metadata": {
                "name": "finetune",
                "namespace": "training",
                "labels": {"app": "finetune"},
                "annotations": {"pitstop.dev/training": "true", "sim.pitstop.dev/run-seconds": "10"},
            },
            "spec": {
                "nodeName": "gpu-node-003",
                "restartPolicy": "Never",
                "containers": [{"name": "trainer", "image": "registry.local/trainer:1.0"}],
            },
        },
        "training",
    )
    result = module_runner(
        wait_for_workloads,
        sim,
        {**FAST, "pod_selector": "app=finetune", "on_no_protocol": "wait_for_completion"},
        host="gpu-node-003",
    )
    assert result.data["workloads"] == ["training/finetune"]
    assert result.data["without_protocol"] == ["training/finetune"]
    assert (sim.get("pods", "finetune", "training") or {})["status"]["phase"] == "Succeeded"


def test_a_gang_member_that_vanishes_before_it_is_asked_is_not_an_error(
    start_sim: StartSim, module_runner: ModuleRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two nodes of one gang in flight: node B lists the gang, then node A's drain evicts A's
    # member (checkpointed) before B writes its request on it. The PATCH gets a real 404 from
    # the cluster; the member is gone, so there is nothing of it left to checkpoint.
    sim = start_sim(CLUSTER)
    [(member, node)] = [
        (p["metadata"]["name"], p["spec"]["nodeName"])
        for p in sim.list("pods", "training", label_selector="pitstop.dev/gang=llm-pretrain")
        if p["spec"]["nodeName"] == "gpu-node-001"
    ]
    real_kube_for = checkpoint_module.kube_for

    def vanishing(call: Any) -> Any:
        kube = real_kube_for(call)
        patch = kube.patch

        def patch_after_vanishing(path: str, body: Any, *args: Any, **kwargs: Any) -> Any:
            if path.endswith(f"/pods/{member}") and sim.get("pods", member, "training") is not None:
                pods = sim.resource("pods")
                sim.call(lambda c: c.api.delete(pods, "training", member, {"gracePeriodSeconds": 0}))
            return patch(path, body, *args, **kwargs)

        kube.patch = patch_after_vanishing  # type: ignore[method-assign]
        return kube

    monkeypatch.setattr(checkpoint_module, "kube_for", vanishing)
    result = module_runner(wait_for_workloads, sim, FAST, run_id="run-4", host="gpu-node-002")
    assert node == "gpu-node-001" and sim.get("pods", member, "training") is None
    # Only the member still there was asked, and the task ended well: it acknowledged, and the
    # vanished one counts as finished.
    [asked] = result.data["requested"]
    assert asked.startswith("pod training/llm-pretrain-1-")
    assert result.msg.startswith("2 workloads acknowledged checkpoint run-4/gpu-node-002 or finished")
