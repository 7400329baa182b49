"""Args of the `notify.*` modules: messages from runbooks to people."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Self

from pydantic import Field, model_validator

from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults

RUN_THREAD = "run"
# A notification is worth a few tries, not a stuck task: Slack answers in milliseconds or
# is down, and a runbook should not wait minutes for a chat message.
NOTIFY_RETRY = RetryDefaults(
    maximum_attempts=3,
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=5),
)


class SlackArgs(ModuleArgs):
    text: str | None = Field(
        default=None, description="Message text (Slack mrkdwn); the fallback when `blocks` is given."
    )
    blocks: list[dict[str, Any]] | None = Field(
        default=None, description="Block Kit blocks, as Slack's API takes them."
    )
    channel: str | None = Field(
        default=None,
        description=(
            "Channel name or id. Default: the channel of the run's thread, "
            "else SLACK_DEFAULT_CHANNEL on the worker."
        ),
    )
    thread: str | None = Field(
        default=None,
        description=(
            "`run`: reply in the run's thread (under its first message); or the `ts` of a message "
            "to reply to (e.g. `{{ posted.ts }}` of an earlier notify.slack registered as `posted`)."
        ),
    )
    broadcast: bool = Field(default=False, description="A thread reply is also shown in the channel.")

    @model_validator(mode="after")
    def _has_content(self) -> Self:
        if not (self.text and self.text.strip()) and not self.blocks:
            raise ValueError("notify.slack needs `text` or `blocks`")
        return self


SLACK: ModuleSpec[SlackArgs] = ModuleSpec(
    name="notify.slack",
    args_model=SlackArgs,
    summary="Post a Slack message to a channel or into the run's thread; returns its channel and ts.",
    supports_check_mode=True,
    start_to_close=timedelta(seconds=30),
    retry=NOTIFY_RETRY,
    free_form_arg="text",
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [SLACK]
