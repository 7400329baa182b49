"""Approval data: gate rules as planned, votes and their proofs, the requester's identity,
and a gate's state (pydantic, no logic).

A vote or a start request is *verified* when it carries a proof signed with the vote key
(`PITSTOP_VOTE_KEY`, held by the Slack bridge and the workers): the signer vouches for who
the person is (`subject`, e.g. `slack:U0123ABCD`) and the pitstop name it maps to. Anything
else a client says about itself (`Decision.source`, `RunRequest.requested_by` without a
proof) is a claim, recorded as such. The rules that act on these live in `workflows/gates.py`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

OnTimeout = Literal["reject", "approve", "escalate"]
GateStatus = Literal["open", "approved", "rejected"]


class GateRule(BaseModel):
    """A gate as the plan resolved it: approver groups already expanded to user names."""

    model_config = ConfigDict(frozen=True)

    gate_id: str
    prompt: str = ""
    approvers: list[str]
    quorum: int = 1
    four_eyes: bool = False
    require_comment: bool = False
    timeout_seconds: float | None = None
    on_timeout: OnTimeout = "reject"
    escalate_to: list[str] = Field(default_factory=list)
    slack_channel: str | None = None
    # Count only votes signed with the vote key (from the Slack bridge); others are refused.
    require_verified: bool = False


class VoteProof(BaseModel):
    """What a holder of the vote key vouches for about one vote: the Slack bridge after Slack's
    request signature checked out and the user was mapped to an approver (in development also
    the CLI and the demo, which run next to the embedded stack's key). `signature` is the
    HMAC-SHA256 of every other field (`pitstop.signing`, purpose `vote`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: str = Field(min_length=1, description="Run (workflow) id the vote is for.")
    gate: str = Field(min_length=1)
    approve: bool
    approver: str = Field(min_length=1, description="The pitstop name the signer mapped the person to.")
    subject: str = Field(min_length=1, description="Who the signer verified, e.g. 'slack:U0123ABCD'.")
    comment: str = ""
    click: str = Field(min_length=1, description="Unique per click: a replayed click is refused.")
    at: datetime = Field(description="When the signer saw the click (UTC).")
    signature: str = ""

    def signed_part(self) -> dict[str, object]:
        return self.model_dump(mode="json", exclude={"signature"})


class Decision(BaseModel):
    """One vote, from the CLI, Slack, or the Temporal UI (Update `decide` or its Signal twin).

    `source` is what the client says it is and is kept only as a claim; the vote's recorded
    source is set from `proof` when its signature checks out ("unverified" otherwise)."""

    gate: str | None = Field(default=None, description="Gate id; may be omitted when one gate is open.")
    approve: bool
    approver: str
    comment: str = ""
    source: str = Field(default="cli", description="Claimed origin; never trusted.")
    proof: VoteProof | None = Field(default=None, description="Set by the Slack bridge (vote key).")


UNVERIFIED = "unverified"


class VoteRecord(BaseModel):
    approver: str
    approve: bool
    comment: str = ""
    # Who verified the voter (`slack:U0123`, `cli:alice` from a CLI holding the vote key), or
    # "unverified": never what the client claimed, which is kept in `claimed_source`.
    source: str = UNVERIFIED
    verified: bool = False
    claimed_source: str | None = None
    click: str | None = None
    at: datetime
    accepted: bool
    reason: str | None = None


class RequesterProof(BaseModel):
    """A start request signed with the vote key: the signer vouches that `requested_by` asked
    for exactly this request (`request`: its digest) as run `run`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: str = Field(min_length=1)
    request: str = Field(
        min_length=64, max_length=64, description="sha256 of the request, see request_digest."
    )
    requested_by: str = Field(min_length=1)
    subject: str = Field(min_length=1)
    at: datetime
    signature: str = ""

    def signed_part(self) -> dict[str, object]:
        return self.model_dump(mode="json", exclude={"signature"})


class Requester(BaseModel):
    """Who asked for a run, and whether anyone vouched for it (four-eyes compares against this)."""

    name: str
    verified: bool = False
    subject: str | None = Field(default=None, description="Who the signer verified, when verified.")


class GateState(BaseModel):
    rule: GateRule
    status: GateStatus = "open"
    # Approvals the gate needs: the rule's quorum, or more (see workflows/gates.py: open_gate).
    needed: int | None = None
    note: str | None = None
    opened_at: datetime
    deadline: datetime | None = None
    escalated: bool = False
    votes: list[VoteRecord] = Field(default_factory=list)
    refused: list[VoteRecord] = Field(default_factory=list)
    closed_at: datetime | None = None
    closed_reason: str | None = None

    @property
    def allowed(self) -> list[str]:
        return self.rule.approvers + (self.rule.escalate_to if self.escalated else [])

    @property
    def approvals(self) -> int:
        return sum(1 for v in self.votes if v.approve)

    @property
    def quorum(self) -> int:
        return self.needed if self.needed is not None else self.rule.quorum
