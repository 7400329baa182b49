"""Link a written report from the run's Slack thread: one reply under the run's first message,
posted with the bot token the workers use (SLACK_BOT_TOKEN, SLACK_API_URL).

The engine's thread lives in the run's history (pitstop/report/source.py finds it); the report
is written by the CLI after the run, so the CLI posts the link, not the workflow. A local path
helps only readers of the same disk: `link_base` names where the report directory is served
(a bucket's website, an internal docs host) and the link is that URL."""

from __future__ import annotations

from pathlib import Path

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from pitstop.slack.config import SlackConfigError, SlackSettings
from pitstop.slack.contracts import MessageRef


class ReportLinkError(Exception):
    """The link could not be posted; the message says why and what to set."""


def report_url(html: Path, link_base: str | None) -> str:
    if link_base:
        return f"{link_base.rstrip('/')}/{html.name}"
    return html.resolve().as_uri()


def post_link(thread: MessageRef, run_id: str, url: str, settings: SlackSettings) -> MessageRef:
    try:
        client = WebClient(token=settings.token(), base_url=settings.api_url, timeout=10)
        text = f":bar_chart: Report of run `{run_id}`: <{url}|timeline, availability, validation, gates>"
        response = client.chat_postMessage(
            channel=thread.channel, thread_ts=thread.ts, text=text, unfurl_links=False
        )
    except SlackConfigError as exc:
        raise ReportLinkError(str(exc)) from None
    except SlackApiError as exc:
        error = exc.response.get("error") or f"HTTP {exc.response.status_code}"
        raise ReportLinkError(f"Slack chat.postMessage failed: {error} (check SLACK_BOT_TOKEN)") from None
    return MessageRef(channel=str(response.get("channel") or thread.channel), ts=str(response["ts"]))
