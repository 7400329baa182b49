"""Chaos: a 24-node GPU maintenance survives its worker being SIGKILLed three times.

The worker is a real process (`python -m tests.worker_for_tests`), killed at seeded random
moments during the run (canary, gate or fleet, wherever they land), each time at the first
moment after it that a host's activity is running, and restarted each time.
Killed activities are retried by Temporal after their heartbeat or start-to-close timeout;
the modules resume from the cluster's state. Afterwards the simulator's counters must show
that nothing was done twice and nothing unsafe was done at all.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from pitstop.contracts import RunReport
from pitstop.demo import maintenance as dm
from pitstop.settings import Settings
from tests.e2e.conftest import (
    APPROVER,
    Rehearsal,
    approve_gates,
    peak_unavailable_per_domain,
    start_rehearsal,
)
from tests.integration.engine.test_durability import WorkerProcess
from tests.multicluster import wait_for

SCENARIO = dm.REPO / "runbooks" / "scenarios" / "chaos-24-nodes.yaml"
DEGRADED = "gpu-node-017"
KILLS = 3
SEED = 2403
# Real seconds between one worker's start and its SIGKILL: spread over canary, gate and fleet.
KILL_AFTER = (4.0, 18.0)


# Needs the embedded stack, like everything under tests/integration (`-m "not integration"` skips it).
pytestmark = pytest.mark.integration


async def retried_activities(client: Client, report: RunReport) -> int:
    """Activities that completed on a later attempt, over every host's child workflow of the run.

    A retried attempt leaves no event of its own in history (the server retries it); the
    attempt number of the one recorded start says how many came before it.
    """
    count = 0
    for stage in report.stages:
        for host in stage.hosts:
            history = await client.get_workflow_handle(
                f"{report.run_id}/{stage.name}/{host.host}"
            ).fetch_history()
            count += sum(
                1
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                and e.activity_task_started_event_attributes.attempt > 1
            )
    return count


async def activity_in_flight(client: Client, run_id: str) -> bool:
    """Whether one of the run's host workflows has a (regular) activity running on a worker."""
    async for child in client.list_workflows(f'ParentWorkflowId="{run_id}" AND ExecutionStatus="Running"'):
        description = await client.get_workflow_handle(child.id, run_id=child.run_id).describe()
        if any(
            a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            for a in description.raw_description.pending_activities
        ):
            return True
    return False


async def work_in_flight(client: Client, handle: WorkflowHandle[object, RunReport]) -> bool:
    """A host's activity is running (so a kill now lands on work in progress); the run may
    not have ended meanwhile."""
    if await activity_in_flight(client, handle.id):
        return True
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.RUNNING, "the run ended before the kill"
    return False


@pytest.fixture
def rehearsal(tmp_path: Path) -> Iterator[Rehearsal]:
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    with start_rehearsal(tmp_path / "chaos", SCENARIO) as rehearsal:
        yield rehearsal


@pytest.fixture
def worker(
    temporal_settings: Settings, task_queue: str, tmp_path: Path, rehearsal: Rehearsal
) -> Iterator[WorkerProcess]:
    proc = WorkerProcess(temporal_settings, task_queue, tmp_path)
    # The subprocess reaches the nodes with the simulator's SSH key and keeps baselines here.
    proc.env.update(dm.worker_environment(rehearsal.sim, rehearsal.workdir))
    yield proc
    proc.kill()


@pytest.mark.timeout(420)
async def test_maintenance_survives_three_worker_kills_without_doing_anything_twice_or_unsafe(
    temporal_client: Client,
    task_queue: str,
    rehearsal: Rehearsal,
    worker: WorkerProcess,
    limits: tuple[str, int],
) -> None:
    target, per_domain_limit = limits
    sim = rehearsal.sim
    rng = random.Random(SEED)
    await worker.start()
    handle: WorkflowHandle[object, RunReport] = await temporal_client.start_workflow(
        "RunbookWorkflow",
        rehearsal.request(),
        id=f"e2e-chaos-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=RunReport,
        execution_timeout=timedelta(minutes=6),
    )
    approver = asyncio.ensure_future(approve_gates(handle))
    try:
        for kill in range(1, KILLS + 1):
            await asyncio.sleep(rng.uniform(*KILL_AFTER))
            description = await handle.describe()
            assert description.status == WorkflowExecutionStatus.RUNNING, (
                f"the run ended before kill {kill} of {KILLS}; lengthen the scenario or shorten the delays"
            )
            # From that moment on, the first time a host's activity is running (a gate may
            # hold every host back for a while).
            await wait_for(
                "a host's activity running", lambda: work_in_flight(temporal_client, handle), seconds=120
            )
            worker.kill()
            await worker.start()
        report = await asyncio.wait_for(handle.result(), timeout=330)
    finally:
        approver.cancel()

    assert worker.starts == KILLS + 1
    verdict = dm.judge(sim, report, target, per_domain_limit, degraded=DEGRADED)
    # The nodes (the runbook's last stage runs on the worker, localhost: no report bucket here).
    hosts = {h.host: h for stage in report.stages for h in stage.hosts if h.host != "localhost"}
    troubled = [p.split()[0] for p in verdict.problems if p.split()[0] in hosts]
    # What a person needs to see when a node did not end as the runbook says: how its host ended.
    assert verdict.problems == [], [
        (n, hosts[n].status, hosts[n].msg, [(t.name, t.status, t.msg[:200]) for t in hosts[n].tasks])
        for n in troubled
    ]
    assert report.status == "completed_with_failures", report.msg
    assert [v.approver for gate in report.gates for v in gate.votes] == [APPROVER]

    assert set(hosts) == set(sim.node_names()) and len(hosts) == 24
    assert hosts[DEGRADED].status == "failed" and "NCCL" in hosts[DEGRADED].msg, hosts[DEGRADED].msg
    assert [name for name, h in hosts.items() if h.status == "failed"] == [DEGRADED]

    counters = sim.counters()
    # Every node went through the updater exactly once, killed workers notwithstanding.
    assert counters.firmware_flashes == dict.fromkeys(sim.node_names(), 1)
    assert all(count == 1 for count in counters.drains.values()), counters.drains
    assert all(count == 1 for count in counters.reboots.values()), counters.reboots
    assert counters.pdb_violations == 0
    assert counters.training_evictions_without_protocol == 0
    assert counters.forced_deletions_total == 0

    # The kills landed on work in progress: some activities died with their worker and were
    # retried after their timeout (otherwise this test would prove nothing about them).
    assert await retried_activities(temporal_client, report) > 0

    peaks = peak_unavailable_per_domain(sim.timeline())
    assert len(peaks) == 3 and all(peak <= per_domain_limit for peak in peaks.values()), peaks
