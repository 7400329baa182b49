"""The maintenance runbook on the rehearsal cluster of `make demo`, with an in-process worker:
canary, gate (approved through the `decide` Update), then the fleet by failure domain. The
outcome is read from the simulator (firmware, cordons, counters, timeline), not from the run's
own account of itself."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from temporalio.client import Client

from pitstop.demo import maintenance as dm
from tests.e2e.conftest import (
    APPROVER,
    Rehearsal,
    peak_unavailable_per_domain,
    run_to_end,
    start_rehearsal,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

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


@pytest.mark.timeout(420)
async def test_maintenance_on_the_rehearsal_cluster_behaves_as_the_runbook_says(
    temporal_client: Client,
    task_queue: str,
    rehearsal: Rehearsal,
    limits: tuple[str, int],
    s3_endpoint: str,
    s3_client: S3Client,
) -> None:
    target, per_domain_limit = limits
    sim = rehearsal.sim
    # As the demo runs it: the run's report goes to the stack's S3 as its last task.
    request = rehearsal.request(dm.report_vars(s3_endpoint))
    report = await run_to_end(temporal_client, task_queue, request, "e2e-maintenance", within=240)

    verdict = dm.judge(sim, report, target, per_domain_limit)
    assert verdict.problems == []
    assert report.status == "completed_with_failures", report.msg
    assert [g.status for g in report.gates] == ["approved"]
    assert [v.approver for v in report.gates[0].votes] == [APPROVER]

    # The nodes; the last stage writes the report on the worker (localhost).
    hosts = {h.host: h for stage in report.stages for h in stage.hosts if h.host != "localhost"}
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

    # The run lists its report, and the report is in the bucket with the fleet drawn.
    [written] = [a for a in report.artifacts if a.name == "run report"]
    assert written.uri.startswith(f"s3://{dm.REPORT_BUCKET}/run-reports/rehearsal/") and written.uri.endswith(
        ".html"
    )
    html = s3_client.get_object(Bucket=dm.REPORT_BUCKET, Key=written.uri.split("/", 3)[3])["Body"].read()
    assert report.run_id.encode() in html and dm.DEGRADED_NODE.encode() in html
    assert b'src="data:image/png;base64,' in html
