"""The maintenance runbook on the rehearsal cluster of `make demo`, with an in-process worker:
canary, gate (approved through the `decide` Update), then the fleet by failure domain. The
outcome is read from the simulator (firmware, cordons, counters, timeline), not from the run's
own account of itself."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from activities import ACTIVITIES
from pitstop.contracts import RunReport
from pitstop.demo import maintenance as dm
from pitstop.worker_app import build_worker
from tests.e2e.conftest import (
    APPROVER,
    Rehearsal,
    approve_gates,
    peak_unavailable_per_domain,
    start_rehearsal,
)
from workflows import WORKFLOWS

# Needs the embedded stack, like everything under tests/integration (`-m "not integration"` skips it).
pytestmark = pytest.mark.integration


@pytest.fixture
def rehearsal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rehearsal]:
    # Reboots cut SSH connections on purpose; paramiko would log each as an error.
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    with start_rehearsal(tmp_path / "demo", dm.SCENARIO) as rehearsal:
        # The in-process worker's activities read the SSH key and baselines from here.
        for key, value in dm.worker_environment(rehearsal.sim, rehearsal.workdir).items():
            monkeypatch.setenv(key, value)
        yield rehearsal


@pytest.mark.timeout(280)
async def test_maintenance_on_the_rehearsal_cluster_behaves_as_the_runbook_says(
    temporal_client: Client, task_queue: str, rehearsal: Rehearsal, limits: tuple[str, int]
) -> None:
    target, per_domain_limit = limits
    sim = rehearsal.sim
    async with build_worker(temporal_client, task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        handle: WorkflowHandle[object, RunReport] = await temporal_client.start_workflow(
            "RunbookWorkflow",
            rehearsal.request(),
            id=f"e2e-maintenance-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            result_type=RunReport,
            execution_timeout=timedelta(minutes=4),
        )
        approver = asyncio.ensure_future(approve_gates(handle))
        try:
            report = await asyncio.wait_for(handle.result(), timeout=240)
        finally:
            approver.cancel()

    verdict = dm.judge(sim, report, target, per_domain_limit)
    assert verdict.problems == []
    assert report.status == "completed_with_failures", report.msg
    assert [g.status for g in report.gates] == ["approved"]
    assert [v.approver for v in report.gates[0].votes] == [APPROVER]

    hosts = {h.host: h for stage in report.stages for h in stage.hosts}
    assert set(hosts) == set(sim.node_names())
    degraded = hosts[dm.DEGRADED_NODE]
    assert degraded.status == "failed"
    assert "NCCL" in degraded.msg and "bandwidth" in degraded.msg, degraded.msg
    assert all(h.status != "failed" for name, h in hosts.items() if name != dm.DEGRADED_NODE)

    peaks = peak_unavailable_per_domain(sim.timeline())
    assert set(peaks) == {d.domain for d in sim.unavailability()} and len(peaks) == 3
    assert max(peaks.values()) >= 1, "the timeline shows no node maintained at all"
    assert all(peak <= per_domain_limit for peak in peaks.values()), peaks
    assert all(d.max_unavailable - d.unavailable_at_start <= per_domain_limit for d in sim.unavailability())
