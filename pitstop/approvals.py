"""Approval data: gate rules as planned, votes, and a gate's state (pydantic, no logic).

The rules that act on them live in `workflows/gates.py`.
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


class Decision(BaseModel):
    """One vote, from the CLI, Slack, or the Temporal UI (Update `decide` or its Signal twin)."""

    gate: str | None = Field(default=None, description="Gate id; may be omitted when one gate is open.")
    approve: bool
    approver: str
    comment: str = ""
    source: str = "cli"


class VoteRecord(BaseModel):
    approver: str
    approve: bool
    comment: str = ""
    source: str = "cli"
    at: datetime
    accepted: bool
    reason: str | None = None


class GateState(BaseModel):
    rule: GateRule
    status: GateStatus = "open"
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
