"""Slack configuration, read from the environment (one place for every Slack variable).

| variable | used by | meaning |
|---|---|---|
| SLACK_BOT_TOKEN | worker, bridge | bot token (`xoxb-...`) for the Web API |
| SLACK_SIGNING_SECRET | bridge | verifies that requests come from Slack |
| SLACK_DEFAULT_CHANNEL | worker, bridge | channel of runs and gates that name none |
| SLACK_API_URL | worker, bridge | Web API base URL (default https://slack.com/api/) |
| SLACK_APP_TOKEN | bridge, `--socket-mode` only | app-level token (`xapp-...`) |
| PITSTOP_SLACK_APPROVERS | worker, bridge | YAML file mapping Slack users to approver names |
| PITSTOP_UI_URL | worker, bridge | Temporal UI base URL for links (default: the embedded stack's) |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, SecretStr, field_validator

from pitstop.stack_ui import DEFAULT_UI_URL, stack_ui_url

DEFAULT_API_URL = "https://slack.com/api/"


class SlackConfigError(ValueError):
    """Slack is asked for but not configured; the message names the variables to set."""


class SlackSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    bot_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    app_token: SecretStr | None = None
    default_channel: str | None = None
    api_url: str = DEFAULT_API_URL
    approvers_file: Path | None = None
    ui_url: str = DEFAULT_UI_URL

    @field_validator("api_url")
    @classmethod
    def _trailing_slash(cls, value: str) -> str:
        # slack_sdk joins `base_url + method`: without the slash `.../apichat.postMessage`.
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"SLACK_API_URL={value!r} must be an http(s) URL, e.g. {DEFAULT_API_URL}")
        return value if value.endswith("/") else value + "/"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> SlackSettings:
        def get(name: str) -> str | None:
            value = environ.get(name, "").strip()
            return value or None

        values: dict[str, object] = {
            "bot_token": get("SLACK_BOT_TOKEN"),
            "signing_secret": get("SLACK_SIGNING_SECRET"),
            "app_token": get("SLACK_APP_TOKEN"),
            "default_channel": get("SLACK_DEFAULT_CHANNEL"),
            "approvers_file": get("PITSTOP_SLACK_APPROVERS"),
        }
        if get("SLACK_API_URL"):
            values["api_url"] = get("SLACK_API_URL")
        # PITSTOP_UI_URL, else the UI of the embedded stack in use (pitstop/stack_ui.py).
        values["ui_url"] = stack_ui_url(
            Path(get("PITSTOP_HOME") or ".pitstop"), get("TEMPORAL_ADDRESS") or "127.0.0.1:7233", environ
        )
        try:
            return cls.model_validate(values)
        except ValueError as exc:
            raise SlackConfigError(str(exc)) from None

    def token(self) -> str:
        if self.bot_token is None:
            raise SlackConfigError(
                "SLACK_BOT_TOKEN is not set: give the worker (and the bridge) the bot token (xoxb-...)"
            )
        return self.bot_token.get_secret_value()

    def require_bridge(self, socket_mode: bool = False) -> None:
        """The bridge cannot start without these; name every missing one at once."""
        missing = [] if self.bot_token is not None else ["SLACK_BOT_TOKEN"]
        if socket_mode and self.app_token is None:
            missing.append("SLACK_APP_TOKEN")
        if not socket_mode and self.signing_secret is None:
            missing.append("SLACK_SIGNING_SECRET")
        if missing:
            raise SlackConfigError(
                f"the Slack bridge needs {', '.join(missing)} in its environment "
                "(see docs/deployment.md, 'Environment variables pitstop reads')"
            )


def run_default_channel(environ: Mapping[str, str] = os.environ) -> str | None:
    """The channel a run posts to when its gates name none: SLACK_DEFAULT_CHANNEL on the
    worker that plans the run (recorded in the plan, so replays do not read the env)."""
    value = environ.get("SLACK_DEFAULT_CHANNEL", "").strip()
    return value or None
