"""Slack notifications: the `notify.slack` module, and the engine's gate and run messages.

Activities (all `async def`: they only wait on Slack's Web API):
- `module.notify.slack`: a runbook's message, in a channel or in the run's thread;
- `notify.gate_opened`: a gate's approval request with Approve/Reject buttons;
- `notify.gate_updated`: the same message after a vote or an escalation (mentions the
  escalation group in a reply);
- `notify.gate_closed`: the message with the outcome and no buttons;
- `notify.run_event`: the run's first message, and progress replies in its thread.

Slack's answers map onto pitstop's errors: a bad token or a missing scope is
`Unauthorized`, an unknown channel or malformed blocks `InvalidArgs` (neither retried);
rate limits and Slack outages are retried after Slack's `Retry-After`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from temporalio import activity

from activities.module_activity import module_activity
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail, make_error
from pitstop.module_args.notify import RUN_THREAD, SLACK, SlackArgs
from pitstop.slack.blocks import escalation_reply, gate_message, plain, run_event_blocks
from pitstop.slack.config import SlackConfigError, SlackSettings
from pitstop.slack.contracts import GateNotice, MessageRef, RunNotice, SlackRunState
from pitstop.slack.identity import ApproverMapError, load_approver_map
from workflows.runbook import RunbookWorkflow

log = logging.getLogger("pitstop.notify")

_UNAUTHORIZED = {
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "no_permission",
    "missing_scope",
    "not_allowed_token_type",
    "ekm_access_denied",
    "team_access_not_granted",
}
_INVALID = {
    "channel_not_found",
    "not_in_channel",
    "is_archived",
    "msg_too_long",
    "no_text",
    "invalid_blocks",
    "invalid_blocks_format",
    "invalid_arguments",
    "message_not_found",
    "cant_update_message",
    "edit_window_closed",
    "restricted_action",
    "thread_not_found",
    "user_not_in_channel",
}


def _settings() -> SlackSettings:
    try:
        return SlackSettings.from_env()
    except SlackConfigError as exc:
        raise make_error(ErrorType.INVALID_ARGS, str(exc)) from None


def _client(settings: SlackSettings) -> AsyncWebClient:
    try:
        token = settings.token()
    except SlackConfigError as exc:
        raise make_error(ErrorType.INVALID_ARGS, str(exc)) from None
    return AsyncWebClient(token=token, base_url=settings.api_url, timeout=10)


async def _call(method: str, request: Awaitable[AsyncSlackResponse]) -> AsyncSlackResponse:
    """One Web API call, its failure mapped onto pitstop's error types."""
    try:
        return await request
    except SlackApiError as exc:
        error = str(exc.response.get("error") or f"HTTP {exc.response.status_code}")
        message = f"Slack {method} failed: {error}"
        if error in _UNAUTHORIZED:
            raise make_error(
                ErrorType.UNAUTHORIZED, f"{message} (check SLACK_BOT_TOKEN and the app's scopes)"
            ) from None
        if error in _INVALID:
            raise make_error(ErrorType.INVALID_ARGS, message) from None
        retry_after = exc.response.headers.get("Retry-After") or exc.response.headers.get("retry-after")
        delay = timedelta(seconds=float(retry_after)) if retry_after and str(retry_after).isdigit() else None
        raise make_error(ErrorType.SLACK_UNAVAILABLE, message, next_retry_delay=delay) from None


def _mention(settings: SlackSettings) -> Any:
    """Approver name -> `<@U123>` when the approvers mapping knows them, else the name."""
    try:
        approvers = load_approver_map(settings.approvers_file)
    except ApproverMapError as exc:
        log.warning("mentions fall back to plain names: %s", exc)
        return plain

    def mention(name: str) -> str:
        uid = approvers.slack_id(name)
        return f"<@{uid}>" if uid else plain(name)

    return mention


def _ref(response: AsyncSlackResponse, channel: str) -> MessageRef:
    return MessageRef(channel=str(response.get("channel") or channel), ts=str(response["ts"]))


# --- the engine's messages -------------------------------------------------------------
@activity.defn(name="notify.gate_opened")
async def gate_opened(notice: GateNotice) -> MessageRef:
    settings = _settings()
    client = _client(settings)
    text, blocks = gate_message(
        notice, ui_url=settings.ui_url, namespace=activity.info().namespace, mention=_mention(settings)
    )
    response = await _call(
        "chat.postMessage",
        client.chat_postMessage(channel=notice.channel, text=text, blocks=blocks, unfurl_links=False),
    )
    return _ref(response, notice.channel)


@activity.defn(name="notify.gate_updated")
async def gate_updated(notice: GateNotice) -> None:
    settings = _settings()
    client = _client(settings)
    mention = _mention(settings)
    await _update(client, settings, notice, mention)
    if notice.escalated_now and notice.message is not None:
        await _call(
            "chat.postMessage",
            client.chat_postMessage(
                channel=notice.message.channel,
                thread_ts=notice.message.ts,
                text=escalation_reply(notice, mention),
                reply_broadcast=True,
            ),
        )


@activity.defn(name="notify.gate_closed")
async def gate_closed(notice: GateNotice) -> None:
    settings = _settings()
    await _update(_client(settings), settings, notice, _mention(settings))


async def _update(client: AsyncWebClient, settings: SlackSettings, notice: GateNotice, mention: Any) -> None:
    if notice.message is None:
        fail(ErrorType.INVALID_ARGS, "the gate has no Slack message to update")
    text, blocks = gate_message(
        notice, ui_url=settings.ui_url, namespace=activity.info().namespace, mention=mention
    )
    await _call(
        "chat.update",
        client.chat_update(channel=notice.message.channel, ts=notice.message.ts, text=text, blocks=blocks),
    )


@activity.defn(name="notify.run_event")
async def run_event(notice: RunNotice) -> MessageRef:
    settings = _settings()
    client = _client(settings)
    blocks = run_event_blocks(
        notice.text, ui_url=settings.ui_url, namespace=activity.info().namespace, run_id=notice.run_id
    )
    extra: dict[str, Any] = {}
    if notice.thread is not None:
        extra = {"thread_ts": notice.thread.ts, "reply_broadcast": notice.broadcast}
    channel = notice.thread.channel if notice.thread is not None else notice.channel
    response = await _call(
        "chat.postMessage",
        client.chat_postMessage(
            channel=channel, text=notice.text, blocks=blocks, unfurl_links=False, **extra
        ),
    )
    return _ref(response, channel)


# --- the runbook module ----------------------------------------------------------------
async def _run_thread(run_id: str) -> SlackRunState:
    """The run's Slack thread, asked of the run itself (its `slack_thread` Query)."""
    try:
        handle = activity.client().get_workflow_handle(run_id)
        state: SlackRunState = await handle.query(RunbookWorkflow.slack_thread)
        return state
    except Exception as exc:  # a run started without the engine (tests) or an old run
        log.info("run %s has no Slack thread: %s", run_id, exc)
        return SlackRunState()


@module_activity(SLACK)
async def notify_slack(call: ModuleCall, args: SlackArgs) -> ModuleResult:
    settings = _settings()
    run = (
        await _run_thread(call.run_id)
        if args.thread == RUN_THREAD or args.channel is None
        else SlackRunState()
    )
    thread_ts: str | None = None
    note = ""
    channel = args.channel
    if args.thread == RUN_THREAD:
        if run.thread is not None:
            thread_ts, channel = run.thread.ts, channel or run.thread.channel
        else:
            note = " (the run has no Slack thread; posted in the channel)"
    elif args.thread:
        thread_ts = args.thread
    channel = channel or run.channel or settings.default_channel
    if channel is None:
        fail(
            ErrorType.INVALID_ARGS,
            "notify.slack needs a channel: set `channel:` on the task or SLACK_DEFAULT_CHANNEL on the worker",
        )
    where = f"{channel}" + (" (in a thread)" if thread_ts else "")
    if call.check_mode:
        # `ts` is empty, not missing: later tasks that thread under it still render in a plan.
        data = {"channel": channel, "ts": "", "thread_ts": thread_ts}
        return ModuleResult(changed=True, msg=f"would post to {where}{note}", data=data)
    client = _client(settings)
    extra: dict[str, Any] = {}
    if thread_ts:
        extra = {"thread_ts": thread_ts, "reply_broadcast": args.broadcast}
    if args.blocks:
        extra["blocks"] = args.blocks
    response = await _call(
        "chat.postMessage", client.chat_postMessage(channel=channel, text=args.text or "", **extra)
    )
    ref = _ref(response, channel)
    return ModuleResult(
        changed=True,
        msg=f"posted to {where}{note}",
        data={"channel": ref.channel, "ts": ref.ts, "thread_ts": thread_ts},
    )


NOTIFY_ACTIVITIES: list[Callable[..., Any]] = [
    notify_slack,
    gate_opened,
    gate_updated,
    gate_closed,
    run_event,
]
