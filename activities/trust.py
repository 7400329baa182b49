"""The worker's signing and checking, as local activities the workflows call.

Keys live in the worker process (`pitstop.keys`), handed to `TrustActivities` when the worker
is built; workflow code never reads them, and a local activity's input is not recorded, only
its result. These activities answer only local calls from pitstop's own workflows: a
workflow started by anyone else that names them as ordinary activities (a crafted host
task list, say) gets a refusal, never a signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity

from pitstop import signing
from pitstop.approvals import RequesterProof, VoteProof
from pitstop.errors import ErrorType, fail
from pitstop.keys import KeyRing
from pitstop.trust import ProofVerdict, SignRequest, VerifyRequest

OUR_WORKFLOWS = frozenset({"RunbookWorkflow", "HostWorkflow"})
NO_VOTE_KEY = (
    "this worker has no vote key (PITSTOP_VOTE_KEY or PITSTOP_VOTE_KEY_FILE), so no signed vote "
    "can be checked; give the workers the Slack bridge's vote key"
)


def _local_only() -> None:
    info = activity.info()
    if not info.is_local or info.workflow_type not in OUR_WORKFLOWS:
        fail(
            ErrorType.UNAUTHORIZED,
            f"{info.activity_type} signs and checks pitstop's own messages and is available only to "
            "pitstop's workflows on their worker",
        )


class TrustActivities:
    def __init__(self, worker_key: KeyRing, vote_key: KeyRing | None) -> None:
        self._worker_key = worker_key
        self._vote_key = vote_key

    @activity.defn(name="trust.sign")
    async def sign(self, request: SignRequest) -> list[str]:
        _local_only()
        return [signing.sign(self._worker_key, request.purpose, value) for value in request.values]

    @activity.defn(name="trust.verify")
    async def verify(self, request: VerifyRequest) -> bool:
        _local_only()
        return signing.valid(self._worker_key, request.purpose, request.value, request.signature)

    @activity.defn(name="trust.verify_vote")
    async def verify_vote(self, proof: VoteProof) -> ProofVerdict:
        _local_only()
        return self._proof("vote", proof.signed_part(), proof.signature)

    @activity.defn(name="trust.verify_requester")
    async def verify_requester(self, proof: RequesterProof) -> ProofVerdict:
        _local_only()
        return self._proof("requester", proof.signed_part(), proof.signature)

    def _proof(self, purpose: signing.Purpose, value: dict[str, Any], signature: str) -> ProofVerdict:
        if self._vote_key is None:
            return ProofVerdict(valid=False, reason=NO_VOTE_KEY)
        if signing.valid(self._vote_key, purpose, value, signature):
            return ProofVerdict(valid=True)
        return ProofVerdict(
            valid=False,
            reason="its signature does not verify (altered after signing, or signed with another vote key)",
        )

    def activities(self) -> list[Callable[..., Any]]:
        return [self.sign, self.verify, self.verify_vote, self.verify_requester]


__all__ = ["NO_VOTE_KEY", "TrustActivities"]
