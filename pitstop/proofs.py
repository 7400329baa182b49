"""Signing votes and start requests with the vote key: what makes them *verified*.

The signer vouches for who the person is: the Slack bridge signs a click only after Slack's
own request signature checked out and the Slack user was mapped to an approver (subject
`slack:<user id>`); in development the CLI and the demo, which run next to the embedded
stack's vote key, sign what they are told (`cli:<name>`, `demo:<name>`). Whoever holds the
vote key can therefore vouch for anyone: in production only the bridge and the workers hold
it (docs/deployment.md, "Who holds which key").
"""

from __future__ import annotations

from datetime import UTC, datetime

from pitstop import signing
from pitstop.approvals import Decision, RequesterProof, VoteProof
from pitstop.contracts import RunRequest, request_digest
from pitstop.keys import KeyRing


def _now(at: datetime | None) -> datetime:
    return at if at is not None else datetime.now(UTC)


def sign_vote(
    ring: KeyRing,
    *,
    run: str,
    gate: str,
    approve: bool,
    approver: str,
    subject: str,
    click: str,
    comment: str = "",
    at: datetime | None = None,
) -> VoteProof:
    proof = VoteProof(
        run=run,
        gate=gate,
        approve=approve,
        approver=approver,
        subject=subject,
        comment=comment,
        click=click,
        at=_now(at),
    )
    # Signed as the workflow will see it: after a JSON round trip.
    proof = VoteProof.model_validate_json(proof.model_dump_json())
    return proof.model_copy(update={"signature": signing.sign(ring, "vote", proof.signed_part())})


def signed_decision(
    ring: KeyRing,
    *,
    run: str,
    gate: str,
    approve: bool,
    approver: str,
    subject: str,
    click: str,
    comment: str = "",
    at: datetime | None = None,
) -> Decision:
    """A `decide` Update's input carrying its proof; `source` repeats the subject as a claim."""
    proof = sign_vote(
        ring,
        run=run,
        gate=gate,
        approve=approve,
        approver=approver,
        subject=subject,
        click=click,
        comment=comment,
        at=at,
    )
    return Decision(
        gate=gate, approve=approve, approver=approver, comment=comment, source=subject, proof=proof
    )


def sign_request(
    ring: KeyRing, request: RunRequest, *, run: str, subject: str, at: datetime | None = None
) -> RunRequest:
    """`request` with a proof that `request.requested_by` asked for exactly it, as run `run`."""
    # Digested as the workflow will see it: after a JSON round trip.
    request = RunRequest.model_validate_json(request.model_dump_json())
    proof = RequesterProof(
        run=run,
        request=request_digest(request),
        requested_by=request.requested_by,
        subject=subject,
        at=_now(at),
    )
    proof = RequesterProof.model_validate_json(proof.model_dump_json())
    signed = proof.model_copy(update={"signature": signing.sign(ring, "requester", proof.signed_part())})
    return request.model_copy(update={"requester_proof": signed})


__all__ = ["sign_request", "sign_vote", "signed_decision"]
