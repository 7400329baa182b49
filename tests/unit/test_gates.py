"""Approval-gate rules (workflows/gates.py): every refusal names its reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from workflows.gates import (
    Decision,
    GateRule,
    apply_timeout,
    apply_vote,
    close_on_run_end,
    is_repeat_refusal,
    open_gate,
    record_refusal,
    refusal_reason,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def rule(**kw: object) -> GateRule:
    base: dict[str, object] = {"gate_id": "fleet:before", "approvers": ["alice", "bob", "carol"]}
    base.update(kw)
    return GateRule.model_validate(base)


def vote(approver: str, approve: bool = True, comment: str = "") -> Decision:
    return Decision(gate="fleet:before", approve=approve, approver=approver, comment=comment)


def test_quorum_of_two_needs_two_distinct_approvals() -> None:
    gate = open_gate(rule(quorum=2), T0)
    gate = apply_vote(gate, vote("alice"), T0)
    assert gate.status == "open"
    assert refusal_reason(gate, vote("alice"), "dave", T0) == "'alice' already voted on gate 'fleet:before'"
    gate = apply_vote(gate, vote("bob"), T0)
    assert gate.status == "approved"
    assert gate.closed_reason == "approved by alice, bob"


def test_one_rejection_closes_the_gate() -> None:
    gate = apply_vote(open_gate(rule(quorum=2), T0), vote("carol", approve=False), T0)
    assert gate.status == "rejected"
    reason = refusal_reason(gate, vote("alice"), "dave", T0)
    assert reason is not None and "is closed (rejected by carol)" in reason


@pytest.mark.parametrize(
    ("gate_rule", "decision", "requested_by", "expected"),
    [
        (rule(), vote("mallory"), "dave", "'mallory' is not an approver for gate 'fleet:before'"),
        (rule(four_eyes=True), vote("alice"), "alice", "four-eyes: 'alice' requested this run"),
        (rule(require_comment=True), vote("bob"), "dave", "requires a comment"),
        (rule(), vote(""), "dave", "names no approver"),
    ],
)
def test_refusals_name_the_reason(
    gate_rule: GateRule, decision: Decision, requested_by: str, expected: str
) -> None:
    reason = refusal_reason(open_gate(gate_rule, T0), decision, requested_by, T0)
    assert reason is not None and expected in reason


def test_unknown_gate_and_expired_gate_are_refused() -> None:
    assert refusal_reason(None, vote("alice"), "dave", T0, "nope") == "no gate named 'nope' in this run"
    gate = open_gate(rule(timeout_seconds=60), T0)
    late = T0 + timedelta(seconds=61)
    reason = refusal_reason(gate, vote("alice"), "dave", late)
    assert reason is not None and "expired at 2026-11-29T12:01:00+00:00" in reason


def test_on_timeout_reject_and_approve() -> None:
    rejected, escalated = apply_timeout(open_gate(rule(timeout_seconds=60), T0), T0)
    assert (rejected.status, escalated) == ("rejected", False)
    assert rejected.closed_reason == "rejected on timeout (on_timeout: reject)"
    approved, _ = apply_timeout(open_gate(rule(timeout_seconds=60, on_timeout="approve"), T0), T0)
    assert approved.status == "approved"


def test_on_timeout_escalate_widens_approvers_then_rejects() -> None:
    gate = open_gate(rule(timeout_seconds=60, on_timeout="escalate", escalate_to=["oncall-lead"]), T0)
    assert refusal_reason(gate, vote("oncall-lead"), "dave", T0) is not None
    gate, escalated = apply_timeout(gate, T0 + timedelta(seconds=60))
    assert escalated and gate.status == "open"
    assert gate.deadline == T0 + timedelta(seconds=120)
    assert refusal_reason(gate, vote("oncall-lead"), "dave", T0 + timedelta(seconds=61)) is None
    gate, escalated = apply_timeout(gate, T0 + timedelta(seconds=120))
    assert not escalated and gate.status == "rejected"
    assert gate.closed_reason == "rejected on timeout after escalation"


def test_refusals_are_recorded_once_per_reason_and_bounded() -> None:
    gate = open_gate(rule(), T0)
    reason = refusal_reason(gate, vote("mallory"), "dave", T0)
    assert reason is not None
    gate = record_refusal(gate, vote("mallory"), reason, T0)
    assert is_repeat_refusal(gate, vote("mallory"), reason)
    assert not is_repeat_refusal(gate, vote("eve"), reason)
    for i in range(150):
        gate = record_refusal(gate, vote(f"u{i}"), "x", T0)
    assert len(gate.refused) == 100
    assert gate.refused[-1].approver == "u149"


def test_run_end_closes_open_gates_only() -> None:
    approved = apply_vote(open_gate(rule(), T0), vote("alice"), T0)
    assert close_on_run_end(approved, T0, "run aborted").status == "approved"
    closed = close_on_run_end(open_gate(rule(), T0), T0, "run aborted")
    assert (closed.status, closed.closed_reason) == ("rejected", "run aborted")
