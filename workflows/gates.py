"""Pure approval-gate rules: who may vote, quorum, four-eyes, verified votes, timeouts,
escalation.

No Temporal imports: the workflow passes `now` in (from `workflow.now()`) and what the
worker found about a vote's signature (`VoteCheck`), and the functions return new state.
The same rules answer the Update validator, the Update handler, the Signal twin and the
CLI's error messages, so a refusal reads the same wherever the vote came from.

Identities: a vote is *verified* when its proof's signature (vote key) checked out; its
identity is then the signer's `subject` (e.g. `slack:U0123`) and the pitstop name it was
mapped to. Four-eyes compares both with the run's requester. When the requester is not
verified (the start request was not signed), nobody can tell who asked for the run, so a
gate with `four_eyes` and `require_verified` needs two different verified approvers: one of
them at least is not the requester, whoever that was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pitstop.approvals import (
    UNVERIFIED,
    Decision,
    GateRule,
    GateState,
    GateStatus,
    Requester,
    VoteProof,
    VoteRecord,
)

__all__ = [
    "PROOF_MAX_AGE",
    "PROOF_MAX_SKEW",
    "Decision",
    "GateRule",
    "GateState",
    "VoteCheck",
    "VoteRecord",
    "apply_timeout",
    "apply_vote",
    "close_on_run_end",
    "is_repeat_refusal",
    "open_gate",
    "proof_problem",
    "record_refusal",
    "refusal_reason",
    "seen_clicks",
]

# A signed click is good for this long after the signer saw it (Slack's own window is five
# minutes; this leaves room for a busy worker), and may be this far ahead of the run's clock.
PROOF_MAX_AGE = timedelta(minutes=15)
PROOF_MAX_SKEW = timedelta(minutes=2)


@dataclass(frozen=True)
class VoteCheck:
    """What is known about a vote's signature. `pending`: signed, not yet checked (the
    validator's view: the Update handler checks it in a local activity)."""

    verified: bool
    source: str = UNVERIFIED
    pending: bool = False

    @staticmethod
    def unsigned() -> VoteCheck:
        return VoteCheck(verified=False)

    @staticmethod
    def of(proof: VoteProof, *, valid: bool | None) -> VoteCheck:
        if valid is None:
            return VoteCheck(verified=True, source=proof.subject, pending=True)
        return VoteCheck(verified=valid, source=proof.subject if valid else UNVERIFIED)


def open_gate(rule: GateRule, now: datetime, requester: Requester | None = None) -> GateState:
    deadline = now + timedelta(seconds=rule.timeout_seconds) if rule.timeout_seconds else None
    gate = GateState(rule=rule, opened_at=now, deadline=deadline)
    if rule.four_eyes and rule.require_verified and requester is not None and not requester.verified:
        needed = max(rule.quorum, 2)
        gate = gate.model_copy(
            update={
                "needed": needed,
                "note": (
                    f"the requester {requester.name!r} is unverified (the start request was not signed), "
                    f"so four-eyes needs {needed} different verified approvers"
                ),
            }
        )
    return gate


def seen_clicks(gates: list[GateState]) -> set[str]:
    """Every signed click a run has heard, counted or refused."""
    return {v.click for g in gates for v in (*g.votes, *g.refused) if v.click}


def proof_problem(
    decision: Decision, gate_id: str, run_id: str, now: datetime, clicks: set[str]
) -> str | None:
    """Why a signed vote's proof cannot stand for this vote (the cheap checks, before its
    signature is checked), or None."""
    proof = decision.proof
    if proof is None:
        return None
    if proof.run != run_id:
        return f"the vote's signature is for run {proof.run!r}, not this run; nothing was counted"
    if proof.gate != gate_id:
        return f"the vote's signature is for gate {proof.gate!r}, not {gate_id!r}; nothing was counted"
    said = (decision.approve, decision.approver, decision.comment)
    signed = (proof.approve, proof.approver, proof.comment)
    if said != signed:
        return (
            "the vote says something other than what its signature covers (approve, approver, comment); "
            "nothing was counted"
        )
    if proof.click in clicks:
        return f"this click ({proof.click}) was already heard by this run; a replayed click counts nothing"
    if now - proof.at > PROOF_MAX_AGE:
        minutes = int(PROOF_MAX_AGE.total_seconds() // 60)
        return f"the vote was signed at {proof.at.isoformat()}, more than {minutes} minutes ago; vote again"
    if proof.at - now > PROOF_MAX_SKEW:
        return f"the vote is signed for {proof.at.isoformat()}, in the future; check the signer's clock"
    return None


def refusal_reason(
    gate: GateState | None,
    decision: Decision,
    requester: Requester | str,
    now: datetime,
    gate_name: str = "",
    check: VoteCheck | None = None,
) -> str | None:
    """Why this vote may not count, or None when it may. Messages name the fix. A requester
    given as a name is an unverified one."""
    check = check or VoteCheck.unsigned()
    if isinstance(requester, str):
        requester = Requester(name=requester)
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
    if gate.rule.require_verified and not check.verified:
        return (
            f"gate {gid!r} counts only verified votes, and this vote is not signed (votes from the CLI "
            "or the Temporal UI are claims; vote with the gate's Slack buttons)"
        )
    if decision.approver not in gate.allowed:
        allowed = ", ".join(sorted(gate.allowed)) or "nobody"
        return f"{decision.approver!r} is not an approver for gate {gid!r} (allowed: {allowed})"
    if gate.rule.four_eyes:
        if decision.approver == requester.name:
            return (
                f"four-eyes: {decision.approver!r} requested this run and may not approve "
                f"their own change at gate {gid!r}"
            )
        if check.verified and requester.verified and check.source == requester.subject:
            return (
                f"four-eyes: {check.source} requested this run (as {requester.name!r}) and may not approve "
                f"it under another name at gate {gid!r}"
            )
    if any(v.approver == decision.approver for v in gate.votes):
        return f"{decision.approver!r} already voted on gate {gid!r}"
    if check.verified and any(v.verified and v.source == check.source for v in gate.votes):
        return f"{check.source} already voted on gate {gid!r} (under another name)"
    if gate.rule.require_comment and not decision.comment.strip():
        return f"gate {gid!r} requires a comment with the vote"
    return None


def record_refusal(
    gate: GateState, decision: Decision, reason: str, now: datetime, check: VoteCheck | None = None
) -> GateState:
    vote = _vote(decision, now, accepted=False, reason=reason, check=check)
    # Bounded so that a stuck button pressed all day cannot grow the state without limit.
    refused = [*gate.refused, vote][-100:]
    return gate.model_copy(update={"refused": refused})


def is_repeat_refusal(gate: GateState | None, decision: Decision, reason: str) -> bool:
    """The same person refused for the same reason already: nothing new to record."""
    if gate is None:
        return False
    return any(v.approver == decision.approver and v.reason == reason for v in gate.refused)


def apply_vote(
    gate: GateState, decision: Decision, now: datetime, check: VoteCheck | None = None
) -> GateState:
    """Count an accepted vote. One rejection from an allowed approver closes the gate."""
    votes = [*gate.votes, _vote(decision, now, accepted=True, reason=None, check=check)]
    update: dict[str, object] = {"votes": votes}
    if not decision.approve:
        update |= {
            "status": "rejected",
            "closed_at": now,
            "closed_reason": f"rejected by {decision.approver}",
        }
    elif sum(1 for v in votes if v.approve) >= gate.quorum:
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


def _vote(
    decision: Decision, now: datetime, *, accepted: bool, reason: str | None, check: VoteCheck | None
) -> VoteRecord:
    check = check or VoteCheck.unsigned()
    verified = check.verified and not check.pending
    return VoteRecord(
        approver=decision.approver,
        approve=decision.approve,
        comment=decision.comment,
        source=check.source if verified else UNVERIFIED,
        verified=verified,
        claimed_source=None if verified else decision.source,
        # Only a click whose signature checked out is remembered: a forged one naming a real
        # click's id must not make the real click look replayed.
        click=decision.proof.click if decision.proof is not None and verified else None,
        at=now,
        accepted=accepted,
        reason=reason,
    )
