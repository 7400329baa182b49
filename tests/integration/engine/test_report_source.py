"""`pitstop report` reads a run through Temporal (pitstop/report/source.py): the plan's layout
from the run's history, a run in progress from its status and the hosts that have ended, and a
finished run from its result; then writes the report."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from pitstop.contracts import Decision, RunStatus
from pitstop.report.source import read_run
from pitstop.report.write import write_report
from tests.integration.engine.conftest import StartFn, hosts_inventory, status_when

TWO_STAGES = """
name: two-stages
approvers:
  sre: [alice]
stages:
  - name: first
    hosts: h00
    tasks:
      - test.step: {value: "{{ inventory_hostname }}"}
  - name: rest
    hosts: "gpu:!h00"
    gate: {before: true, approvers: sre}
    rolling: {max_in_flight: 2, max_unavailable_per_domain: 1, domain: "{{ failure_domain }}"}
    tasks:
      - test.step: {value: "{{ inventory_hostname }}"}
"""


def _gate_open(status: RunStatus) -> bool:
    return any(g.status == "open" for g in status.gates)


async def test_a_run_in_progress_and_then_finished_is_read_for_its_report(
    temporal_client: Client, start_run: StartFn, tmp_path: Path
) -> None:
    handle = await start_run(TWO_STAGES, hosts_inventory(4, domains=2))
    await status_when(handle, _gate_open)

    during = await read_run(temporal_client, handle.id)
    assert not during.finished and during.report.status == "waiting_gate"
    # The plan's layout, from the run's history: domains and the stage's limit.
    rest = during.layout.stage("rest")
    assert rest is not None and rest.max_unavailable_per_domain == 1
    assert rest.domains == {"h01": "d1", "h02": "d0", "h03": "d1"}
    # The ended host of the first stage, with its tasks (its host workflow's result).
    [first] = [s for s in during.report.stages if s.name == "first"]
    assert [(h.host, h.status, [t.module for t in h.tasks]) for h in first.hosts] == [
        ("h00", "ok", ["test.step"])
    ]
    files = write_report(during, tmp_path / "during")
    assert files.html.is_file() and "in progress" in files.html.read_text()

    await handle.execute_update("decide", Decision(approve=True, approver="alice"))
    await handle.result()
    after = await read_run(temporal_client, handle.id)
    assert after.finished and after.report.status == "succeeded"
    assert after.layout == during.layout
    assert sorted(h.host for s in after.report.stages for h in s.hosts) == ["h00", "h01", "h02", "h03"]
    assert [g.status for g in after.report.gates] == ["approved"]
    assert write_report(after, tmp_path / "after").html.is_file()
