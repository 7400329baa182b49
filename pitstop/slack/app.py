"""The bridge's Slack app (slack_bolt): button clicks and comment dialogs become votes.

Every request reaches these listeners only after bolt's request verification: the
`X-Slack-Signature` HMAC-SHA256 of `v0:<timestamp>:<body>` with the signing secret, and an
`X-Slack-Request-Timestamp` within five minutes; anything else is answered 401 and never
becomes a vote. A click is acknowledged at once (Slack wants an answer within three
seconds), then the user is mapped to an approver and the vote, signed with the vote key
(which is what makes it *verified* to the run), sent to the run. The run's
own notifier updates the message from the run's durable state; the bridge only answers the
voter, ephemerally, when the vote did not count.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import ValidationError
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from temporalio.client import Client

from pitstop.keys import KeyRing
from pitstop.slack.blocks import (
    APPROVE_ACTION,
    COMMENT_BLOCK,
    COMMENT_INPUT,
    REJECT_ACTION,
    VOTE_CALLBACK,
    comment_modal,
)
from pitstop.slack.config import SlackSettings
from pitstop.slack.contracts import ButtonValue, ModalMetadata
from pitstop.slack.identity import ApproverMap
from pitstop.slack.votes import VoteOutcome, cast_vote, private_update_id, signed_vote, update_id

log = logging.getLogger("pitstop.slack")

NOT_MAPPED = (
    "You are not mapped to a pitstop approver, so your vote was not sent. "
    "Ask an administrator to add your Slack user `{user}` to the approvers mapping (PITSTOP_SLACK_APPROVERS)."
)
NOT_OURS = "This button does not belong to a pitstop gate that this bridge understands; nothing was sent."
# A profile looked up by e-mail is trusted this long (a changed address takes effect after it).
PROFILE_TTL_S = 300.0


class Bridge:
    """Turns verified Slack interactions into `decide` Updates."""

    def __init__(
        self,
        settings: SlackSettings,
        temporal: Client,
        approvers: ApproverMap,
        web: AsyncWebClient,
        vote_key: KeyRing,
    ) -> None:
        self.settings = settings
        self.temporal = temporal
        self.approvers = approvers
        self.web = web
        self.vote_key = vote_key
        self._profiles: dict[str, tuple[float, str | None]] = {}

    def bolt_app(self) -> AsyncApp:
        # The token is the client's (its base URL too): bolt uses the client given.
        app = AsyncApp(
            signing_secret=(
                self.settings.signing_secret.get_secret_value() if self.settings.signing_secret else None
            ),
            client=self.web,
            name="pitstop",
        )
        app.action(APPROVE_ACTION)(self.on_click)
        app.action(REJECT_ACTION)(self.on_click)
        app.view(VOTE_CALLBACK)(self.on_comment)
        return app

    # --- listeners ---------------------------------------------------------------------
    async def on_click(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        user = body.get("user", {}).get("id", "")
        channel = (body.get("channel") or {}).get("id") or body.get("container", {}).get("channel_id", "")
        message_ts = body.get("container", {}).get("message_ts") or (body.get("message") or {}).get("ts", "")
        action = (body.get("actions") or [{}])[0]
        approve = action.get("action_id") == APPROVE_ACTION
        try:
            value = ButtonValue.model_validate_json(action.get("value") or "")
        except ValidationError:
            await self._tell(channel, user, NOT_OURS)
            return
        approver = await self.approver_for(user)
        if approver is None:
            log.info("click by unmapped Slack user %s on %s/%s refused", user, value.run, value.gate)
            await self._tell(channel, user, NOT_MAPPED.format(user=user))
            return
        if value.comment:
            meta = ModalMetadata(
                run=value.run,
                gate=value.gate,
                escalated=value.escalated,
                approve=approve,
                channel=channel,
                message_ts=message_ts,
            )
            await self.web.views_open(trigger_id=body.get("trigger_id", ""), view=comment_modal(meta, ""))
            return
        click = update_id(message_ts, user, value, approve)
        outcome = await cast_vote(
            self.temporal,
            value.run,
            signed_vote(self.vote_key, value.run, value.gate, approve, approver, user, click),
            private_update_id(self.vote_key, click),
        )
        await self._answer(outcome, channel, user, value.run, value.gate)

    async def on_comment(self, ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        user = body.get("user", {}).get("id", "")
        try:
            meta = ModalMetadata.model_validate_json(view.get("private_metadata") or "")
        except ValidationError:
            await ack()
            return
        values = view.get("state", {}).get("values", {})
        comment = str((values.get(COMMENT_BLOCK, {}).get(COMMENT_INPUT) or {}).get("value") or "").strip()
        if not comment:
            await ack(response_action="errors", errors={COMMENT_BLOCK: "This gate requires a comment."})
            return
        await ack()
        approver = await self.approver_for(user)
        if approver is None:
            await self._tell(meta.channel, user, NOT_MAPPED.format(user=user))
            return
        click = update_id(meta.message_ts, user, meta, meta.approve)
        outcome = await cast_vote(
            self.temporal,
            meta.run,
            signed_vote(self.vote_key, meta.run, meta.gate, meta.approve, approver, user, click, comment),
            private_update_id(self.vote_key, click),
        )
        await self._answer(outcome, meta.channel, user, meta.run, meta.gate)

    # --- helpers -------------------------------------------------------------------------
    async def approver_for(self, user: str) -> str | None:
        """The approver name of a Slack user: the mapping file, else the profile e-mail."""
        if not user:
            return None
        named = self.approvers.by_user(user)
        if named is not None or not self.approvers.needs_profile:
            return named
        cached = self._profiles.get(user)
        now = time.monotonic()
        if cached is not None and now - cached[0] < PROFILE_TTL_S:
            return cached[1]
        try:
            info = await self.web.users_info(user=user)
        except SlackApiError as exc:
            log.warning("users.info %s failed: %s", user, exc.response.get("error"))
            return None
        profile = info.get("user") or {}
        email = (
            None
            if profile.get("deleted") or profile.get("is_bot")
            else profile.get("profile", {}).get("email")
        )
        name = self.approvers.by_email(email)
        self._profiles[user] = (now, name)
        return name

    async def _answer(self, outcome: VoteOutcome, channel: str, user: str, run: str, gate: str) -> None:
        if outcome.accepted:
            log.info("vote by %s on %s/%s accepted", user, run, gate)
            return
        log.info("vote by %s on %s/%s refused: %s", user, run, gate, outcome.reason)
        await self._tell(channel, user, f"Your vote was not counted: {outcome.reason}")

    async def _tell(self, channel: str, user: str, text: str) -> None:
        """An ephemeral answer: only the voter sees it."""
        try:
            await self.web.chat_postEphemeral(channel=channel, user=user, text=text)
        except SlackApiError as exc:
            log.warning("chat.postEphemeral to %s in %s failed: %s", user, channel, exc.response.get("error"))
