"""kube.capacity_check on the rehearsal cluster: refuses with the numbers when GPUs or PDB
headroom fall short, passes (in check mode too) when they do not."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.capacity import capacity_check
from tests.integration.kube.conftest import ModuleRunner, StartSim

CLUSTER = """
cluster:
  nodes: 4
  domains: 2
  gpus_per_node: 8
  node_overrides:
    gpu-node-004: {unschedulable: true}
timing: {time_scale: 20}
workloads:
  deployments:
    - name: infer
      namespace: serving
      replicas: 4
      gpus: 4
      pdb: {max_unavailable: 1}
      placement: [gpu-node-001, gpu-node-001, gpu-node-002, gpu-node-003]
  training_jobs:
    - name: pretrain
      pods: 1
      gpus_per_pod: 4
      placement: [gpu-node-003]
"""


def test_capacity_check_refuses_with_the_gpu_and_pdb_numbers(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    with pytest.raises(ApplicationError) as refused:
        module_runner(capacity_check, sim, {})
    assert refused.value.type == "PreconditionFailed" and refused.value.non_retryable
    message = refused.value.message
    assert message.startswith(
        "not enough capacity if gpu-node-001 leave: not enough GPUs: 2 pods to move need 8 nvidia.com/gpu; "
        "4 free on 2 schedulable Ready nodes; no node has room for serving/infer-"
    )
    assert "(largest free block: 4)" in message
    assert (
        "PDB headroom too small: PDB serving/infer allows 1 disruption now (2 of its healthy pods to evict; "
        in message
    )
    # Only the PDB, or only the GPUs:
    with pytest.raises(ApplicationError, match="PDB serving/infer allows 1 disruption"):
        module_runner(capacity_check, sim, {"check_gpus": False})
    with pytest.raises(ApplicationError, match="not enough GPUs"):
        module_runner(capacity_check, sim, {"check_pdbs": False})


def test_capacity_check_passes_once_a_node_can_take_the_pods_in_check_mode_too(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    sim.patch("nodes", "gpu-node-004", {"spec": {"unschedulable": False}})
    for check_mode in (True, False):
        result = module_runner(capacity_check, sim, {"nodes": ["gpu-node-002"]}, check_mode=check_mode)
        assert result.changed is False
        assert result.msg == (
            "capacity is enough if gpu-node-002 leave: GPUs: 1 pods to move need 4 nvidia.com/gpu; "
            "8 free on 3 schedulable Ready nodes; 1 PDBs allow the evictions"
        )
        assert result.data["gpus"]["free_after"] == 4
        assert result.data["pdbs"] == [
            {
                "pdb": "serving/infer",
                "disruptions_allowed": 1,
                "pods_to_evict": 1,
                "current_healthy": 4,
                "desired_healthy": 3,
                "exceeds": False,
            }
        ]
    with pytest.raises(ApplicationError, match=r"\(9 must stay spare, 4 would\)"):
        module_runner(capacity_check, sim, {"nodes": ["gpu-node-002"], "min_spare_gpus": 9})
    with pytest.raises(ApplicationError) as unknown:
        module_runner(capacity_check, sim, {"nodes": ["gpu-node-042"]})
    assert unknown.value.message == "capacity check: nodes not found in rehearsal: gpu-node-042"


def test_capacity_check_waits_for_pdb_headroom_a_sibling_drain_gives_back(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    """Another node in flight evicted a replica that is not Ready elsewhere yet: the PDB allows
    no more disruptions for a moment. The check looks again instead of failing this node."""
    sim = start_sim(CLUSTER)
    args = {"check_gpus": False, "wait_seconds": 120, "poll_interval_seconds": 0.1}
    pool = ThreadPoolExecutor(max_workers=1)
    waiting = pool.submit(module_runner, capacity_check, sim, args)
    sim.wait_for(lambda _: len(module_runner.heartbeats) >= 3, what="the check looking again")
    assert not waiting.done()
    assert "PDB serving/infer allows 1 disruption" in module_runner.heartbeats[-1]["short"]
    sim.patch("poddisruptionbudgets", "infer", {"spec": {"maxUnavailable": 2}}, "serving")
    result = waiting.result(timeout=60)
    pool.shutdown()
    assert result.data["ok"] and result.data["waited_s"] > 0
    assert result.data["pdbs"][0]["disruptions_allowed"] == 2

    # Without the PDB changing, it gives up after wait_seconds with the numbers and how long it waited.
    sim.patch("poddisruptionbudgets", "infer", {"spec": {"maxUnavailable": 1}}, "serving")
    with pytest.raises(ApplicationError) as refused:
        module_runner(capacity_check, sim, {**args, "wait_seconds": 0.3})
    assert refused.value.type == "PreconditionFailed"
    assert re.search(r" \(still, after waiting \d+s\)$", refused.value.message), refused.value.message
    assert "PDB serving/infer allows 1 disruption" in refused.value.message
