"""kube.drain against the rehearsal cluster: PDB waits, refusals, resumption, check mode.
Safety is read from the simulator's counters, not from the module's own report."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError, CancelledError

from activities.kube.drain import drain_node
from activities.kube.nodes import cordon
from pitstop.contracts import ModuleResult
from pitstop_sim import ApiErrorFault, SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim

CLUSTER = """
cluster: {nodes: 3, domains: 1, gpus_per_node: 8}
timing: {time_scale: 20, pod_start_seconds: 4, recreate_delay_seconds: 1}
workloads:
  deployments:
    - name: llm-serve
      namespace: serving
      replicas: 4
      gpus: 1
      pdb: {max_unavailable: 1}
      placement: [gpu-node-001, gpu-node-001, gpu-node-001, gpu-node-002]
    - name: cache
      namespace: serving
      replicas: 1
      empty_dir: true
      placement: [gpu-node-003]
  training_jobs:
    - name: pretrain
      pods: 1
      gpus_per_pod: 4
      checkpoint_protocol: false
      placement: [gpu-node-002]
"""
FAST = {"retry_interval_seconds": 0.1, "max_retry_interval_seconds": 0.5}


def pods_on(sim: SimCluster, node: str, app: str | None = None) -> list[str]:
    pods = sim.list(
        "pods", field_selector=f"spec.nodeName={node}", label_selector=f"app={app}" if app else None
    )
    return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods)


def in_background(fn: Any, *args: Any) -> tuple[ThreadPoolExecutor, Future[Any]]:
    pool = ThreadPoolExecutor(max_workers=1)
    return pool, pool.submit(fn, *args)


def test_drain_waits_while_a_pdb_disallows_and_never_evicts_past_it(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    serving = pods_on(sim, "gpu-node-001", "llm-serve")
    assert len(serving) == 3
    sim.create(
        "pods",
        {
            "metadata": {
                "name": "kube-proxy-gpu-node-001",
                "namespace": "kube-system",
                "annotations": {"kubernetes.io/config.mirror": "c0ffee"},
            },
            "spec": {
                "nodeName": "gpu-node-001",
                "containers": [{"name": "proxy", "image": "kube-proxy:v1.32"}],
            },
        },
        "kube-system",
    )
    module_runner(cordon, sim, {})
    sim.block_pdb("serving", "llm-serve")
    pool, future = in_background(module_runner, drain_node, sim, FAST)
    sim.wait_for(lambda s: sum(s.counters().eviction_refusals.values()) >= 3, what="refused evictions")
    assert sim.counters().evictions_total == 0
    assert not future.done()
    sim.block_pdb("serving", "llm-serve", blocked=False)
    result: ModuleResult = future.result(timeout=60)
    pool.shutdown()
    assert result.changed
    assert sorted(result.data["evicted"]) == serving
    assert result.data["pdb_waits"]["serving/llm-serve"] >= 3
    assert result.msg.startswith("evicted 3 pods from gpu-node-001; waited on PDBs: serving/llm-serve (")
    counters = sim.counters()
    assert counters.evictions == {"gpu-node-001": 3}
    assert counters.pdb_violations == 0
    assert set(counters.evictions_per_pod.values()) == {1}
    # DaemonSet pods and the mirror pod stay; every replica runs again elsewhere.
    assert "kube-system/kube-proxy-gpu-node-001" in pods_on(sim, "gpu-node-001")
    # The GPU Operator's device plugin and DCGM exporter (a host-managed driver runs no pod).
    assert len(result.data["skipped"]["daemonset"]) == 2
    assert pods_on(sim, "gpu-node-001", "llm-serve") == []
    again = module_runner(drain_node, sim, FAST)
    assert (again.changed, again.msg) == (
        False,
        "gpu-node-001 has no pods to evict; 3 DaemonSet/mirror pods stay",
    )


def test_a_training_pod_without_checkpoint_protocol_is_never_evicted(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    module_runner(cordon, sim, {}, host="gpu-node-002")
    trainer = pods_on(sim, "gpu-node-002", "pretrain")
    for args in (FAST, {**FAST, "disable_eviction": True}, {**FAST, "delete_emptydir_data": True}):
        with pytest.raises(ApplicationError) as refused:
            module_runner(drain_node, sim, args, host="gpu-node-002")
        assert refused.value.type == "PolicyViolation" and refused.value.non_retryable
        message = refused.value.message
        assert message.startswith(
            "drain of gpu-node-002 refused before evicting anything: training pods without"
        )
        assert trainer[0] in message
        assert "never force-drained: that becomes a human decision" in message
    counters = sim.counters()
    assert counters.evictions_total == counters.deletions_total == 0
    assert counters.training_evictions_without_protocol == 0
    assert pods_on(sim, "gpu-node-002", "pretrain") == trainer


def test_emptydir_pods_are_refused_by_name_until_their_data_may_go(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    module_runner(cordon, sim, {}, host="gpu-node-003")
    cache = pods_on(sim, "gpu-node-003", "cache")
    with pytest.raises(ApplicationError) as refused:
        module_runner(drain_node, sim, FAST, host="gpu-node-003")
    assert refused.value.message == (
        "drain of gpu-node-003 refused before evicting anything: pods with emptyDir data that eviction "
        f"deletes (set delete_emptydir_data: true): {cache[0]}"
    )
    assert sim.counters().evictions_total == 0
    done = module_runner(drain_node, sim, {**FAST, "delete_emptydir_data": True}, host="gpu-node-003")
    assert done.data["evicted"] == cache
    assert sim.counters().evictions == {"gpu-node-003": 1}


def test_check_mode_says_what_would_be_evicted_and_what_the_pdb_allows(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    planned = module_runner(drain_node, sim, FAST, check_mode=True)
    assert planned.changed
    assert planned.msg == (
        "would evict 3 pods from gpu-node-001; PDB serving/llm-serve allows 1 disruption now "
        "(3 of its healthy pods to evict; 4 healthy, 3 required); "
        "the node is not cordoned yet (kube.cordon must run first)"
    )
    assert sorted(planned.data["would_evict"]) == pods_on(sim, "gpu-node-001", "llm-serve")
    with pytest.raises(ApplicationError) as refused:
        module_runner(drain_node, sim, FAST, check_mode=True, host="gpu-node-002")
    assert refused.value.type == "PolicyViolation"
    counters = sim.counters()
    assert counters.evictions_total == 0 and counters.eviction_log == []


def test_drain_refuses_a_schedulable_node(start_sim: StartSim, module_runner: ModuleRunner) -> None:
    sim = start_sim(CLUSTER)
    with pytest.raises(ApplicationError) as refused:
        module_runner(drain_node, sim, FAST)
    assert refused.value.type == "PreconditionFailed"
    assert refused.value.message.startswith("gpu-node-001 is schedulable: cordon it first")


def test_an_interrupted_drain_resumes_without_evicting_anything_twice(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # Replacements take 1s to become ready, so the drain is mid-way when it is cancelled.
    sim = start_sim(CLUSTER.replace("pod_start_seconds: 4", "pod_start_seconds: 20"))
    module_runner(cordon, sim, {})
    env = module_runner.env(timeout=60)
    request = module_runner.call(sim, "kube.drain", FAST)
    pool, future = in_background(env.run, drain_node, request)
    sim.wait_for(lambda s: s.counters().evictions_total >= 1, what="the first eviction")
    env.cancel()
    with pytest.raises(CancelledError):
        future.result(timeout=30)
    pool.shutdown()
    first = sim.counters().evictions_total
    assert 1 <= first < 3
    progress = module_runner.heartbeats[-1]
    assert 1 <= len(progress["evicted"]) <= first
    resumed = module_runner(drain_node, sim, FAST, heartbeat_details=[progress])
    counters = sim.counters()
    assert counters.evictions == {"gpu-node-001": 3}
    assert set(counters.evictions_per_pod.values()) == {1}
    assert counters.pdb_violations == 0
    assert resumed.data["attempts"] == 2
    assert set(progress["evicted"]) <= set(resumed.data["evicted"])
    assert len(resumed.data["evicted"]) == 3


def test_server_errors_on_evictions_fail_the_attempt_and_the_retry_finishes(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    module_runner(cordon, sim, {})
    sim.add_fault(
        ApiErrorFault(verb="create", resource="pods", subresource="eviction", status=500, count=1, after=1)
    )
    with pytest.raises(ApplicationError) as transient:
        module_runner(drain_node, sim, FAST)
    assert transient.value.type == "KubeApiError" and not transient.value.non_retryable
    assert sim.counters().evictions_total == 1
    progress = module_runner.heartbeats[-1]
    resumed = module_runner(drain_node, sim, FAST, heartbeat_details=[progress])
    assert len(resumed.data["evicted"]) == 3
    counters = sim.counters()
    assert set(counters.evictions_per_pod.values()) == {1} and counters.pdb_violations == 0


def test_a_pdb_that_never_allows_ends_the_drain_at_the_task_timeout_with_the_numbers(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    module_runner(cordon, sim, {})
    sim.block_pdb("serving", "llm-serve")
    with pytest.raises(ApplicationError) as timed_out:
        module_runner(drain_node, sim, FAST, timeout=3)
    assert timed_out.value.type == "Timeout" and timed_out.value.non_retryable
    assert timed_out.value.message == (
        "drain of gpu-node-001 did not finish before the task's timeout: 3 pods refused by "
        "PodDisruptionBudgets (serving/llm-serve); evicted so far: 0"
    )
    assert sim.counters().evictions_total == 0


def test_disable_eviction_deletes_pods_only_when_written(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    module_runner(cordon, sim, {}, host="gpu-node-003")
    done = module_runner(
        drain_node, sim, {**FAST, "disable_eviction": True, "delete_emptydir_data": True}, host="gpu-node-003"
    )
    assert done.msg.startswith("deleted 1 pods from gpu-node-003")
    counters = sim.counters()
    assert (counters.evictions_total, counters.deletions) == (0, {"gpu-node-003": 1})


def test_drain_returns_only_once_the_evicted_pods_are_gone(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # Pods take up to 1 s to terminate after eviction (30 s grace, bounded by the scenario).
    sim = start_sim(
        CLUSTER.replace("recreate_delay_seconds: 1", "recreate_delay_seconds: 1, pod_termination_seconds: 20")
    )
    module_runner(cordon, sim, {}, host="gpu-node-003")
    module_runner.heartbeats.clear()
    done = module_runner(drain_node, sim, {**FAST, "delete_emptydir_data": True}, host="gpu-node-003")
    assert len(done.data["evicted"]) == 1
    assert pods_on(sim, "gpu-node-003", "cache") == []
    # It saw the pod terminating and waited (heartbeating) rather than evicting it again.
    assert len(module_runner.heartbeats) > 2
    assert sim.counters().evictions_per_pod and set(sim.counters().evictions_per_pod.values()) == {1}
