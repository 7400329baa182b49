"""Writes tests/fixtures/reports/demo-maintenance.json: the demo's maintenance run as
`pitstop report` reads it through Temporal (report and plan layout). Run on demand only:

    PITSTOP_WRITE_REPORT_FIXTURE=1 .venv/bin/pytest tests/e2e/test_report_fixture.py

It runs the maintenance runbook twice, each on a fresh rehearsal cluster of `make demo`, with
one baseline store: the first run's canary records the NCCL baseline (a previous maintenance
window), so the second run's figures are judged against a baseline, as a fleet's would be.
The second run is the fixture."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from temporalio.client import Client

from pitstop.demo import maintenance as dm
from pitstop.report.source import read_run
from tests.e2e.conftest import run_to_end, start_rehearsal

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.environ.get("PITSTOP_WRITE_REPORT_FIXTURE") != "1",
        reason="writes a fixture on demand (PITSTOP_WRITE_REPORT_FIXTURE=1)",
    ),
]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "demo-maintenance.json"


@pytest.mark.timeout(600)
async def test_write_the_demo_report_fixture(
    temporal_client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    baselines = tmp_path / "baselines"
    run_id = ""
    for attempt in ("baseline", "fixture"):
        with start_rehearsal(tmp_path / attempt, dm.SCENARIO) as rehearsal:
            for key, value in dm.worker_environment(rehearsal.sim, rehearsal.workdir).items():
                monkeypatch.setenv(key, value)
            monkeypatch.setenv("PITSTOP_BASELINE_DIR", str(baselines))
            report = await run_to_end(
                temporal_client, f"{task_queue}-{attempt}", rehearsal.request(), f"demo-{attempt}", within=300
            )
            assert report.status == "completed_with_failures", report.msg
            run_id = report.run_id
    source = await read_run(temporal_client, run_id)
    assert source.finished and source.layout.stages
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(source.model_dump_json(indent=1) + "\n")
