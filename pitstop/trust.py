"""What the signing local activities take and give (pydantic, no I/O): the workflows ask,
the worker answers with its keys, and no key ever enters a workflow or its history.

A local activity's input is not recorded in history, only its result (a signature, or
whether one was valid), so even what is signed stays out of history unless the workflow
puts it there itself.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

# What the worker key signs. Votes and requesters are signed with the vote key, elsewhere.
WorkerPurpose = Literal["message", "host-input", "state"]


class SignRequest(BaseModel):
    purpose: WorkerPurpose
    values: list[dict[str, Any]] = Field(min_length=1)


class VerifyRequest(BaseModel):
    purpose: WorkerPurpose
    value: dict[str, Any]
    signature: str


class ProofVerdict(BaseModel):
    """Whether a proof signed with the vote key is valid; `reason` says why not."""

    valid: bool
    reason: str = ""


def message_value(kind: str, body: str, sender: str, receiver: str, receiver_run: str) -> dict[str, Any]:
    """What a message's signature covers: its name, its content's digest, who sent it to whom,
    and the receiving execution (a message cannot be replayed to another run or execution)."""
    return {"kind": kind, "body": body, "sender": sender, "receiver": receiver, "receiver_run": receiver_run}


__all__ = ["ProofVerdict", "SignRequest", "VerifyRequest", "WorkerPurpose", "message_value"]
