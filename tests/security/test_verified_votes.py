"""Verified votes (issue #13): a vote's source is set by whoever verified it, never by the
client; `require_verified` gates count only votes signed with the vote key; four-eyes compares
verified identities.

A vote from the Temporal UI or any client is a claim, whatever `source` it names. The Slack
bridge signs each click it forwards (real bridge code, driven with signed Slack requests and
the recording Web API server of tests/integration/slack/); a holder of the vote key (the CLI
next to the embedded stack) signs what it is told. Signatures read from history cannot be
reused: for another run or gate, altered, replayed, or stale, they are refused and recorded.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from pitstop.contracts import Decision, GateState, RunReport, RunStatus, VoteRecord
from pitstop.keys import parse_keys
from pitstop.proofs import sign_request, signed_decision
from pitstop.settings import Settings
from pitstop.slack.votes import signed_vote
from tests.integration.engine.conftest import StartFn, engine_worker, hosts_inventory, start_run, status_when
from tests.integration.slack.conftest import bridge, slack, slack_env, slack_worker, start
from tests.integration.slack.slackfake import Clicker, FakeSlack, SlackCall
from tests.security.messages_support import (
    assert_no_key_in_history,
    event_types,
    history,
    scheduled_activities,
    votes_sent,
)
from tests.testmodules import CALLS

Handle = WorkflowHandle[Any, RunReport]
PITSTOP = Path(sys.executable).parent / "pitstop"
REPO = Path(__file__).resolve().parents[2]
__all__ = ["bridge", "engine_worker", "slack", "slack_env", "slack_worker", "start", "start_run"]


def gate_of(status: RunStatus, gate_id: str) -> GateState:
    return next(g for g in status.gates if g.rule.gate_id == gate_id)


def is_open(gate_id: str) -> Any:
    return lambda s: any(g.rule.gate_id == gate_id and g.status == "open" for g in s.gates)


async def refused(handle: Handle, decision: Decision) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update("decide", decision)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "VoteRefused"
    return cause.message


async def status(handle: Handle) -> RunStatus:
    return await handle.query("status", result_type=RunStatus)


def cli(
    settings: Settings, queue: str, home: Path, *args: str, vote_key: str | None
) -> subprocess.CompletedProcess[str]:
    """`pitstop ...` as an operator runs it; with or without the vote key on this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITSTOP_VOTE_KEY")}
    env.update(
        TEMPORAL_ADDRESS=settings.temporal_address,
        PITSTOP_TASK_QUEUE=queue,
        PITSTOP_HOME=str(home),  # no embedded stack's key here
        PYTHONPATH=str(REPO),
        COLUMNS="400",
    )
    if vote_key is not None:
        env["PITSTOP_VOTE_KEY"] = vote_key
    return subprocess.run([str(PITSTOP), *args], capture_output=True, text=True, env=env, timeout=120)


TWO_GATES = """
name: claims
approvers: {sre: [alice, bob, carol]}
stages:
  - name: lenient
    hosts: gpu
    gate: {before: true, approvers: sre}
    tasks:
      - test.step: {value: lenient}
  - name: strict
    hosts: gpu
    gate: {before: true, approvers: sre, require_verified: true}
    tasks:
      - test.step: {value: strict}
"""


async def test_client_votes_are_claims_and_a_require_verified_gate_refuses_them(
    start_run: StartFn,
    temporal_client: Client,
    temporal_settings: Settings,
    engine_worker: str,
    tmp_path: Path,
    pitstop_keys: dict[str, str],
) -> None:
    handle = await start_run(TWO_GATES, hosts_inventory(1))
    await status_when(handle, is_open("lenient:before"))
    # A UI vote that says it comes from Slack: counted on a gate that takes claims, as one.
    vote = await handle.execute_update(
        "decide", Decision(approver="bob", approve=True, source="slack:U0BOB"), result_type=VoteRecord
    )
    st = await status_when(handle, is_open("strict:before"))
    [counted] = gate_of(st, "lenient:before").votes
    assert (counted.source, counted.verified, counted.claimed_source) == ("unverified", False, "slack:U0BOB")
    assert (vote.source, vote.verified) == ("unverified", False)

    # On a gate that requires verified votes: refused, from the UI, its Signal twin and the CLI.
    expected = "gate 'strict:before' counts only verified votes, and this vote is not signed"
    assert expected in await refused(handle, Decision(approver="bob", approve=True, source="slack:U0BOB"))
    await handle.signal("decide_signal", Decision(approver="carol", approve=True, source="slack:U0CAROL"))
    out = await asyncio.to_thread(
        cli, temporal_settings, engine_worker, tmp_path, "approve", handle.id, "--as", "alice", vote_key=None
    )
    assert out.returncode == 1 and expected in out.stderr, out.stderr
    st = await status_when(handle, lambda s: len(gate_of(s, "strict:before").refused) == 3)
    strict = gate_of(st, "strict:before")
    assert (strict.status, strict.votes) == ("open", [])
    assert [(v.approver, v.verified, v.claimed_source) for v in strict.refused] == [
        ("bob", False, "slack:U0BOB"),
        ("carol", False, "slack:U0CAROL"),
        ("alice", False, "cli"),
    ]
    assert [a["value"] for _, _, a in CALLS] == ["lenient"]

    # The same CLI on a machine that holds the vote key vouches for its --as: verified.
    out = await asyncio.to_thread(
        cli,
        temporal_settings,
        engine_worker,
        tmp_path,
        "approve",
        handle.id,
        "--as",
        "alice",
        vote_key=pitstop_keys["PITSTOP_VOTE_KEY"],
    )
    assert out.returncode == 0 and "verified as cli:alice" in out.stdout, (out.stdout, out.stderr)
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    [signed] = next(g for g in report.gates if g.rule.gate_id == "strict:before").votes
    assert (signed.approver, signed.source, signed.verified) == ("alice", "cli:alice", True)
    assert await assert_no_key_in_history(temporal_client, [handle.id], pitstop_keys) >= 3


SLACK_GATES = """
name: slack-gates
approvers: {sre: [alice, bob, carol]}
stages:
  - name: a
    hosts: all
    gate: {before: true, approvers: sre, require_verified: true, slack_channel: "#ops"}
    tasks:
      - test.step: {value: a}
  - name: b
    hosts: all
    gate: {before: true, approvers: sre, require_verified: true, slack_channel: "#ops"}
    tasks:
      - test.step: {value: b}
"""


async def gate_message(slack: FakeSlack, run_id: str, gate_id: str) -> SlackCall:
    return await slack.wait_for(
        "chat.postMessage",
        lambda c: (
            f"Approval needed: {gate_id}" in c.args.get("text", "") and run_id in c.args.get("text", "")
        ),
    )


async def test_a_bridge_signed_click_is_verified_and_its_signature_cannot_be_reused(
    start: StartFn, slack: FakeSlack, bridge: Clicker, temporal_client: Client, pitstop_keys: dict[str, str]
) -> None:
    CALLS.clear()
    handle = await start(SLACK_GATES)
    other = await start(SLACK_GATES)
    posted = await gate_message(slack, handle.id, "a:before")
    assert (await bridge.click(posted, "U0BOB")).status_code == 200
    st = await status_when(handle, is_open("b:before"))
    [vote] = gate_of(st, "a:before").votes
    assert (vote.approver, vote.source, vote.verified, vote.claimed_source) == (
        "bob",
        "slack:U0BOB",
        True,
        None,
    )

    # What anyone who can read the run's history has: bob's signed vote.
    [genuine] = votes_sent(await history(temporal_client, handle.id))
    proof = genuine.proof
    assert proof is not None and (proof.run, proof.gate, proof.subject) == (
        handle.id,
        "a:before",
        "slack:U0BOB",
    )
    other_run = temporal_client.get_workflow_handle(other.id, result_type=RunReport)
    await status_when(other_run, is_open("a:before"))
    assert f"the vote's signature is for run {handle.id!r}, not this run" in await refused(other_run, genuine)
    await assert_altered_copies_are_refused(handle, genuine)
    await assert_votes_signed_otherwise_are_refused(handle, pitstop_keys)

    st = await status(handle)
    b = gate_of(st, "b:before")
    assert (b.status, b.votes) == ("open", [])
    assert all(not v.verified and v.source == "unverified" for v in b.refused)
    assert len(gate_of(st, "a:before").votes) == 1
    assert [a["value"] for _, _, a in CALLS] == ["a"]  # stage b never started

    # A real click on stage b's message opens it.
    posted_b = await gate_message(slack, handle.id, "b:before")
    assert (await bridge.click(posted_b, "U0CAROL")).status_code == 200
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert [(v.approver, v.source) for g in report.gates for v in g.votes] == [
        ("bob", "slack:U0BOB"),
        ("carol", "slack:U0CAROL"),
    ]
    await other_run.terminate("test over")
    # The run and its two hosts; the other run, whose stages never started.
    assert await assert_no_key_in_history(temporal_client, [handle.id, other.id], pitstop_keys) == 4


NOT_ACCEPTED = (
    "the vote's signature was not accepted: its signature does not verify (altered after signing, "
    "or signed with another vote key); nothing was counted"
)


async def assert_altered_copies_are_refused(handle: Handle, genuine: Decision) -> None:
    """bob's signed vote for gate a, copied from history and altered, sent to gate b: refused,
    each with its reason."""
    proof = genuine.proof
    assert proof is not None
    b_gate = {"gate": "b:before"}
    not_accepted = NOT_ACCEPTED
    attempts = {
        # Another gate: the vote's gate changed; then the signed gate too (a new click id, as
        # the same one would be refused as replayed before its signature is even checked).
        "gate": genuine.model_copy(update=b_gate),
        "signed gate": genuine.model_copy(
            update={**b_gate, "proof": proof.model_copy(update={**b_gate, "click": "forged-1"})}
        ),
        # Another approver: only in the vote; then in what was signed too.
        "approver": genuine.model_copy(update={"approver": "carol"}),
        "signed approver": genuine.model_copy(
            update={
                **b_gate,
                "approver": "carol",
                "proof": proof.model_copy(update={**b_gate, "approver": "carol", "click": "forged-2"}),
            }
        ),
        # The same click again (under another Update id): the run heard it already.
        "replayed click": genuine,
    }
    reasons = {what: await refused(handle, decision) for what, decision in attempts.items()}
    assert reasons == {
        "gate": "the vote's signature is for gate 'a:before', not 'b:before'; nothing was counted",
        "signed gate": not_accepted,
        "approver": (
            "the vote says something other than what its signature covers (approve, approver, comment); "
            "nothing was counted"
        ),
        "signed approver": not_accepted,
        "replayed click": (
            f"this click ({proof.click}) was already heard by this run; a replayed click counts nothing"
        ),
    }, reasons


async def assert_votes_signed_otherwise_are_refused(handle: Handle, pitstop_keys: dict[str, str]) -> None:
    """Votes for gate b whose signature was altered, is twenty minutes old, or was made with
    another key: refused."""
    not_accepted = NOT_ACCEPTED
    ring = parse_keys("vote", pitstop_keys["PITSTOP_VOTE_KEY"], "test")
    # A vote signed as the bridge signs it, its signature then altered by one digit.
    fresh = signed_vote(ring, handle.id, "b:before", True, "carol", "U0CAROL", "slack-fresh-click")
    assert fresh.proof is not None
    tampered = fresh.model_copy(
        update={"proof": fresh.proof.model_copy(update={"signature": flip(fresh.proof.signature)})}
    )
    assert await refused(handle, tampered) == not_accepted
    # A click signed with the real key, but twenty minutes ago.
    stale = signed_decision(
        ring,
        run=handle.id,
        gate="b:before",
        approve=True,
        approver="carol",
        subject="slack:U0CAROL",
        click="slack-stale",
        at=datetime.now(UTC) - timedelta(minutes=20),
    )
    assert "minutes ago; vote again" in await refused(handle, stale)
    # And one signed with a key that is not the bridge's.
    wrong_key = parse_keys("vote", "5a" * 16 + "0123456789abcdef" * 2, "attacker")
    assert not_accepted in await refused(
        handle,
        signed_decision(
            wrong_key,
            run=handle.id,
            gate="b:before",
            approve=True,
            approver="carol",
            subject="slack:U0CAROL",
            click="x",
        ),
    )


def flip(signature: str) -> str:
    return ("0" if signature[0] != "0" else "1") + signature[1:]


FOUR_EYES = """
name: four-eyes
approvers: {sre: [alice, bob, carol]}
stages:
  - name: canary
    hosts: all
    gate: {before: true, approvers: sre, four_eyes: true, require_verified: true, slack_channel: "#ops"}
    tasks:
      - test.step: {value: canary}
"""


async def start_signed(
    client: Client, queue: str, requester: str, key: str, subject: str | None = None, **change: Any
) -> Handle:
    """A run whose start request a holder of the vote key signed (as `pitstop run` does)."""
    from pitstop.contracts import RunRequest

    run_id = f"signed-{uuid.uuid4().hex[:10]}"
    request = RunRequest(
        runbook="runbook.yaml",
        inventory="inventory.yaml",
        files={"runbook.yaml": FOUR_EYES, "inventory.yaml": "all:\n  hosts:\n    h00: {}\n"},
        requested_by=requester,
    )
    signed = sign_request(
        parse_keys("vote", key, "test"), request, run=run_id, subject=subject or f"cli:{requester}"
    )
    signed = signed.model_copy(update=change)
    return await client.start_workflow(
        "RunbookWorkflow", signed, id=run_id, task_queue=queue, result_type=RunReport
    )


async def test_four_eyes_compares_verified_identities(
    slack_worker: str,
    slack: FakeSlack,
    bridge: Clicker,
    temporal_client: Client,
    pitstop_keys: dict[str, str],
) -> None:
    CALLS.clear()
    key = pitstop_keys["PITSTOP_VOTE_KEY"]
    handle = await start_signed(temporal_client, slack_worker, "alice", key)
    st = await status_when(handle, is_open("canary:before"))
    assert st.requester is not None and (st.requester.verified, st.requester.subject) == (True, "cli:alice")
    assert gate_of(st, "canary:before").note is None  # a verified requester: four-eyes as written
    posted = await gate_message(slack, handle.id, "canary:before")

    # Alice, verified by Slack: her own run.
    await bridge.click(posted, "U0ALICE")
    told = await slack.wait_for("chat.postEphemeral", lambda c: c.args["user"] == "U0ALICE")
    assert "four-eyes: 'alice' requested this run" in told.args["text"]
    [alices] = [d for d in votes_sent(await history(temporal_client, handle.id)) if d.approver == "alice"]
    # Alice under another name: from the UI (a claim), with her own signed click, and signed by
    # a key holder for the identity that requested the run.
    assert "counts only verified votes" in await refused(handle, Decision(approver="bob", approve=True))
    assert "something other than what its signature covers" in await refused(
        handle, alices.model_copy(update={"approver": "bob"})
    )
    as_bob = signed_decision(
        parse_keys("vote", key, "test"),
        run=handle.id,
        gate="canary:before",
        approve=True,
        approver="bob",
        subject="cli:alice",
        click="cli-as-bob",
    )
    assert (
        "four-eyes: cli:alice requested this run (as 'alice') and may not approve it under another name"
        in await refused(handle, as_bob)
    )
    gate = gate_of(await status(handle), "canary:before")
    assert (gate.status, gate.votes) == ("open", []) and CALLS == []

    # Bob, verified by Slack.
    await bridge.click(posted, "U0BOB")
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert [(v.approver, v.source) for v in report.gates[0].votes] == [("bob", "slack:U0BOB")]
    assert report.requester is not None and report.requester.verified

    # The same gate in a run whose requester nobody vouched for: two verified approvers.
    CALLS.clear()
    unverified = await start_signed(temporal_client, slack_worker, "alice", key, requester_proof=None)
    st = await status_when(unverified, is_open("canary:before"))
    assert st.requester is not None and not st.requester.verified
    gate = gate_of(st, "canary:before")
    assert gate.quorum == 2 and "requester 'alice' is unverified" in (gate.note or "")
    posted = await gate_message(slack, unverified.id, "canary:before")
    await bridge.click(posted, "U0BOB")
    st = await status_when(unverified, lambda s: len(gate_of(s, "canary:before").votes) == 1)
    assert gate_of(st, "canary:before").status == "open" and CALLS == []
    await bridge.click(posted, "U0CAROL")
    report = await unverified.result()
    assert report.status == "succeeded" and report.gates[0].closed_reason == "approved by bob, carol"
    assert await assert_no_key_in_history(temporal_client, [handle.id, unverified.id], pitstop_keys) == 4


async def test_a_start_request_with_a_bad_requester_signature_is_refused_before_anything_runs(
    engine_worker: str, temporal_client: Client, pitstop_keys: dict[str, str]
) -> None:
    key = pitstop_keys["PITSTOP_VOTE_KEY"]
    wrong = "77" * 16 + "0123456789abcdef" * 2
    attempts = {
        "another key": await start_signed(temporal_client, engine_worker, "alice", wrong),
        "another requester": await start_signed(
            temporal_client, engine_worker, "alice", key, requested_by="bob"
        ),
        "another request": await start_signed(temporal_client, engine_worker, "alice", key, limit="h00"),
    }
    expected = {
        "another key": "its signature does not verify",
        "another requester": "it is signed for requester 'alice', not 'bob'",
        "another request": "the request was changed after it was signed",
    }
    for what, handle in attempts.items():
        report = await handle.result()
        assert report.status == "failed" and report.msg.startswith(
            "refused: the start request's requester signature is not valid ("
        ), report.msg
        assert expected[what] in report.msg and "nothing ran" in report.msg
        hist = await history(temporal_client, handle.id)
        assert scheduled_activities(hist) == []
        assert not any("CHILD_WORKFLOW" in t for t in event_types(hist))
