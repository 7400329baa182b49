"""`pitstop report --slack`: the report's link as a reply in the run's Slack thread, the thread
found in the run's history (no worker needed once the run has ended)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client
from typer.testing import CliRunner

from pitstop.cli.app import build_app
from pitstop.report.source import read_run
from pitstop.report.write import write_report
from tests.integration.slack.conftest import RUN_CHANNEL, StartFn
from tests.integration.slack.slackfake import FakeSlack

ONE_STAGE = """
name: reported
stages:
  - name: fleet
    hosts: all
    tasks:
      - test.step: {value: "{{ inventory_hostname }}"}
"""


async def test_the_report_is_linked_in_the_runs_thread(
    start: StartFn, slack: FakeSlack, temporal_client: Client, tmp_path: Path
) -> None:
    handle = await start(ONE_STAGE, hosts=2)
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    first = slack.called("chat.postMessage", channel=RUN_CHANNEL)[0]

    source = await read_run(temporal_client, handle.id)
    assert source.slack_thread is not None
    assert (source.slack_thread.channel, source.slack_thread.ts) == (first.channel, first.ts)
    files = write_report(source, tmp_path)

    # The CLI redraws from the saved data (the thread kept in it) and posts the link; in a
    # thread, since the fake Slack answers on this test's event loop.
    args = ["report", "--from", str(files.data), "--out", str(tmp_path / "again"), "--slack"]
    args += ["--link-base", "https://reports.example.test/runs/"]
    result = await asyncio.to_thread(CliRunner().invoke, build_app(["report"]), args)
    assert result.exit_code == 0, result.output
    url = f"https://reports.example.test/runs/{files.html.name}"
    reply = await slack.wait_for(
        "chat.postMessage", lambda c: c.args.get("thread_ts") == first.ts and url in str(c.args.get("text"))
    )
    assert reply.args["channel"] == first.channel
    assert f"linked in the run's Slack thread ({first.channel}" in result.output


async def test_a_run_without_a_thread_is_said_so(tmp_path: Path) -> None:
    from tests.unit.test_report_cli import FIXTURE

    result = await asyncio.to_thread(
        CliRunner().invoke,
        build_app(["report"]),
        ["report", "--from", str(FIXTURE), "--out", str(tmp_path), "--slack"],
    )
    assert result.exit_code == 1
    assert "has no Slack thread" in result.output and "the report is written" in result.output
