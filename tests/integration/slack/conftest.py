"""Slack fixtures: the recording Web API server, a worker whose Slack settings point at it,
the bridge on a free port, and a helper that starts a runbook run."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from activities import ACTIVITIES
from pitstop.contracts import RunReport, RunRequest
from pitstop.slack.config import SlackSettings
from pitstop.slack.server import build_bridge, start_http
from pitstop.worker_app import build_worker
from tests import testmodules
from tests.integration.slack.slackfake import BOT_TOKEN, SIGNING_SECRET, Clicker, FakeSlack
from workflows import WORKFLOWS

UI_URL = "https://temporal.example.test"
RUN_CHANNEL = "#pitstop-runs"
APPROVERS = """
users:
  U0ALICE: alice
  U0BOB: bob
  U0CAROL: carol
  U0DAVE: dave
  U0MALLORY: mallory
email_domains: [example.com]
"""
# Known to Slack only (users.info): frank by an e-mail in a trusted domain, eve by one outside it.
SLACK_ONLY_USERS = {"U0FRANK": ("frank", "frank@example.com"), "U0EVE": ("eve", "eve@elsewhere.test")}

StartFn = Callable[..., Awaitable[WorkflowHandle[Any, RunReport]]]


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack(users=dict(SLACK_ONLY_USERS))
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
def slack_env(monkeypatch: pytest.MonkeyPatch, slack: FakeSlack, tmp_path: Path) -> SlackSettings:
    """The environment a worker and a bridge get in production, pointed at the fake Slack."""
    approvers = tmp_path / "slack-approvers.yaml"
    approvers.write_text(APPROVERS)
    for name, value in {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "SLACK_DEFAULT_CHANNEL": RUN_CHANNEL,
        "PITSTOP_UI_URL": UI_URL,
        "PITSTOP_SLACK_APPROVERS": str(approvers),
    }.items():
        monkeypatch.setenv(name, value)
    return SlackSettings.from_env()


@pytest.fixture
async def slack_worker(
    temporal_client: Client, task_queue: str, slack_env: SlackSettings
) -> AsyncIterator[str]:
    worker = build_worker(
        temporal_client,
        task_queue,
        workflows=WORKFLOWS,
        activities=[*ACTIVITIES, *testmodules.TEST_ACTIVITIES],
    )
    async with worker:
        yield task_queue


@pytest.fixture
async def bridge(slack_env: SlackSettings, temporal_client: Client) -> AsyncIterator[Clicker]:
    """The bridge as `pitstop slack serve` runs it, on a free loopback port."""
    running = await start_http(build_bridge(slack_env, temporal_client).bolt_app(), "127.0.0.1", 0)
    yield Clicker(url=f"http://127.0.0.1:{running.port}/slack/events")
    await running.stop()


@pytest.fixture
def start(temporal_client: Client, slack_worker: str) -> StartFn:
    async def start_run(
        runbook: str, hosts: int = 1, requested_by: str = "requester", **request: Any
    ) -> WorkflowHandle[Any, RunReport]:
        inventory = "all:\n  hosts:\n" + "".join(f"    h{i:02d}: {{}}\n" for i in range(hosts))
        request = RunRequest(
            runbook="runbook.yaml",
            inventory="inventory.yaml",
            files={"runbook.yaml": textwrap.dedent(runbook), "inventory.yaml": inventory},
            requested_by=requested_by,
            **request,
        )
        return await temporal_client.start_workflow(
            "RunbookWorkflow",
            request,
            id=f"slack-{uuid.uuid4().hex[:10]}",
            task_queue=slack_worker,
            result_type=RunReport,
        )

    return start_run
