"""`notify.slack` in runbooks, and the rule that Slack trouble never fails a run."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import WorkflowHandle

from pitstop.contracts import Decision, RunReport, RunStatus
from tests.integration.slack.conftest import RUN_CHANNEL, StartFn
from tests.integration.slack.slackfake import FakeSlack

NOTIFYING = """
name: notifying
stages:
  - name: fleet
    hosts: all
    tasks:
      - name: announce
        notify.slack: {text: "draining {{ inventory_hostname }}", thread: run}
        register: posted
      - name: elsewhere
        notify.slack: {text: "FYI {{ inventory_hostname }}", channel: "#audit", thread: "{{ posted.ts }}"}
"""


async def test_notify_slack_replies_in_the_runs_thread_or_under_a_registered_message(
    start: StartFn, slack: FakeSlack
) -> None:
    report = await (await start(NOTIFYING)).result()
    assert report.status == "succeeded", report.msg
    first = slack.called("chat.postMessage", channel=RUN_CHANNEL)[0]
    announce = slack.called("chat.postMessage", text="draining h00")[0]
    assert (announce.args["channel"], announce.args["thread_ts"]) == (first.channel, first.ts)
    fyi = slack.called("chat.postMessage", text="FYI h00")[0]
    assert (fyi.args["channel"], fyi.args["thread_ts"]) == ("#audit", announce.ts)
    outcome = report.stages[0].hosts[0].tasks[0]
    assert outcome.status == "changed" and outcome.data["ts"] == announce.ts


async def test_a_plan_posts_nothing_and_says_where_it_would_post(start: StartFn, slack: FakeSlack) -> None:
    report = await (await start(NOTIFYING, check_mode=True)).result()
    assert report.status == "succeeded", report.msg
    assert slack.called("chat.postMessage") == []
    announce = report.stages[0].hosts[0].tasks[0]
    assert announce.msg.startswith(f"would post to {RUN_CHANNEL}")


GATED = """
name: gated
approvers:
  sre: [bob]
stages:
  - name: fleet
    hosts: all
    gate: {before: true, approvers: sre}
    tasks:
      - test.step: {value: done}
"""


async def test_slack_failures_become_notices_and_the_run_goes_on(start: StartFn, slack: FakeSlack) -> None:
    # The bot was removed from the channel: every post is refused, permanently.
    slack.errors["chat.postMessage"] = "not_in_channel"
    handle = await start(GATED)
    status = await _status_when_notices(handle, 2)
    assert status.status == "waiting_gate"
    assert [n.split(" was not")[0] for n in status.notices] == [
        "Slack: the run's first message",
        "Slack: gate fleet:before",
    ]
    assert all("Slack chat.postMessage failed: not_in_channel" in n for n in status.notices)
    # Refused for good: tried once each, not retried.
    assert len(slack.called("chat.postMessage")) == 2
    # The gate still works from the CLI or the UI.
    await handle.execute_update("decide", Decision(approver="bob", approve=True))
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert report.notices == status.notices
    assert slack.called("chat.update") == []  # nothing was posted, so nothing to update


DOCUMENTED = """
name: documented
stages:
  - name: fleet
    hosts: all
    tasks:
      - name: the report
        test.step:
          artifact: {name: run report, uri: "https://reports.example.test/r/run.html?a=1&b=2"}
      - name: the record
        test.step:
          artifact: {name: change record, uri: "s3://records/change-records/lab/run.md"}
"""


async def test_the_end_message_lists_the_documents_the_run_left(start: StartFn, slack: FakeSlack) -> None:
    report = await (await start(DOCUMENTED)).result()
    assert report.status == "succeeded", report.msg
    first = slack.called("chat.postMessage", channel=RUN_CHANNEL)[0]
    replies = [c.args for c in slack.called("chat.postMessage") if c.args.get("thread_ts") == first.ts]
    # A link people open in a browser is a Slack link; an s3:// URI is said as it is.
    assert replies[-1]["text"] == (
        "Run ended: *succeeded*\n"
        "• <https://reports.example.test/r/run.html?a=1&amp;b=2|run report>\n"
        "• change record: s3://records/change-records/lab/run.md"
    )


async def _status_when_notices(handle: WorkflowHandle[Any, RunReport], n: int) -> RunStatus:
    for _ in range(400):
        status = await handle.query("status", result_type=RunStatus)
        if len(status.notices) >= n:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {n} notices: {status.notices}")


ROLLING_BACK = """
name: rolling-back
stages:
  - name: canary
    hosts: all
    serial: 1
    tasks:
      - test.step: {value: up, fail_hosts: [h01]}
    rollback_when: ["{{ stage.failed_hosts | length > 0 }}"]
    rollback:
      - test.step: {value: undo}
"""


async def test_a_rollback_is_announced_in_the_runs_thread_and_in_the_channel(
    start: StartFn, slack: FakeSlack
) -> None:
    report = await (await start(ROLLING_BACK, hosts=2)).result()
    assert report.status == "rolled_back", report.msg
    first = slack.called("chat.postMessage", channel=RUN_CHANNEL)[0]
    replies = [c.args for c in slack.called("chat.postMessage") if c.args.get("thread_ts") == first.ts]
    texts = [r["text"] for r in replies]
    assert texts[0].startswith(":rewind: Rolling back: rollback_when held in stage 'canary'")
    assert texts[1] == "Stage *canary*: rolled_back (1 failed, 1 ok)"
    assert texts[2].startswith("Run ended: *rolled_back*: rolled back: rollback_when held")
    # Runbook text is escaped for Slack; the reason names the failed host and why.
    assert texts[2].endswith("length &gt; 0 }} (h01: canary/0: step failed on h01)")
    # The rollback and an unhappy end are shown in the channel too, not only in the thread.
    assert [r["reply_broadcast"] for r in replies] == [True, False, True]
