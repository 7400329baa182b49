"""What crosses Temporal boundaries for Slack: notices the engine hands to the notify
activities, message references it keeps, and the value a gate's buttons carry.

Pure pydantic, imported by the workflows through `imports_passed_through`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from pitstop.approvals import GateState

# Keep a run's state (and so its history) bounded however flaky Slack is.
MAX_NOTICES = 50


class MessageRef(BaseModel):
    """A posted Slack message: the channel *id* Slack answered with, and the message ts."""

    model_config = ConfigDict(frozen=True)

    channel: str
    ts: str


class GateMessage(BaseModel):
    """One gate's Slack message as the run knows it."""

    channel: str
    message: MessageRef | None = Field(default=None, description="None when posting failed.")
    # Fingerprint of the gate state the message shows; the notifier updates it when it differs.
    shown: str = ""


class SlackRunState(BaseModel):
    """The Slack side of a run, carried across continue-as-new inside RunProgress."""

    channel: str | None = Field(default=None, description="Channel of the run's thread.")
    thread: MessageRef | None = Field(default=None, description="The run's first message.")
    started: bool = Field(default=False, description="The first message was attempted.")
    gates: dict[str, GateMessage] = Field(default_factory=dict)


class GateNotice(BaseModel):
    """Input of `notify.gate_opened`, `notify.gate_updated`, `notify.gate_closed`."""

    run_id: str
    runbook: str
    requested_by: str
    stage: str
    hosts: list[str]
    gate: GateState
    channel: str
    message: MessageRef | None = None
    thread: MessageRef | None = Field(default=None, description="The run's thread, for replies.")
    # The gate was escalated since the message was last updated: mention the second group.
    escalated_now: bool = False


class RunNotice(BaseModel):
    """Input of `notify.run_event`: the run's first message (no thread) or a reply in its thread."""

    run_id: str
    runbook: str
    channel: str
    text: str
    thread: MessageRef | None = None
    # Also show a thread reply in the channel (rollbacks, failures).
    broadcast: bool = False


class ButtonValue(BaseModel):
    """The `value` of a gate's Approve/Reject buttons (and a comment modal's metadata)."""

    model_config = ConfigDict(extra="forbid")

    run: str = Field(min_length=1)
    gate: str = Field(min_length=1)
    # The gate requires a comment: the button opens the comment dialog instead of voting.
    comment: bool = False
    # Shown after the gate escalated: a click now is a new vote, not a repeat of one refused
    # before (when the second group was not yet allowed).
    escalated: bool = False


class ModalMetadata(ButtonValue):
    """`private_metadata` of the comment dialog: the click it stands for."""

    approve: bool
    channel: str
    message_ts: str


def add_notice(notices: list[str], text: str) -> list[str]:
    return [*notices, text][-MAX_NOTICES:]
