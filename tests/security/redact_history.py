"""Everything a run wrote to Temporal, as text to search for a secret: the history JSON of the
run and of every child workflow it started, plus every payload decoded (through the client's
payload codec when one is configured, so an encrypted history is searched in the clear)."""

from __future__ import annotations

import base64
from collections.abc import Iterator

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import Client


def _payloads(message: Message) -> Iterator[Payload]:
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if isinstance(value, Message):
            yield from _payloads(value)
            continue
        # a repeated field, or a map (whose values are the messages)
        items = value.values() if callable(getattr(value, "values", None)) else value
        for item in items:
            if isinstance(item, Message):
                yield from _payloads(item)


async def run_history_texts(client: Client, workflow_id: str) -> list[str]:
    """The history JSON of `workflow_id` and its children (recursively), and each payload's
    data decoded."""
    texts: list[str] = []
    pending, seen = [workflow_id], set()
    codec = client.data_converter.payload_codec
    while pending:
        wid = pending.pop()
        if wid in seen:
            continue
        seen.add(wid)
        history = await client.get_workflow_handle(wid).fetch_history()
        texts.append(history.to_json())
        payloads: list[Payload] = []
        for event in history.events:
            if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
                pending.append(event.start_child_workflow_execution_initiated_event_attributes.workflow_id)
            payloads.extend(_payloads(event))
        if codec is not None and payloads:
            payloads = await codec.decode(payloads)
        texts.extend(p.data.decode("utf-8", "replace") for p in payloads)
    return texts


def forms_of(secret: bytes) -> list[str]:
    """The ways a secret's bytes can show up in JSON: as text, base64 (the Secret's wire form),
    and base64 of that (a JSON payload holding the wire form, base64-encoded by the history)."""
    once = base64.b64encode(secret)
    return [
        secret.decode(),
        once.decode(),
        base64.urlsafe_b64encode(secret).decode(),
        base64.b64encode(once).decode(),
    ]


def leaks(texts: list[str], secret: bytes) -> list[str]:
    """Which forms of `secret` appear in `texts` (empty: none)."""
    return [form for form in forms_of(secret) if any(form in text for text in texts)]
