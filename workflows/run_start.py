"""What a start request may carry: the refusals of a `state` it may not bring, and the checks of
its requester's proof that need no key.

Pure: the proof's signature itself is checked by the workflow (a local activity, see
`workflows/trust.py`); the time and the run's id are passed in.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pitstop.contracts import RequesterProof, RunRequest, request_digest

STATE_FROM_CLIENT = (
    "refused: this start request carries `state`, which only a run continuing as new may carry "
    "(it would skip planning and could bring gates already approved); nothing ran. Start the run "
    "without `state` (and without `state_signature`)"
)
STATE_NOT_SIGNED = (
    "refused: the state this execution continues with is not signed by the execution it continues "
    "(worker key); nothing ran. If the run really continued as new, the workers of this task queue "
    "do not share one worker key (PITSTOP_WORKER_KEY)"
)
# Signed start requests are good for this long, so that one seen in history cannot start
# another run later under the same id.
REQUESTER_PROOF_MAX_AGE = timedelta(minutes=15)


def requester_problem(proof: RequesterProof, request: RunRequest, run_id: str, now: datetime) -> str | None:
    """Why the proof cannot vouch for this request, before its signature is checked (None: it may)."""
    if proof.run != run_id:
        return f"it is signed for run {proof.run!r}, not this run"
    if proof.requested_by != request.requested_by:
        return f"it is signed for requester {proof.requested_by!r}, not {request.requested_by!r}"
    if proof.request != request_digest(request):
        return "the request was changed after it was signed"
    if abs(now - proof.at) > REQUESTER_PROOF_MAX_AGE:
        return f"it was signed at {proof.at.isoformat()}, too long before this run started"
    return None


def requester_refusal(problem: str) -> str:
    return (
        f"refused: the start request's requester signature is not valid ({problem}); nothing ran. "
        "Start the run again (without a signature, the requester is shown as unverified)"
    )
