"""Gate rules for verified votes (workflows/gates.py): a proof's cheap checks, `require_verified`,
four-eyes by verified identity, and the two verified approvers an unverified requester needs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pitstop.approvals import Requester, VoteProof
from workflows.gates import (
    PROOF_MAX_AGE,
    Decision,
    GateRule,
    VoteCheck,
    apply_vote,
    open_gate,
    proof_problem,
    record_refusal,
    refusal_reason,
    seen_clicks,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
RUN = "upgrade-1"
GATE = "canary:after"


def rule(**kw: object) -> GateRule:
    base: dict[str, object] = {"gate_id": GATE, "approvers": ["alice", "bob", "carol"]}
    base.update(kw)
    return GateRule.model_validate(base)


def signed(approver: str, subject: str, click: str = "c1", at: datetime = T0, **kw: object) -> Decision:
    proof = VoteProof(
        run=RUN,
        gate=GATE,
        approve=True,
        approver=approver,
        subject=subject,
        click=click,
        at=at,
        signature="s",
    )
    return Decision(gate=GATE, approve=True, approver=approver, proof=proof, **kw)  # type: ignore[arg-type]


def verified(decision: Decision) -> VoteCheck:
    assert decision.proof is not None
    return VoteCheck.of(decision.proof, valid=True)


ALICE = Requester(name="alice", verified=True, subject="slack:U0ALICE")


@pytest.mark.parametrize(
    ("decision", "clicks", "now", "expected"),
    [
        (signed("bob", "slack:U0BOB"), set(), T0, None),
        (signed("bob", "slack:U0BOB").model_copy(update={"approver": "carol"}), set(), T0, "something other"),
        (signed("bob", "slack:U0BOB").model_copy(update={"comment": "added"}), set(), T0, "something other"),
        (signed("bob", "slack:U0BOB").model_copy(update={"approve": False}), set(), T0, "something other"),
        (signed("bob", "slack:U0BOB"), {"c1"}, T0, "this click (c1) was already heard"),
        (signed("bob", "slack:U0BOB"), set(), T0 + PROOF_MAX_AGE + timedelta(seconds=1), "minutes ago"),
        (signed("bob", "slack:U0BOB", at=T0 + timedelta(minutes=3)), set(), T0, "in the future"),
    ],
)
def test_a_proofs_cheap_checks(
    decision: Decision, clicks: set[str], now: datetime, expected: str | None
) -> None:
    problem = proof_problem(decision, GATE, RUN, now, clicks)
    assert problem is None if expected is None else (problem is not None and expected in problem)


def test_a_proof_for_another_run_or_gate() -> None:
    vote = signed("bob", "slack:U0BOB")
    assert "is for run 'upgrade-1', not this run" in str(proof_problem(vote, GATE, "other", T0, set()))
    assert "is for gate 'canary:after', not 'fleet:after'" in str(
        proof_problem(vote, "fleet:after", RUN, T0, set())
    )


def test_require_verified_refuses_claims_and_records_them_as_claims() -> None:
    gate = open_gate(rule(require_verified=True), T0)
    claim = Decision(gate=GATE, approve=True, approver="bob", source="slack:U0BOB")
    reason = refusal_reason(gate, claim, "dave", T0)
    assert reason is not None and "counts only verified votes" in reason
    gate = record_refusal(gate, claim, reason, T0)
    [refused] = gate.refused
    assert (refused.source, refused.verified, refused.claimed_source, refused.click) == (
        "unverified",
        False,
        "slack:U0BOB",
        None,
    )
    vote = signed("bob", "slack:U0BOB")
    assert refusal_reason(gate, vote, "dave", T0, check=verified(vote)) is None
    counted = apply_vote(gate, vote, T0, verified(vote)).votes[-1]
    assert (counted.source, counted.verified, counted.claimed_source, counted.click) == (
        "slack:U0BOB",
        True,
        None,
        "c1",
    )
    # A signature not yet checked (the validator's view) is never recorded as verified.
    pending = VoteCheck.of(vote.proof, valid=None)  # type: ignore[arg-type]
    assert not record_refusal(gate, vote, "x", T0, pending).refused[-1].verified


def test_four_eyes_compares_verified_identities() -> None:
    gate = open_gate(rule(four_eyes=True, require_verified=True), T0, ALICE)
    assert gate.quorum == 1 and gate.note is None
    own = signed("alice", "slack:U0ALICE")
    assert "four-eyes: 'alice' requested this run" in str(
        refusal_reason(gate, own, ALICE, T0, check=verified(own))
    )
    other_name = signed("bob", "slack:U0ALICE")
    assert "four-eyes: slack:U0ALICE requested this run (as 'alice')" in str(
        refusal_reason(gate, other_name, ALICE, T0, check=verified(other_name))
    )
    bob = signed("bob", "slack:U0BOB")
    gate = apply_vote(gate, bob, T0, verified(bob))
    assert gate.status == "approved"


def test_one_person_votes_once_under_any_name() -> None:
    gate = open_gate(rule(quorum=2), T0)
    first = signed("bob", "slack:U0BOB")
    gate = apply_vote(gate, first, T0, verified(first))
    again = signed("carol", "slack:U0BOB", click="c2")
    assert (
        refusal_reason(gate, again, "dave", T0, check=verified(again))
        == "slack:U0BOB already voted on gate 'canary:after' (under another name)"
    )
    assert seen_clicks([gate]) == {"c1"}


def test_an_unverified_requester_makes_four_eyes_need_two_verified_approvers() -> None:
    requester = Requester(name="alice")
    gate = open_gate(rule(four_eyes=True, require_verified=True), T0, requester)
    assert gate.quorum == 2 and gate.note is not None and "'alice' is unverified" in gate.note
    for approver in ("bob", "carol"):
        vote = signed(approver, f"slack:U0{approver.upper()}", click=approver)
        assert refusal_reason(gate, vote, requester, T0, check=verified(vote)) is None
        gate = apply_vote(gate, vote, T0, verified(vote))
    assert gate.status == "approved" and gate.closed_reason == "approved by bob, carol"
    # Gates that take claims, or have no four-eyes, keep their quorum.
    assert open_gate(rule(four_eyes=True), T0, requester).quorum == 1
    assert open_gate(rule(require_verified=True), T0, requester).quorum == 1
