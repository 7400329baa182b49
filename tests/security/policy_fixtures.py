"""What the worker-policy security tests share: runs through the real engine (the engine
fixtures), the full history of a run (the parent and every child workflow) as JSON to scan for
bytes that must never be there, and the failures a report holds."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from typing import Any

from temporalio.client import Client, WorkflowHandle

from pitstop.contracts import RunReport, TaskOutcome

# The engine fixtures (a worker with every registered activity, `run` a runbook to its end).
from tests.integration.engine.conftest import engine_worker, run, start_run  # noqa: F401


def _payload_texts(value: Any) -> Iterator[str]:
    """The decoded data of every payload in a history's JSON (it holds them in base64)."""
    if isinstance(value, dict):
        data = value.get("data")
        if isinstance(data, str) and isinstance(value.get("metadata"), dict):
            try:
                text = base64.b64decode(data).decode(errors="replace")
            except (binascii.Error, ValueError):
                text = ""
            yield text
        for item in value.values():
            yield from _payload_texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _payload_texts(item)


async def run_history_json(client: Client, handle: WorkflowHandle[Any, RunReport]) -> str:
    """Every event of the run and of each workflow it started (host workflows), as JSON, with
    every payload also decoded (so a value is found whether it sits in a failure message or
    inside an activity's input or result)."""
    texts: list[str] = []
    pending = [handle.id]
    seen: set[str] = set()
    while pending:
        workflow_id = pending.pop()
        if workflow_id in seen:
            continue
        seen.add(workflow_id)
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        raw = history.to_json()
        texts.append(raw)
        texts.extend(_payload_texts(json.loads(raw)))
        for event in history.events:
            started = event.start_child_workflow_execution_initiated_event_attributes
            if started.workflow_id:
                pending.append(started.workflow_id)
    return "\n".join(texts)


def tasks(report: RunReport) -> dict[str, TaskOutcome]:
    """Every task result of the run's hosts, by task name (the last one wins)."""
    found: dict[str, TaskOutcome] = {}
    for stage in report.stages:
        for host in [*stage.hosts, *stage.rollback_hosts]:
            for task in host.tasks:
                found[task.name] = task
    return found
