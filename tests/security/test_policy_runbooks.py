"""A worker whose policy says `runbooks.from_requests: false` runs only the runbooks in its own
runbook directory: a request that carries its own runbook (what the CLI sends by default, and
what any Temporal client can send) is refused before anything runs."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import typer
from temporalio.client import Client

from pitstop.cli.run import _request
from pitstop.contracts import RunReport, RunRequest
from tests.policy_site import PolicyLayer
from tests.security.policy_fixtures import engine_worker, run, run_history_json, start_run  # noqa: F401

RUNBOOK = """
name: carried
stages:
  - name: only
    hosts: localhost
    tasks:
      - debug: {msg: "carried-runbook-ran"}
"""


async def test_a_carried_runbook_is_refused_and_nothing_runs(
    worker_policy: PolicyLayer,
    temporal_client: Client,
    start_run,  # noqa: F811
) -> None:
    worker_policy.runbooks_from_requests(False)
    handle = await start_run(RUNBOOK)
    report = await handle.result()
    assert report.status == "failed"
    assert "runs only runbooks from its runbook directory" in report.msg
    assert "runbooks.from_requests: false" in report.msg
    assert "--on-worker" in report.msg
    history = await run_history_json(temporal_client, handle)
    assert "StartChildWorkflowExecutionInitiated" not in history.replace("_", "")
    assert not report.stages


async def test_a_runbook_named_in_the_workers_directory_runs(
    worker_policy: PolicyLayer,
    temporal_client: Client,
    engine_worker: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "reviewed.yaml").write_text(RUNBOOK.replace("carried", "reviewed"))
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(runbooks))
    worker_policy.runbooks_from_requests(False)
    report: RunReport = await temporal_client.execute_workflow(
        "RunbookWorkflow",
        RunRequest(runbook="reviewed.yaml", requested_by="alice"),
        id=f"run-{uuid.uuid4().hex[:10]}",
        task_queue=engine_worker,
        result_type=RunReport,
    )
    assert report.status == "succeeded", report.msg
    assert [h.status for h in report.stages[0].hosts] == ["ok"]


def test_the_cli_sends_names_not_files_with_on_worker(tmp_path: Path) -> None:
    request = _request(
        Path("maintenance/gpu.yaml"), Path("inventories/prod.yaml"), None, [], False, [], [], "alice", True
    )
    assert request.files == {}
    assert (request.runbook, request.inventory) == ("maintenance/gpu.yaml", "inventories/prod.yaml")


@pytest.mark.parametrize("name", ["/etc/passwd", "../outside.yaml"])
def test_on_worker_names_must_stay_inside_the_runbook_directory(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit):
        _request(Path(name), None, None, [], False, [], [], "alice", True)
    assert "must be relative to the worker's runbook directory" in " ".join(capsys.readouterr().err.split())
