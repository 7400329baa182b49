"""Pure approval-gate rules: who may vote, quorum, four-eyes, timeouts, escalation.

No Temporal imports: the workflow passes `now` in (from `workflow.now()`), and the
functions return new state. The same rules answer the Update validator, the Update
handler, the Signal twin and the CLI's error messages, so a refusal reads the same
wherever the vote came from.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pitstop.approvals import Decision, GateRule, GateState, GateStatus, VoteRecord

__all__ = [
    "Decision",
    "GateRule",
    "GateState",
    "VoteRecord",
    "apply_timeout",
    "apply_vote",
    "close_on_run_end",
    "is_repeat_refusal",
    "open_gate",
    "record_refusal",
    "refusal_reason",
]


def open_gate(rule: GateRule, now: datetime) -> GateState:
    deadline = now + timedelta(seconds=rule.timeout_seconds) if rule.timeout_seconds else None
    return GateState(rule=rule, opened_at=now, deadline=deadline)


def refusal_reason(
    gate: GateState | None, decision: Decision, requested_by: str, now: datetime, gate_name: str = ""
) -> str | None:
    """Why this vote may not count, or None when it may. Messages name the fix."""
    name = gate_name or decision.gate or "?"
    if gate is None:
        return f"no gate named {name!r} in this run"
    gid = gate.rule.gate_id
    if gate.status != "open":
        return f"gate {gid!r} is closed ({gate.closed_reason or gate.status}); votes are no longer accepted"
    if gate.deadline is not None and now >= gate.deadline:
        return f"gate {gid!r} expired at {gate.deadline.isoformat()}; votes are no longer accepted"
    if not decision.approver.strip():
        return "the vote names no approver"
    if decision.approver not in gate.allowed:
        allowed = ", ".join(sorted(gate.allowed)) or "nobody"
        return f"{decision.approver!r} is not an approver for gate {gid!r} (allowed: {allowed})"
    if gate.rule.four_eyes and decision.approver == requested_by:
        return (
            f"four-eyes: {decision.approver!r} requested this run and may not approve "
            f"their own change at gate {gid!r}"
        )
    if any(v.approver == decision.approver for v in gate.votes):
        return f"{decision.approver!r} already voted on gate {gid!r}"
    if gate.rule.require_comment and not decision.comment.strip():
        return f"gate {gid!r} requires a comment with the vote"
    return None


def record_refusal(gate: GateState, decision: Decision, reason: str, now: datetime) -> GateState:
    vote = _vote(decision, now, accepted=False, reason=reason)
    # Bounded so that a stuck button pressed all day cannot grow the state without limit.
    refused = [*gate.refused, vote][-100:]
    return gate.model_copy(update={"refused": refused})


def is_repeat_refusal(gate: GateState | None, decision: Decision, reason: str) -> bool:
    """The same person refused for the same reason already: nothing new to record."""
    if gate is None:
        return False
    return any(v.approver == decision.approver and v.reason == reason for v in gate.refused)


def apply_vote(gate: GateState, decision: Decision, now: datetime) -> GateState:
    """Count an accepted vote. One rejection from an allowed approver closes the gate."""
    votes = [*gate.votes, _vote(decision, now, accepted=True, reason=None)]
    update: dict[str, object] = {"votes": votes}
    if not decision.approve:
        update |= {
            "status": "rejected",
            "closed_at": now,
            "closed_reason": f"rejected by {decision.approver}",
        }
    elif sum(1 for v in votes if v.approve) >= gate.rule.quorum:
        approvers = ", ".join(v.approver for v in votes if v.approve)
        update |= {"status": "approved", "closed_at": now, "closed_reason": f"approved by {approvers}"}
    return gate.model_copy(update=update)


def apply_timeout(gate: GateState, now: datetime) -> tuple[GateState, bool]:
    """The deadline passed with the gate open. Returns the new state and whether the
    gate was escalated (the caller notifies the second group and keeps waiting)."""
    if gate.status != "open":
        return gate, False
    action = gate.rule.on_timeout
    if action == "escalate" and not gate.escalated:
        deadline = now + timedelta(seconds=gate.rule.timeout_seconds or 0)
        return gate.model_copy(update={"escalated": True, "deadline": deadline}), True
    if action == "approve":
        return _close(gate, now, "approved", "approved automatically on timeout (on_timeout: approve)"), False
    reason = (
        "rejected on timeout after escalation"
        if action == "escalate"
        else "rejected on timeout (on_timeout: reject)"
    )
    return _close(gate, now, "rejected", reason), False


def close_on_run_end(gate: GateState, now: datetime, why: str) -> GateState:
    if gate.status != "open":
        return gate
    return _close(gate, now, "rejected", why)


def _close(gate: GateState, now: datetime, status: GateStatus, reason: str) -> GateState:
    return gate.model_copy(update={"status": status, "closed_at": now, "closed_reason": reason})


def _vote(decision: Decision, now: datetime, *, accepted: bool, reason: str | None) -> VoteRecord:
    return VoteRecord(
        approver=decision.approver,
        approve=decision.approve,
        comment=decision.comment,
        source=decision.source,
        at=now,
        accepted=accepted,
        reason=reason,
    )
