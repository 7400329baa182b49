"""The Slack wiring is deterministic workflow code: a run that posts, is decided from Slack
and continues as new replays from its histories, and keeps one thread across executions."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.worker import Replayer

from pitstop.client import tracing_interceptor
from pitstop.sandbox import workflow_runner
from tests.integration.slack.conftest import RUN_CHANNEL, StartFn
from tests.integration.slack.slackfake import Clicker, FakeSlack, buttons, channel_id
from workflows import WORKFLOWS

ROLLING = """
name: rolling-with-slack
approvers:
  sre: [bob]
stages:
  - name: fleet
    hosts: all
    rolling: {max_in_flight: 1}
    gate: {before: true, after: true, approvers: sre}
    tasks:
      - test.step: {value: "{{ inventory_hostname }}"}
"""


async def test_a_run_that_continues_as_new_keeps_its_thread_and_replays(
    start: StartFn, slack: FakeSlack, bridge: Clicker, temporal_client: Client
) -> None:
    handle = await start(ROLLING, hosts=3, max_launches_per_execution=1)
    before = await slack.wait_for(
        "chat.postMessage", lambda c: "Approval needed: fleet:before" in c.args["text"]
    )
    await bridge.click(before, "U0BOB")
    after = await slack.wait_for(
        "chat.postMessage", lambda c: "Approval needed: fleet:after" in c.args["text"]
    )
    await bridge.click(after, "U0BOB")
    report = await handle.result()
    assert report.status == "succeeded", report.msg

    runs = [e.run_id async for e in temporal_client.list_workflows(f'WorkflowId = "{handle.id}"')]
    assert len(runs) >= 3  # one launch per execution, three hosts
    # One first message, in the default channel (where these gates post too, having no channel).
    firsts = [
        c for c in slack.called("chat.postMessage", channel=RUN_CHANNEL) if "started by" in c.args["text"]
    ]
    assert len(firsts) == 1
    first = firsts[0]
    thread = slack.called("chat.postMessage", channel=channel_id(RUN_CHANNEL))
    assert [c.args["thread_ts"] for c in thread] == [first.ts] * 2
    # Both gate messages closed, each once, from whichever execution saw the gate close.
    for posted in (before, after):
        closes = [c for c in slack.called("chat.update", ts=posted.ts) if not buttons(c)]
        assert len(closes) == 1

    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=temporal_client.data_converter,
        workflow_runner=workflow_runner(),
        interceptors=[tracing_interceptor()],
    )
    for run_id in runs:
        history = await temporal_client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{run_id}: {result.replay_failure}"
