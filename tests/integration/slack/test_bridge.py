"""Slack approvals end to end over real HTTP: the engine posts a gate's message to (fake)
Slack, a signed click on the bridge becomes the `decide` Update, and the run goes on."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import WorkflowHandle

from pitstop.contracts import GateState, RunReport, RunStatus
from tests.integration.engine.conftest import status_when
from tests.integration.slack.conftest import RUN_CHANNEL, UI_URL, StartFn
from tests.integration.slack.slackfake import (
    Clicker,
    FakeSlack,
    SlackCall,
    buttons,
    channel_id,
    view_submission,
)
from tests.testmodules import CALLS

Handle = WorkflowHandle[Any, RunReport]


def gate_of(status: RunStatus, gate_id: str) -> GateState:
    return next(g for g in status.gates if g.rule.gate_id == gate_id)


async def gate_message(slack: FakeSlack, gate_id: str) -> SlackCall:
    """The approval request the engine posted for a gate."""
    return await slack.wait_for(
        "chat.postMessage", lambda c: f"Approval needed: {gate_id}" in c.args.get("text", "")
    )


async def closed_update(slack: FakeSlack, posted: SlackCall) -> SlackCall:
    """The `chat.update` that showed the gate closed: the same message, without buttons."""
    return await slack.wait_for(
        "chat.update",
        lambda c: (
            c.args.get("ts") == posted.ts and not buttons(c) and "Approval needed" not in c.args["text"]
        ),
    )


def ephemerals(slack: FakeSlack, user: str) -> list[str]:
    return [str(c.args["text"]) for c in slack.called("chat.postEphemeral", user=user)]


CANARY = """
name: canary-upgrade
approvers:
  sre: [alice, bob, carol]
stages:
  - name: canary
    hosts: all
    gate:
      before: true
      approvers: sre
      four_eyes: true
      prompt: "Upgrade the canary?"
      slack_channel: "#ops"
    tasks:
      - name: upgrade
        test.step: {value: "{{ inventory_hostname }}"}
"""


async def test_a_click_approves_the_gate_and_the_run_proceeds(
    start: StartFn, slack: FakeSlack, bridge: Clicker
) -> None:
    CALLS.clear()
    handle = await start(CANARY, hosts=2, requested_by="alice")
    posted = await gate_message(slack, "canary:before")

    # The engine's message: in the gate's channel, with the prompt, the hosts, both buttons
    # carrying the run and the gate, and a link to the run in the Temporal UI.
    assert posted.args["channel"] == "#ops"
    assert [b["action_id"] for b in buttons(posted)] == ["pitstop_approve", "pitstop_reject"]
    assert all(
        f'"run":"{handle.id}"' in b["value"] and '"gate":"canary:before"' in b["value"]
        for b in buttons(posted)
    )
    rendered = str(posted.args["blocks"])
    assert f"{UI_URL}/namespaces/default/workflows/{handle.id}" in rendered
    assert "Upgrade the canary?" in rendered and "`h00`, `h01`" in rendered
    assert CALLS == []

    response = await bridge.click(posted, "U0BOB")
    assert response.status_code == 200

    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert sorted(h for h, _, _ in CALLS) == ["h00", "h01"]
    gate = next(g for g in report.gates if g.rule.gate_id == "canary:before")
    assert [(v.approver, v.source) for v in gate.votes] == [("bob", "slack:U0BOB")]
    assert gate.refused == [] and report.notices == []

    # The message now shows who decided, and cannot be clicked any more.
    closed = await closed_update(slack, posted)
    assert closed.args["channel"] == posted.channel
    assert "approved by bob" in str(closed.args["blocks"])
    assert ephemerals(slack, "U0BOB") == []

    # Progress went into the thread under the run's first message, in the default channel.
    first = slack.called("chat.postMessage", channel=RUN_CHANNEL)
    assert len(first) == 1 and "thread_ts" not in first[0].args and "canary-upgrade" in first[0].args["text"]
    thread = [c.args for c in slack.called("chat.postMessage", channel=channel_id(RUN_CHANNEL))]
    assert all(t["thread_ts"] == first[0].ts for t in thread)
    assert [t["text"] for t in thread] == ["Stage *canary*: ok (2 ok)", "Run ended: *succeeded*"]


QUORUM_TWO = """
name: two-approvals
approvers:
  sre: [alice, bob, carol]
stages:
  - name: fleet
    hosts: all
    gate: {before: true, approvers: sre, quorum: 2}
    tasks:
      - test.step: {value: "{{ inventory_hostname }}"}
"""


async def test_forged_or_stale_signatures_get_401_and_cast_no_vote(
    start: StartFn, slack: FakeSlack, bridge: Clicker
) -> None:
    handle = await start(QUORUM_TWO)
    posted = await gate_message(slack, "fleet:before")

    forged = await bridge.click(posted, "U0BOB", secret="not-the-signing-secret")
    stale = await bridge.click(posted, "U0BOB", age_s=6 * 60)  # signed right, but 6 minutes old
    assert (forged.status_code, stale.status_code) == (401, 401)

    status = await handle.query("status", result_type=RunStatus)
    gate = gate_of(status, "fleet:before")
    assert (gate.status, gate.votes, gate.refused) == ("open", [], [])
    assert slack.called("chat.postEphemeral") == []

    # The same click, signed now with the real secret, counts.
    assert (await bridge.click(posted, "U0BOB")).status_code == 200
    status = await status_when(handle, lambda s: bool(gate_of(s, "fleet:before").votes))
    assert [v.approver for v in gate_of(status, "fleet:before").votes] == ["bob"]
    await handle.terminate("test over")


async def test_a_slack_user_who_is_not_an_approver_is_told_so_and_casts_no_vote(
    start: StartFn, slack: FakeSlack, bridge: Clicker
) -> None:
    handle = await start(QUORUM_TWO)
    posted = await gate_message(slack, "fleet:before")

    # Mapped to a person who is not among the gate's approvers: the gate refuses the vote,
    # and the refusal is on the record (status and report), as for a CLI vote.
    await bridge.click(posted, "U0MALLORY")
    # Not mapped at all (no user entry; e-mail outside the trusted domains): never sent.
    await bridge.click(posted, "U0EVE")
    await bridge.click(posted, "U0NOBODY")

    told = await slack.wait_for("chat.postEphemeral", lambda c: c.args["user"] == "U0MALLORY")
    assert told.args["channel"] == posted.channel
    assert "not counted: 'mallory' is not an approver for gate 'fleet:before'" in told.args["text"]
    for user in ("U0EVE", "U0NOBODY"):
        told = await slack.wait_for("chat.postEphemeral", lambda c, u=user: c.args["user"] == u)
        assert "You are not mapped to a pitstop approver" in told.args["text"] and user in told.args["text"]

    gate = gate_of(await handle.query("status", result_type=RunStatus), "fleet:before")
    assert gate.votes == []
    assert [(v.approver, v.source, v.accepted) for v in gate.refused] == [
        ("mallory", "slack:U0MALLORY", False)
    ]
    # Nothing changed on the gate, so its message was not touched.
    assert slack.called("chat.update") == []
    await handle.terminate("test over")


async def test_a_double_click_counts_once(start: StartFn, slack: FakeSlack, bridge: Clicker) -> None:
    handle = await start(QUORUM_TWO)
    posted = await gate_message(slack, "fleet:before")

    # Slack delivering one click twice (a retry, a double click): both at the same time.
    first, second = await asyncio.gather(bridge.click(posted, "U0BOB"), bridge.click(posted, "U0BOB"))
    assert (first.status_code, second.status_code) == (200, 200)
    status = await status_when(handle, lambda s: bool(gate_of(s, "fleet:before").votes))
    await asyncio.sleep(0.5)  # a second vote, were it counted, would have arrived by now
    status = await handle.query("status", result_type=RunStatus)
    gate = gate_of(status, "fleet:before")
    assert [v.approver for v in gate.votes] == ["bob"]
    # One Update, not a vote and a refused duplicate: nothing in the refused list, no ephemeral.
    assert gate.refused == [] and ephemerals(slack, "U0BOB") == []
    assert gate.status == "open"  # quorum 2: one vote is not enough

    # The message shows the vote so far, buttons still there.
    partial = await slack.wait_for("chat.update", lambda c: c.args["ts"] == posted.ts)
    assert "Votes so far* (1 of 2)" in str(partial.args["blocks"]) and buttons(partial)

    # Clicking Reject after approving is a different click: the gate's own answer.
    await bridge.click(posted, "U0BOB", approve=False)
    told = await slack.wait_for("chat.postEphemeral", lambda c: c.args["user"] == "U0BOB")
    assert "'bob' already voted on gate 'fleet:before'" in told.args["text"]

    await bridge.click(posted, "U0CAROL")
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert [v.approver for v in report.gates[0].votes] == ["bob", "carol"]
    # Long after both deliveries were handled: bob was told "already voted" once, for Reject.
    assert len(ephemerals(slack, "U0BOB")) == 1


EXPIRING = """
name: expiring
approvers:
  sre: [bob]
stages:
  - name: first
    hosts: all
    gate: {before: true, approvers: sre, timeout: 1s, on_timeout: approve}
    tasks:
      - test.step: {value: first}
  - name: second
    hosts: all
    gate: {before: true, approvers: sre}
    tasks:
      - test.step: {value: second}
"""


async def test_a_click_on_an_expired_gate_is_refused_and_its_message_shows_it_closed(
    start: StartFn, slack: FakeSlack, bridge: Clicker
) -> None:
    handle = await start(EXPIRING)
    first = await gate_message(slack, "first:before")
    # Nobody clicked: the deadline passed and the gate closed itself. Its message lost its
    # buttons when it closed, so a stale copy is all anyone can still click.
    closed = await closed_update(slack, first)
    assert "approved automatically on timeout" in str(closed.args["blocks"])
    second = await gate_message(slack, "second:before")

    await bridge.click(first, "U0BOB")
    told = await slack.wait_for("chat.postEphemeral", lambda c: c.args["user"] == "U0BOB")
    assert "gate 'first:before' is closed (approved automatically on timeout" in told.args["text"]
    assert "votes are no longer accepted" in told.args["text"]

    # A run that ended closes its open gates' messages too, and refuses their clicks.
    await handle.signal("abort", "stopped by the test")
    report = await handle.result()
    assert report.status == "aborted"
    assert "closed: stopped by the test" in str((await closed_update(slack, second)).args["blocks"])
    await bridge.click(second, "U0BOB")
    told = await slack.wait_for("chat.postEphemeral", lambda c: "has ended" in c.args["text"])
    assert f"run {handle.id} has ended; its gates no longer accept votes" in told.args["text"]
    assert all(g.votes == [] for g in report.gates)


COMMENTED = """
name: commented
approvers:
  sre: [frank]
stages:
  - name: fleet
    hosts: all
    gate: {before: true, approvers: sre, require_comment: true, prompt: "Dashboards green?"}
    tasks:
      - test.step: {value: done}
"""


async def test_a_gate_that_requires_a_comment_asks_for_it_in_a_dialog(
    start: StartFn, slack: FakeSlack, bridge: Clicker
) -> None:
    handle = await start(COMMENTED)
    posted = await gate_message(slack, "fleet:before")
    # frank is in no `users` entry: Slack's profile gives frank@example.com, a trusted domain.
    await bridge.click(posted, "U0FRANK")
    opened = await slack.wait_for("views.open")
    assert opened.args["trigger_id"] == f"{posted.ts}.U0FRANK.trigger"
    assert slack.called("users.info", user="U0FRANK")
    status = await handle.query("status", result_type=RunStatus)
    assert gate_of(status, "fleet:before").votes == []  # the click alone is no vote

    response = await bridge.post(view_submission(opened, "U0FRANK", "all green, checked the canary"))
    assert response.status_code == 200
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    vote = report.gates[0].votes[0]
    assert (vote.approver, vote.comment, vote.source) == (
        "frank",
        "all green, checked the canary",
        "slack:U0FRANK",
    )
    assert "all green, checked the canary" in str((await closed_update(slack, posted)).args["blocks"])


ESCALATING = """
name: escalating
approvers:
  sre: [bob]
  managers: [dave]
stages:
  - name: fleet
    hosts: all
    gate: {before: true, approvers: sre, timeout: 2s, on_timeout: escalate, escalate_to: managers}
    tasks:
      - test.step: {value: done}
"""


async def test_an_escalated_gate_mentions_the_second_group_who_can_then_decide(
    start: StartFn, slack: FakeSlack, bridge: Clicker
) -> None:
    handle = await start(ESCALATING)
    posted = await gate_message(slack, "fleet:before")
    await bridge.click(posted, "U0DAVE")  # before the escalation dave may not vote
    told = await slack.wait_for("chat.postEphemeral", lambda c: c.args["user"] == "U0DAVE")
    assert "'dave' is not an approver" in told.args["text"]

    reply = await slack.wait_for("chat.postMessage", lambda c: c.args.get("thread_ts") == posted.ts)
    assert "<@U0DAVE>" in reply.args["text"] and "escalated to you" in reply.args["text"]
    assert reply.args["reply_broadcast"] is True
    escalated = await slack.wait_for("chat.update", lambda c: c.args["ts"] == posted.ts)
    assert escalated.args["text"].startswith("Escalated, approval needed: fleet:before") and buttons(
        escalated
    )

    # The same person, the same message, the same button: a new vote now that dave may decide.
    await bridge.click(escalated, "U0DAVE")
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert [v.approver for v in report.gates[0].votes] == ["dave"]
