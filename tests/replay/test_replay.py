"""Recorded histories replay against today's workflow code without non-determinism.

RE-RECORD THE HISTORIES WHENEVER `workflows/` CHANGES: `python -m tests.replay.record`.

A failure here means the workflow code no longer makes the decisions it made when the
history was recorded. Runs in flight when such code is deployed would fail on their
next replay. Either the change must be made replay-safe (`workflow.patched(...)`, or a
new workflow type), or, when no run recorded with the old code can still be running
(development, or after draining), re-record the histories and commit them with the change.
See `tests/histories/README.md`.

The replayer is configured like the worker (`pitstop.worker_app.build_worker`): the same workflows,
the data converter of `pitstop.client` (pydantic, plus payload decryption when keys are
configured), pitstop's sandbox runner and the tracing interceptor.
"""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from pitstop.client import data_converter, tracing_interceptor
from pitstop.contracts import RunReport, RunRequest
from pitstop.sandbox import workflow_runner
from tests.replay.deferred_result import defer_result, deferrable, local_activity_type
from tests.replay.record import HISTORIES_DIR, MANIFEST, SCENARIOS, RecordedHistory
from workflows import WORKFLOWS
from workflows.runbook import RunbookWorkflow

# Histories recorded by the previous release (before `PATCHES_AT_START`): runs in flight
# when this code is deployed replay as they were recorded.
PREVIOUS_DIR = HISTORIES_DIR / "previous"


def recorded(directory: Path = HISTORIES_DIR) -> list[RecordedHistory]:
    path = directory / MANIFEST
    if not path.exists():
        return []
    return [RecordedHistory.model_validate(entry) for entry in json.loads(path.read_text())]


def load(entry: RecordedHistory, directory: Path = HISTORIES_DIR) -> WorkflowHistory:
    return WorkflowHistory.from_json(entry.workflow_id, (directory / entry.file).read_text())


def history_json(entry: RecordedHistory, directory: Path = HISTORIES_DIR) -> dict[str, Any]:
    history: dict[str, Any] = json.loads((directory / entry.file).read_text())
    return history


def replayer(workflows: list[type]) -> Replayer:
    return Replayer(
        workflows=workflows,
        data_converter=data_converter(),
        workflow_runner=workflow_runner(),
        interceptors=[tracing_interceptor()],
    )


def test_every_scenario_has_recorded_histories_of_both_workflow_types() -> None:
    entries = recorded()
    assert entries, f"no histories in {HISTORIES_DIR}: run `python -m tests.replay.record`"
    assert {e.scenario for e in entries} == {s.name for s in SCENARIOS}, (
        "histories and scenarios differ: run `python -m tests.replay.record`"
    )
    assert {e.workflow_type for e in entries} == {"RunbookWorkflow", "HostWorkflow"}
    on_disk = {p.name for p in Path(HISTORIES_DIR).glob("*.json")} - {MANIFEST}
    assert on_disk == {e.file for e in entries}


@pytest.mark.parametrize("entry", recorded(), ids=lambda e: e.file)
async def test_recorded_history_replays_without_nondeterminism(entry: RecordedHistory) -> None:
    result = await replayer(WORKFLOWS).replay_workflow(load(entry), raise_on_replay_failure=False)
    assert result.replay_failure is None, (
        f"{entry.file} ({entry.covers}) no longer replays: {result.replay_failure}. "
        "Make the change replay-safe (workflow.patched) or re-record: python -m tests.replay.record"
    )


@pytest.mark.parametrize("entry", recorded(PREVIOUS_DIR), ids=lambda e: e.file)
async def test_a_history_of_the_previous_release_replays(entry: RecordedHistory) -> None:
    result = await replayer(WORKFLOWS).replay_workflow(
        load(entry, PREVIOUS_DIR), raise_on_replay_failure=False
    )
    assert result.replay_failure is None, f"previous/{entry.file} no longer replays: {result.replay_failure}"


@pytest.mark.parametrize("entry", recorded(), ids=lambda e: e.file)
async def test_every_local_activity_result_may_reach_the_run_one_task_late(entry: RecordedHistory) -> None:
    """Under load sdk-core may record a local activity's marker with one workflow task and
    hand its result to the workflow in the next; replay hands it over in the marker's task.
    Each such marker of each recorded run, rewritten to that shape, must still replay."""
    history = history_json(entry)
    markers = deferrable(history)
    failures = []
    for index in markers:
        shifted = WorkflowHistory.from_json(entry.workflow_id, json.dumps(defer_result(history, index)))
        result = await replayer(WORKFLOWS).replay_workflow(shifted, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            kind = local_activity_type(history["events"][index])
            failures.append(f"{kind} at event #{index}: {result.replay_failure}")
    assert not failures, "\n".join(failures)


async def test_a_patch_asked_after_a_local_activity_fails_when_its_result_came_one_task_late() -> None:
    """The failure the patches-at-start change removes, reproduced: the previous release asked
    `launch-in-background` after signing the hosts' inputs (a local activity), so the same
    rewrite of its own history fails the way a status query failed under load."""
    entry = next(e for e in recorded(PREVIOUS_DIR) if e.scenario == "waves")
    history = history_json(entry, PREVIOUS_DIR)
    first_sign = next(
        i for i in deferrable(history) if local_activity_type(history["events"][i]) == "trust.sign"
    )
    shifted = WorkflowHistory.from_json(entry.workflow_id, json.dumps(defer_result(history, first_sign)))
    result = await replayer(WORKFLOWS).replay_workflow(shifted, raise_on_replay_failure=False)
    assert isinstance(result.replay_failure, workflow.NondeterminismError), result.replay_failure
    assert "patch marker encountered for change launch-in-background" in str(result.replay_failure)


def test_new_runs_record_their_patches_in_their_first_workflow_task() -> None:
    # The property that makes the late result harmless: no patch marker after the first task.
    for entry in recorded():
        if entry.workflow_type != "RunbookWorkflow":
            continue
        events = history_json(entry)["events"]
        first_task_done = next(
            i for i, e in enumerate(events) if e["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_COMPLETED"
        )
        second_task = next(
            i
            for i, e in enumerate(events)
            if i > first_task_done and e["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"
        )
        patches = [
            i
            for i, e in enumerate(events)
            if e["eventType"] == "EVENT_TYPE_MARKER_RECORDED"
            and e["markerRecordedEventAttributes"]["markerName"] == "core_patch"
        ]
        assert patches and all(first_task_done < i < second_task for i in patches), (entry.file, patches)


# Unsandboxed: the sandbox would re-import this test module (and the recorder it imports),
# which touches the file system. Non-determinism is detected by the SDK core, which
# compares commands with history events the same way with or without the sandbox.
@workflow.defn(name="RunbookWorkflow", sandboxed=False)
class RunbookWorkflowWithTimerFirst(RunbookWorkflow):
    """A plausible careless edit: wait a moment before loading the plan. Every recorded run
    scheduled `plan.load` as its first command; this one starts a timer instead."""

    @workflow.run
    async def run(self, request: RunRequest) -> RunReport:
        await workflow.sleep(timedelta(seconds=1))
        return await super().run(request)


async def test_replay_detects_a_workflow_that_schedules_a_different_first_command() -> None:
    entry = next(e for e in recorded() if e.workflow_type == "RunbookWorkflow")
    result = await replayer([RunbookWorkflowWithTimerFirst]).replay_workflow(
        load(entry), raise_on_replay_failure=False
    )
    assert isinstance(result.replay_failure, workflow.NondeterminismError), result.replay_failure


def test_the_local_scenario_recorded_local_activities_and_a_regular_one() -> None:
    # Otherwise the scenario could replay cleanly without ever exercising the local path.
    entry = next(e for e in recorded() if e.scenario == "local" and e.workflow_type == "HostWorkflow")
    events = json.loads((HISTORIES_DIR / entry.file).read_text())["events"]
    # A local activity's marker names its activity in the JSON of its `data` detail (base64 here).
    local = [
        json.loads(
            base64.b64decode(e["markerRecordedEventAttributes"]["details"]["data"]["payloads"][0]["data"])
        )
        for e in events
        if e["eventType"] == "EVENT_TYPE_MARKER_RECORDED"
    ]
    local_reads = [m for m in local if m["activity_type"] == "module.test.read"]
    scheduled = [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in events
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
    ]
    assert len(local_reads) == 3 and scheduled == ["module.test.step"], (len(local_reads), scheduled)
