"""The Temporal side of a Slack click: a signed vote, sent as the `decide` Update with an id
stable per click.

Click id: `slack-<message ts>-<Slack user id>-<gate id>-<approve|reject>`, with `-escalated`
appended for the buttons an escalated gate's message shows. Slack may deliver
one click twice (its retries, a double click, two bridge replicas behind a balancer); every
delivery carries the same message ts, user and button, so every delivery is the same Update
and Temporal runs it once, answering the repeats with the first outcome. Approve and Reject
are different ids: a person who approves and then clicks Reject gets the gate's own answer
("already voted"), not a replay of their approval; and someone of the escalation group
refused before the escalation is heard again on the escalated message.

The vote carries a proof signed with the vote key (`pitstop.proofs`): run, gate, approve or
reject, the Slack user and the approver name it maps to, the comment, the click id and the
time. The run records the vote as verified, with source `slack:<user id>`, only when that
signature checks out. The Update id is a keyed hash of the click id, so that nobody without
the key can send an Update under a future click's id first and have the real click answered
with their outcome.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from typing import cast

from pydantic import BaseModel
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from pitstop.approvals import Decision, VoteRecord
from pitstop.keys import KeyRing
from pitstop.proofs import signed_decision
from pitstop.slack.contracts import ButtonValue
from workflows.runbook import RunbookWorkflow

SOURCE_PREFIX = "slack"
# How long a click waits for the run to take the vote before the voter is told it is pending.
VOTE_TIMEOUT_S = 20.0


class VoteOutcome(BaseModel):
    accepted: bool
    # Why the vote did not count (the gate rules' own words), empty when accepted.
    reason: str = ""
    vote: VoteRecord | None = None


def update_id(message_ts: str, user_id: str, button: ButtonValue, approve: bool) -> str:
    vote_id = f"{SOURCE_PREFIX}-{message_ts}-{user_id}-{button.gate}-{'approve' if approve else 'reject'}"
    return vote_id + ("-escalated" if button.escalated else "")


def private_update_id(ring: KeyRing, click: str) -> str:
    """The Update id of a click: stable per click, unguessable without the vote key."""
    mac = hmac.new(ring.signing, b"pitstop/update-id/v1\x00" + click.encode(), hashlib.sha256).hexdigest()
    return f"{SOURCE_PREFIX}-{mac[:40]}"


def signed_vote(
    ring: KeyRing,
    run: str,
    gate: str,
    approve: bool,
    approver: str,
    user_id: str,
    click: str,
    comment: str = "",
) -> Decision:
    """The vote of a verified Slack user. The subject names the Slack account, so the audit
    trail tells which login voted."""
    return signed_decision(
        ring,
        run=run,
        gate=gate,
        approve=approve,
        approver=approver,
        subject=f"{SOURCE_PREFIX}:{user_id}",
        click=click,
        comment=comment,
    )


async def cast_vote(client: Client, run_id: str, vote: Decision, vote_id: str) -> VoteOutcome:
    """Send the vote as the `decide` Update and say whether it counted, and if not, why."""
    handle = client.get_workflow_handle(run_id)
    try:
        async with asyncio.timeout(VOTE_TIMEOUT_S):
            # The SDK types an async Update's result as its coroutine; it is the VoteRecord.
            record = cast(VoteRecord, await handle.execute_update(RunbookWorkflow.decide, vote, id=vote_id))
    except TimeoutError:
        # No worker has taken the Update (workers down, or the run's task queue is backed up).
        # Whether it is applied later is the server's business; the voter must not guess.
        return VoteOutcome(
            accepted=False,
            reason=(
                f"run {run_id} did not answer within {VOTE_TIMEOUT_S:g}s, so your vote may or may not "
                "be recorded; check the message or `pitstop status` (clicking again never counts twice)"
            ),
        )
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        return VoteOutcome(accepted=False, reason=getattr(cause, "message", None) or str(cause or exc))
    except RPCError as exc:
        return VoteOutcome(accepted=False, reason=_rpc_reason(run_id, exc))
    return VoteOutcome(accepted=True, vote=record)


def _rpc_reason(run_id: str, exc: RPCError) -> str:
    if exc.status == RPCStatusCode.NOT_FOUND:
        if "completed" in exc.message or "closed" in exc.message:
            return f"run {run_id} has ended; its gates no longer accept votes"
        return f"run {run_id} was not found; it may have ended and been deleted"
    if "completed" in exc.message or "already finished" in exc.message:
        return f"run {run_id} has ended; its gates no longer accept votes"
    return f"pitstop could not reach run {run_id}: {exc.message}"
