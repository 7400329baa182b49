"""A drain whose worker is SIGKILLed mid-way resumes on a new worker process and evicts
nothing twice (the simulator counts evictions per pod uid).

The activity worker is a real process (`python -m tests.worker_for_tests`, serving every
registered activity) on its own task queue; a small workflow in this process calls
`module.kube.drain` there with a 2 s heartbeat timeout, so the killed attempt is retried
within seconds rather than after the module's production heartbeat timeout."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.kube.nodes import cordon
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.settings import Settings
from tests.integration.engine.test_durability import WorkerProcess, wait_for
from tests.integration.kube.conftest import ModuleRunner, StartSim

CLUSTER = """
cluster: {nodes: 3, domains: 1, gpus_per_node: 8}
# Replacement replicas take 1 s to become ready: with maxUnavailable 1 the drain of four
# replicas takes seconds, long enough to be killed in the middle.
timing: {time_scale: 20, pod_start_seconds: 20, recreate_delay_seconds: 1}
workloads:
  deployments:
    - name: llm-serve
      namespace: serving
      replicas: 5
      gpus: 1
      pdb: {max_unavailable: 1}
      placement: [gpu-node-001, gpu-node-001, gpu-node-001, gpu-node-001, gpu-node-002]
"""


@workflow.defn(sandboxed=False)
class DrainOnce:
    @workflow.run
    async def run(self, call: ModuleCall, queue: str) -> ModuleResult:
        result: ModuleResult = await workflow.execute_activity(
            "module.kube.drain",
            call,
            result_type=ModuleResult,
            task_queue=queue,
            start_to_close_timeout=timedelta(minutes=2),
            heartbeat_timeout=timedelta(seconds=2),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=1)
            ),
        )
        return result


@pytest.fixture
def activity_process(temporal_settings: Settings, task_queue: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    proc = WorkerProcess(temporal_settings, f"{task_queue}-kube", tmp_path)
    yield proc
    proc.kill()


@pytest.mark.timeout(120)
async def test_a_drain_killed_with_its_worker_resumes_without_evicting_anything_twice(
    start_sim: StartSim,
    module_runner: ModuleRunner,
    temporal_client: Client,
    task_queue: str,
    activity_process: WorkerProcess,
) -> None:
    sim = start_sim(CLUSTER)
    module_runner(cordon, sim, {})
    call = module_runner.call(
        sim, "kube.drain", {"retry_interval_seconds": 0.1, "max_retry_interval_seconds": 0.3}
    )
    await activity_process.start()
    async with Worker(
        temporal_client,
        task_queue=task_queue,
        workflows=[DrainOnce],
        activities=[],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await temporal_client.start_workflow(
            DrainOnce.run,
            args=[call, f"{task_queue}-kube"],
            id=f"drain-kill-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            execution_timeout=timedelta(minutes=2),
        )

        async def evicting() -> bool:
            return sim.counters().evictions_total >= 1

        await wait_for("the first eviction", evicting, seconds=60)
        activity_process.kill()
        before_kill = sim.counters().evictions_total
        assert before_kill < 4, "the drain finished before the kill; nothing was interrupted"
        await activity_process.start()
        result = await asyncio.wait_for(handle.result(), timeout=90)

    assert result.changed
    assert result.data["attempts"] >= 2
    counters = sim.counters()
    assert counters.evictions == {"gpu-node-001": 4}
    assert len(counters.evictions_per_pod) == 4
    assert set(counters.evictions_per_pod.values()) == {1}
    assert counters.pdb_violations == 0
    assert sim.list("pods", "serving", field_selector="spec.nodeName=gpu-node-001") == []
