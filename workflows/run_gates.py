"""Which gate a vote is for and whether it may count, and how a stage gate opens.

Pure: the rules themselves live in `workflows/gates.py`; this module applies them to the run's
gates. The time and the run's id are passed in by the workflow.
"""

from __future__ import annotations

from datetime import datetime

from pitstop.contracts import Decision, GateRule, GateState, Requester
from workflows import gates as gate_rules


def gate_id_for(decision: Decision, gates: dict[str, GateState]) -> str:
    """The gate a vote names, or the only open one; ValueError saying why there is none."""
    if decision.gate:
        return decision.gate
    open_ids = sorted(g.rule.gate_id for g in gates.values() if g.status == "open")
    if len(open_ids) == 1:
        return open_ids[0]
    if len(open_ids) > 1:
        raise ValueError(f"several gates are open ({', '.join(open_ids)}); name one with --gate")
    raise ValueError("no gate is open in this run; there is nothing to vote on")


def judge(
    decision: Decision,
    check: gate_rules.VoteCheck | None,
    gates: dict[str, GateState],
    requester: Requester,
    now: datetime,
    run_id: str,
) -> tuple[str, GateState | None, str | None]:
    """The gate a vote is for, and why it may not count (None when it may)."""
    try:
        gate_id = gate_id_for(decision, gates)
    except ValueError as exc:
        return "", None, str(exc)
    gate = gates.get(gate_id)
    if gate is not None and decision.proof is not None:
        clicks = gate_rules.seen_clicks(list(gates.values()))
        problem = gate_rules.proof_problem(decision, gate_id, run_id, now, clicks)
        if problem is not None:
            return gate_id, gate, problem
    reason = gate_rules.refusal_reason(gate, decision, requester, now, gate_id, check)
    return gate_id, gate, reason


def proof_checkable(decision: Decision, gates: dict[str, GateState], now: datetime, run_id: str) -> bool:
    """A signed vote for a gate of this run whose proof passes the cheap checks."""
    try:
        gate_id = gate_id_for(decision, gates)
    except ValueError:
        return False
    if gate_id not in gates or decision.proof is None:
        return False
    clicks = gate_rules.seen_clicks(list(gates.values()))
    return gate_rules.proof_problem(decision, gate_id, run_id, now, clicks) is None


def open_stage_gate(rule: GateRule, now: datetime, requester: Requester, check_mode: bool) -> GateState:
    """A stage's `before`/`after` gate as it opens; a plan (check mode) approves it at once,
    saying whom it would have asked."""
    gate = gate_rules.open_gate(rule, now, requester)
    if not check_mode:
        return gate
    return gate.model_copy(
        update={
            "status": "approved",
            "closed_at": now,
            "closed_reason": f"check mode: would ask {', '.join(rule.approvers)} (quorum {rule.quorum})",
        }
    )
