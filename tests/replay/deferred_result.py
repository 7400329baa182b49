"""Rewrite a recorded history into the shape sdk-core gives it when a local activity's result
reaches the workflow one workflow task after the task whose completion recorded its marker.

Seen under load (a status query replayed a finished run and failed as non-deterministic):

    WorkflowTaskCompleted 10
    MarkerRecorded 13          core_local_activity trust.sign (recorded with task 10)
    WorkflowTaskScheduled 14   <- the result was delivered to the workflow in this task
    WorkflowTaskStarted 15
    WorkflowTaskCompleted 16
    MarkerRecorded 17          core_patch launch-in-background
    StartChildWorkflowExecutionInitiated 19 ...

A replay delivers the result in task 10 (the marker's), so code that runs after it sees task
10's patches only. The rewrite inserts such a task right after a local activity's marker in a
history where the commands that followed the result were recorded in the marker's task, and
renumbers every event and every reference to one (`...EventId` fields).
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

MARKER = "EVENT_TYPE_MARKER_RECORDED"
TASK_SCHEDULED = "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"
TASK_STARTED = "EVENT_TYPE_WORKFLOW_TASK_STARTED"
TASK_COMPLETED = "EVENT_TYPE_WORKFLOW_TASK_COMPLETED"


def local_activity_type(event: dict[str, Any]) -> str | None:
    if event["eventType"] != MARKER:
        return None
    attrs = event["markerRecordedEventAttributes"]
    if attrs.get("markerName") != "core_local_activity":
        return None
    data = attrs["details"]["data"]["payloads"][0]["data"]
    activity_type: str = json.loads(base64.b64decode(data))["activity_type"]
    return activity_type


def deferrable(history: dict[str, Any]) -> list[int]:
    """Indexes of the local-activity markers whose task has commands after them: the ones
    whose result could have reached the workflow one task later."""
    events: list[dict[str, Any]] = history["events"]
    return [
        i
        for i, event in enumerate(events)
        if local_activity_type(event) is not None
        and i + 1 < len(events)
        and events[i + 1]["eventType"] != TASK_SCHEDULED
    ]


def defer_result(history: dict[str, Any], index: int) -> dict[str, Any]:
    """The history with a workflow task inserted right after the marker at `index`."""
    if index not in deferrable(history):
        raise ValueError(f"event #{index} is not a local activity marker with commands after it")
    return {**history, "events": _insert_task_after(copy.deepcopy(history["events"]), index)}


def _insert_task_after(events: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    marker = events[index]
    at = marker["eventTime"]
    old_ids = [int(e["eventId"]) for e in events]
    base = old_ids[index]
    # The three new events take ids base+1..base+3; every later event moves up by three.
    renumber = {old: (old if old <= base else old + 3) for old in old_ids}
    scheduled, started, completed = base + 1, base + 2, base + 3
    task_queue = next(e for e in events if e["eventType"] == TASK_SCHEDULED)[
        "workflowTaskScheduledEventAttributes"
    ]["taskQueue"]
    identity = next(e for e in events if e["eventType"] == TASK_COMPLETED)[
        "workflowTaskCompletedEventAttributes"
    ].get("identity", "")
    inserted = [
        {
            "eventId": str(scheduled),
            "eventTime": at,
            "eventType": TASK_SCHEDULED,
            "workflowTaskScheduledEventAttributes": {
                "taskQueue": task_queue,
                "startToCloseTimeout": "10s",
                "attempt": 1,
            },
        },
        {
            "eventId": str(started),
            "eventTime": at,
            "eventType": TASK_STARTED,
            "workflowTaskStartedEventAttributes": {
                "scheduledEventId": str(scheduled),
                "identity": identity,
            },
        },
        {
            "eventId": str(completed),
            "eventTime": at,
            "eventType": TASK_COMPLETED,
            "workflowTaskCompletedEventAttributes": {
                "scheduledEventId": str(scheduled),
                "startedEventId": str(started),
                "identity": identity,
            },
        },
    ]
    out: list[dict[str, Any]] = []
    for i, event in enumerate(events):
        moved = _renumbered(event, renumber)
        if i > index:
            # The commands after the marker, up to the next task, now belong to the new task.
            for value in moved.values():
                if (
                    isinstance(value, dict)
                    and "workflowTaskCompletedEventId" in value
                    and _in_group(events, index, i)
                ):
                    value["workflowTaskCompletedEventId"] = str(completed)
        out.append(moved)
        if i == index:
            out.extend(inserted)
    return out


def _in_group(events: list[dict[str, Any]], marker_index: int, i: int) -> bool:
    """Whether event i is a command of the marker's task (no task scheduled in between)."""
    return all(e["eventType"] != TASK_SCHEDULED for e in events[marker_index + 1 : i + 1])


def _renumbered(value: Any, renumber: dict[int, int], key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _renumbered(v, renumber, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_renumbered(v, renumber, key) for v in value]
    if (key == "eventId" or key.endswith("EventId")) and isinstance(value, str | int):
        old = int(value)
        new = renumber.get(old, old)
        return str(new) if isinstance(value, str) else new
    return value
