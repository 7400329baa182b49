"""Block Kit of a gate's message: what approvers see, and that a closed gate has no buttons."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from pitstop.approvals import GateRule, GateState, VoteRecord
from pitstop.slack.blocks import APPROVE_ACTION, REJECT_ACTION, comment_modal, gate_message
from pitstop.slack.contracts import ButtonValue, GateNotice, ModalMetadata

NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def notice(**gate: Any) -> GateNotice:
    rule = GateRule(
        gate_id="canary:after",
        prompt=gate.pop("prompt", "Canary <healthy> & fine?"),
        approvers=["alice", "bob"],
        quorum=gate.pop("quorum", 1),
        four_eyes=True,
        require_comment=gate.pop("require_comment", False),
        timeout_seconds=3600,
        escalate_to=["dave"],
    )
    state = GateState(rule=rule, opened_at=NOW, deadline=NOW + timedelta(hours=1), **gate)
    return GateNotice(
        run_id="upgrade-1",
        runbook="gpu-node-maintenance",
        requested_by="carol",
        stage="canary",
        hosts=[f"gpu-{i:02d}" for i in range(25)],
        gate=state,
        channel="#ops",
    )


def render(n: GateNotice, **kw: Any) -> tuple[str, list[dict[str, Any]]]:
    return gate_message(n, ui_url="https://temporal.example/", namespace="prod", **kw)


def actions(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_an_open_gate_has_approve_and_reject_buttons_carrying_run_and_gate() -> None:
    text, blocks = render(notice())
    buttons = actions(blocks)
    assert [b["action_id"] for b in buttons] == [APPROVE_ACTION, REJECT_ACTION]
    value = ButtonValue.model_validate_json(buttons[0]["value"])
    assert (value.run, value.gate, value.comment, value.escalated) == (
        "upgrade-1",
        "canary:after",
        False,
        False,
    )
    assert text == "Approval needed: canary:after (run upgrade-1, stage canary)"


def test_the_message_links_the_run_in_the_temporal_ui_and_escapes_runbook_text() -> None:
    _, blocks = render(notice())
    shown = json.dumps(blocks)
    assert "<https://temporal.example/namespaces/prod/workflows/upgrade-1|upgrade-1>" in shown
    assert "Canary &lt;healthy&gt; &amp; fine?" in shown
    deadline = int((NOW + timedelta(hours=1)).timestamp())
    assert "four-eyes: not the requester" in shown and f"<!date^{deadline}^" in shown


def test_many_hosts_are_summarised() -> None:
    _, blocks = render(notice())
    hosts = next(b["text"]["text"] for b in blocks if b.get("text", {}).get("text", "").startswith("*Hosts*"))
    assert "`gpu-19`" in hosts and "gpu-20" not in hosts and hosts.endswith("and 5 more")


def test_a_closed_gate_shows_the_outcome_and_who_decided_without_buttons() -> None:
    vote = VoteRecord(
        approver="bob", approve=True, comment="lgtm", source="slack:U1", verified=True, at=NOW, accepted=True
    )
    claimed = VoteRecord(approver="carol", approve=True, claimed_source="slack:U2", at=NOW, accepted=True)
    closed = notice(status="approved", votes=[vote, claimed], closed_at=NOW, closed_reason="approved by bob")
    text, blocks = render(closed)
    assert actions(blocks) == []
    shown = json.dumps(blocks)
    assert "*Approved* \\u2014 approved by bob" in shown and "bob approved" in shown and "lgtm" in shown
    # A vote nobody verified says so, whatever source its sender claimed.
    assert "carol (unverified) approved" in shown
    assert text.startswith("Approved: canary:after")


def test_partial_votes_and_escalation_are_shown_with_mentions() -> None:
    vote = VoteRecord(approver="bob", approve=True, source="slack:U1", at=NOW, accepted=True)
    n = notice(quorum=2, votes=[vote], escalated=True)
    text, blocks = render(n, mention=lambda name: "<@U0DAVE>" if name == "dave" else name)
    shown = json.dumps(blocks)
    assert "Votes so far* (1 of 2)" in shown and "escalated to <@U0DAVE>" in shown
    assert "alice, bob, <@U0DAVE> (quorum 2)" in shown
    assert ButtonValue.model_validate_json(actions(blocks)[0]["value"]).escalated
    assert text.startswith("Escalated, approval needed")


def test_a_gate_that_requires_a_comment_marks_its_buttons_and_the_dialog_asks_for_it() -> None:
    _, blocks = render(notice(require_comment=True))
    assert ButtonValue.model_validate_json(actions(blocks)[0]["value"]).comment
    meta = ModalMetadata(run="upgrade-1", gate="canary:after", approve=False, channel="C1", message_ts="1.2")
    view = comment_modal(meta, "Why?")
    assert view["submit"]["text"] == "Reject" and view["title"]["text"] == "Reject gate"
    assert ModalMetadata.model_validate_json(view["private_metadata"]) == meta
    comment = next(b for b in view["blocks"] if b["type"] == "input")
    assert comment["element"]["min_length"] == 1
