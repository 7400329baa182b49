"""Shared pieces of the tests of signed messages and verified votes: reading a run's whole
history (the run and every host workflow it started), the forged payloads an attacker reads
there, and the search for key bytes in all of it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Iterator
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from pitstop.contracts import Decision, RunStatus


async def history(client: Client, workflow_id: str) -> WorkflowHistory:
    return await client.get_workflow_handle(workflow_id).fetch_history()


async def family(client: Client, run_id: str) -> list[str]:
    """The run and every host workflow it started (their ids, from the run's own history)."""
    ids = [run_id]
    for event in (await history(client, run_id)).events:
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            ids.append(event.start_child_workflow_execution_initiated_event_attributes.workflow_id)
    return ids


def event_types(hist: WorkflowHistory) -> list[str]:
    return [EventType.Name(e.event_type) for e in hist.events]


def scheduled_activities(hist: WorkflowHistory) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def votes_sent(hist: WorkflowHistory) -> list[Decision]:
    """Every `decide` Update input the run accepted: what anyone who can read history sees."""
    out: list[Decision] = []
    for event in hist.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == "decide":
                [decision] = pydantic_data_converter.payload_converter.from_payloads(
                    request.input.args.payloads, [Decision]
                )
                out.append(decision)
    return out


def signals_received(hist: WorkflowHistory, name: str) -> list[dict[str, Any]]:
    """The inputs of the Signals `name` a workflow received, as JSON."""
    out: list[dict[str, Any]] = []
    for event in hist.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
            if attrs.signal_name == name:
                out.append(json.loads(attrs.input.payloads[0].data))
    return out


async def history_when(
    client: Client, workflow_id: str, predicate: Any, within: float = 20.0
) -> WorkflowHistory:
    """The workflow's history once `predicate(history)` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        hist = await history(client, workflow_id)
        if predicate(hist):
            return hist
        if loop.time() > deadline:
            raise AssertionError(f"history of {workflow_id} never matched: {event_types(hist)}")
        await asyncio.sleep(0.05)


async def signal_when(client: Client, workflow_id: str, name: str, count: int = 1) -> list[dict[str, Any]]:
    """The inputs of the Signals `name` the workflow received, once there are `count`."""
    hist = await history_when(client, workflow_id, lambda h: len(signals_received(h, name)) >= count)
    return signals_received(hist, name)


def idle_after_signals(count: int) -> Any:
    """A predicate: `count` Signals received, and every one handled (no workflow task is
    scheduled after the last completed one)."""

    def check(hist: WorkflowHistory) -> bool:
        types = event_types(hist)
        if types.count("EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED") < count:
            return False
        last = {t: i for i, t in enumerate(types)}
        return last.get("EVENT_TYPE_WORKFLOW_TASK_COMPLETED", -1) > last.get(
            "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED", -1
        )

    return check


def _decoded_payloads(value: Any) -> Iterator[bytes]:
    """Every payload's data in a history's JSON (base64 there), decoded."""
    if isinstance(value, dict):
        data = value.get("data")
        if isinstance(data, str) and isinstance(value.get("metadata"), dict):
            with contextlib.suppress(ValueError):
                yield base64.b64decode(data)
        for item in value.values():
            yield from _decoded_payloads(item)
    elif isinstance(value, list):
        for item in value:
            yield from _decoded_payloads(item)


def key_forms(hex_key: str) -> list[bytes]:
    """A key as it could leak: its hex text, its raw bytes, and their base64 (both alphabets)."""
    raw = bytes.fromhex(hex_key)
    forms = [hex_key.lower().encode(), hex_key.upper().encode(), raw]
    for text in (raw, hex_key.encode()):
        forms += [base64.b64encode(text), base64.urlsafe_b64encode(text), base64.b64encode(text).rstrip(b"=")]
    return forms


async def assert_no_key_in_history(client: Client, run_ids: list[str], keys: dict[str, str]) -> int:
    """Search the full history JSON of each run and of its host workflows, and every payload in
    it decoded, for each key's forms; returns how many histories were searched."""
    searched = 0
    for run_id in run_ids:
        for workflow_id in await family(client, run_id):
            text = (await history(client, workflow_id)).to_json()
            blobs = [text.encode(), *_decoded_payloads(json.loads(text))]
            for name, hex_key in keys.items():
                for form in key_forms(hex_key):
                    assert not any(form in blob for blob in blobs), (
                        f"{name} found in the history of {workflow_id}"
                    )
            searched += 1
    return searched


async def notices_when(handle: Any, *needles: str, within: float = 20.0) -> list[str]:
    """The run's notices once each needle is in one of them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        status = await handle.query("status", result_type=RunStatus)
        if all(any(n in notice for notice in status.notices) for n in needles):
            return list(status.notices)
        if loop.time() > deadline:
            raise AssertionError(f"notices never said {needles}: {status.notices}")
        await asyncio.sleep(0.05)
