"""Runbooks on Temporal Schedules: idempotent apply, pause notes kept, trigger starts a run,
and what the Temporal API (the UI's source) shows."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleOverlapPolicy
from typer.testing import CliRunner

from pitstop.cli.schedules import schedules_app
from pitstop.contracts import RunReport, RunRequest
from pitstop.schedules import action_memo, apply_schedules, load_schedules, spec_hash
from pitstop.settings import Settings
from tests.integration.etcd.conftest import RUNBOOKS, Site

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def _schedules_yaml(backup_id: str, drill_id: str, cron: str = "7 * * * *") -> str:
    return f"""
schedules:
  - id: {backup_id}
    runbook: etcd-backup.yaml
    inventory: inventories/site.yaml
    cron: "{cron}"
    catchup_window: 30m
  - id: {drill_id}
    runbook: etcd-restore-drill.yaml
    inventory: inventories/site.yaml
    every: 168h
    overlap: skip
    paused: true
    note: waiting for the first backup
"""


@pytest.fixture
def runbook_dir(tmp_path: Path, site: Site) -> Path:
    """A runbook directory as the worker sees it: the shipped runbooks and this test's site."""
    root = tmp_path / "runbooks"
    (root / "inventories").mkdir(parents=True)
    for name in ("etcd-backup.yaml", "etcd-restore-drill.yaml"):
        shutil.copy(RUNBOOKS / name, root / name)
    shutil.copytree(RUNBOOKS / "tasks", root / "tasks")
    (root / "inventories" / "site.yaml").write_text(site.inventory())
    return root


@pytest.fixture
def ids() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"etcd-backup-{suffix}", f"etcd-drill-{suffix}"


@pytest.fixture
async def cleanup(temporal_client: Client, ids: tuple[str, str]) -> AsyncIterator[None]:
    yield
    for schedule_id in ids:
        with contextlib.suppress(Exception):  # already deleted by the test
            await temporal_client.get_schedule_handle(schedule_id).delete()


async def _scheduled_runs(client: Client, schedule_id: str) -> list[str]:
    query = f'TemporalScheduledById = "{schedule_id}"'
    for _ in range(100):
        found = [w.id async for w in client.list_workflows(query)]
        if found:
            return found
        await asyncio.sleep(0.1)
    return []


async def test_apply_is_an_idempotent_upsert_that_keeps_pause_notes_and_trigger_starts_a_backup(
    temporal_client: Client,
    engine_worker: str,
    runbook_dir: Path,
    ids: tuple[str, str],
    cleanup: None,
    site: Site,
    s3_client: S3Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backup_id, drill_id = ids
    path = runbook_dir / "schedules.yaml"
    path.write_text(_schedules_yaml(backup_id, drill_id))
    desired = load_schedules(path)

    first = await apply_schedules(temporal_client, desired, engine_worker)
    second = await apply_schedules(temporal_client, desired, engine_worker)
    assert [o.action for o in first] == ["created", "created"]
    assert [o.action for o in second] == ["unchanged", "unchanged"]

    # What the Temporal API (and so the UI's Schedules page) shows.
    backup = await temporal_client.get_schedule_handle(backup_id).describe()
    assert backup.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
    assert backup.schedule.policy.catchup_window == timedelta(minutes=30)
    assert backup.info.next_action_times, "an active cron schedule has a next run"
    action = backup.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert action.workflow == "RunbookWorkflow" and action.task_queue == engine_worker
    assert isinstance(action.args[0], Payload)
    [request] = await temporal_client.data_converter.decode([action.args[0]], [RunRequest])
    assert request.runbook == "etcd-backup.yaml" and request.inventory == "inventories/site.yaml"
    assert request.requested_by == f"schedule:{backup_id}"
    assert (await action_memo(temporal_client, backup))["spec_hash"] == spec_hash(
        desired.schedules[0], engine_worker
    )
    drill = await temporal_client.get_schedule_handle(drill_id).describe()
    assert drill.schedule.state.paused and drill.schedule.state.note == "waiting for the first backup"

    # An operator's pause and note survive apply, also when the definition changes.
    await temporal_client.get_schedule_handle(backup_id).pause(note="etcd maintenance, CHG-42")
    path.write_text(_schedules_yaml(backup_id, drill_id, cron="17 * * * *"))
    changed = await apply_schedules(temporal_client, load_schedules(path), engine_worker)
    assert [o.action for o in changed] == ["updated", "unchanged"]
    assert (await apply_schedules(temporal_client, load_schedules(path), engine_worker))[
        0
    ].action == "unchanged"
    state = (await temporal_client.get_schedule_handle(backup_id).describe()).schedule.state
    assert state.paused and state.note == "etcd maintenance, CHG-42"

    # Trigger: a RunbookWorkflow starts, found through the API by its schedule, and backs up.
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(runbook_dir))
    await temporal_client.get_schedule_handle(backup_id).unpause(note="maintenance done")
    await temporal_client.get_schedule_handle(backup_id).trigger()
    runs = await _scheduled_runs(temporal_client, backup_id)
    assert len(runs) == 1 and runs[0].startswith(backup_id)
    report = await temporal_client.get_workflow_handle(runs[0], result_type=RunReport).result()
    assert report.status == "succeeded", report.msg
    assert report.requested_by == f"schedule:{backup_id}"
    listed = s3_client.list_objects_v2(Bucket=site.bucket, Prefix=site.prefix).get("Contents", [])
    assert [o["Key"] for o in listed] == [report.stages[0].hosts[0].registered["upload"]["key"]]


@pytest.fixture
def cli_env(temporal_settings: Settings, task_queue: str) -> Iterator[dict[str, str]]:
    # A wide terminal, so `list` prints each schedule on one table row.
    yield {
        "TEMPORAL_ADDRESS": temporal_settings.temporal_address,
        "PITSTOP_TASK_QUEUE": task_queue,
        "COLUMNS": "220",
    }


def test_the_cli_applies_twice_with_the_second_a_no_op_then_pauses_triggers_and_deletes(
    cli_env: dict[str, str], runbook_dir: Path, ids: tuple[str, str]
) -> None:
    backup_id, drill_id = ids
    path = runbook_dir / "schedules.yaml"
    path.write_text(_schedules_yaml(backup_id, drill_id))
    cli = CliRunner()

    def invoke(*args: str) -> str:
        result = cli.invoke(schedules_app, list(args), env=cli_env)
        assert result.exit_code == 0, result.output
        return result.output

    try:
        first = invoke("apply", str(path))
        assert f"created {backup_id}" in first and f"created {drill_id}" in first
        again = invoke("apply", str(path))
        assert f"unchanged {backup_id}" in again
        assert f"unchanged {drill_id} (paused on the server: waiting for the first backup)" in again
        assert "created" not in again and "updated" not in again

        listing = invoke("list")
        assert backup_id in listing and "etcd-backup.yaml" in listing
        assert invoke("pause", backup_id, "--note", "freeze week") == f"paused {backup_id}: freeze week\n"
        assert "freeze week" in invoke("list")
        assert invoke("trigger", backup_id).startswith(f"started {backup_id}")
        assert invoke("delete", backup_id) == f"deleted {backup_id}\n"
        missing = cli.invoke(schedules_app, ["pause", backup_id], env=cli_env)
        assert missing.exit_code == 1
        assert f"no schedule {backup_id!r} in this namespace" in missing.output
    finally:
        cli.invoke(schedules_app, ["delete", backup_id], env=cli_env)
        cli.invoke(schedules_app, ["delete", drill_id], env=cli_env)


def test_a_schedule_naming_a_missing_runbook_is_refused_with_its_position(tmp_path: Path) -> None:
    path = tmp_path / "schedules.yaml"
    path.write_text("schedules:\n  - id: nightly\n    runbook: nope.yaml\n    cron: '0 2 * * *'\n")
    result = CliRunner().invoke(schedules_app, ["apply", str(path)])
    assert result.exit_code == 1
    assert f"{path}:3:14: schedule 'nightly':" in result.output
    assert "nope.yaml:1:1: file not found" in result.output
    assert f"relative to {tmp_path}/" in result.output
