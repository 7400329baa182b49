"""How large the payloads Temporal stores are: every payload in every event of a history, as
Temporal received it (after pitstop's codec: encrypted, claim-checked), measured by its
serialized size — what Temporal's 512 KB warning and 2 MB limit are about.

`largest_payload(history)` for one workflow; `largest_payload_in_run(client, workflow_id)`
for a workflow and, recursively, every child it started (a run with all its host workflows).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory


@dataclass(frozen=True, order=True)
class PayloadSize:
    """One payload of a history: its size first, so `max()` finds the largest."""

    size: int
    workflow_id: str
    event_id: int
    event_type: str
    field: str

    def __str__(self) -> str:
        return (
            f"{self.size} bytes in {self.workflow_id} event {self.event_id} {self.event_type} ({self.field})"
        )


def payloads_with_paths(message: Message, path: str = "") -> Iterator[tuple[str, Payload]]:
    """Every Payload inside `message` (nested, repeated, map values), with its field path."""
    if isinstance(message, Payload):
        yield path, message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        where = f"{path}.{field.name}" if path else field.name
        if isinstance(value, Message):
            yield from payloads_with_paths(value, where)
            continue
        if callable(getattr(value, "items", None)):  # a map: keys are not messages
            for key, item in value.items():
                if isinstance(item, Message):
                    yield from payloads_with_paths(item, f"{where}[{key}]")
            continue
        for index, item in enumerate(value):
            if isinstance(item, Message):
                yield from payloads_with_paths(item, f"{where}[{index}]")


def payload_sizes(history: WorkflowHistory) -> Iterator[PayloadSize]:
    for event in history.events:
        for field, payload in payloads_with_paths(event):
            yield PayloadSize(
                payload.ByteSize(),
                history.workflow_id,
                event.event_id,
                EventType.Name(event.event_type),
                field,
            )


def largest_payload(history: WorkflowHistory) -> PayloadSize | None:
    """The largest payload in any event of `history` (None: the history holds no payload)."""
    return max(payload_sizes(history), default=None)


async def run_histories(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every execution's history of `workflow_id`, latest first: a run that continued as new
    is followed back through each run's `continued_execution_run_id`."""
    histories: list[WorkflowHistory] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(history)
        started = history.events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return histories
        run_id = started.continued_execution_run_id


async def largest_payload_in_run(client: Client, workflow_id: str) -> PayloadSize | None:
    """The largest payload in the histories of `workflow_id` (every execution, when it
    continued as new) and of every child workflow it started, recursively."""
    largest: PayloadSize | None = None
    pending, seen = [workflow_id], set()
    while pending:
        wid = pending.pop()
        if wid in seen:
            continue
        seen.add(wid)
        for history in await run_histories(client, wid):
            for event in history.events:
                if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
                    pending.append(
                        event.start_child_workflow_execution_initiated_event_attributes.workflow_id
                    )
            candidate = largest_payload(history)
            if candidate is not None and (largest is None or candidate > largest):
                largest = candidate
    return largest
