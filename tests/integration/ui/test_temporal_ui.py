"""The README's Temporal UI path in a real browser (Debian's headless chromium): *Start Workflow*
with the README's JSON, the run's current details, the `decide` Update with the README's JSON,
the run to its end; and the same with payload encryption on, through the codec server.

The README's JSON is read from README.md ("Starting a run from the Temporal UI"), so the text
people copy is the text under test. Screenshots of every step: see conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "playwright",
    reason="the Python package `playwright` is not installed (`make venv` installs the dev extra)",
)

from playwright.async_api import Page, expect
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from pitstop.client import connect
from pitstop.contracts import RunReport, RunStatus
from pitstop.devstack import DevStack, free_ports_config
from pitstop.settings import Settings
from tests.integration.ui import temporal_ui as ui
from tests.integration.ui.conftest import REPO_RUNBOOK_DIR, Screenshots, serving

README = Path(__file__).resolve().parents[3] / "README.md"
TEST_RUNBOOK = "ui-gated-rollout.yaml"


def readme_ui_json() -> tuple[dict[str, Any], dict[str, Any]]:
    """The start input and the `decide` input of README.md's "Starting a run from the Temporal UI"."""
    text = README.read_text()
    heading = "## Starting a run from the Temporal UI"
    assert heading in text, f"README.md has no section {heading!r}"
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```json\n(.*?)```", section, re.DOTALL)
    assert len(blocks) >= 2, "the section should show the start JSON and the `decide` Update's JSON"
    return json.loads(blocks[0]), json.loads(blocks[1])


async def status_when(handle: WorkflowHandle[Any, Any], predicate: Any, within: float = 60.0) -> RunStatus:
    """The run's `status` query once `predicate` holds (the run moves on its own)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    status: RunStatus | None = None
    while True:
        try:
            status = await handle.query("status", result_type=RunStatus)
        except RPCError:
            status = None  # not started by the worker yet
        if status is not None and predicate(status):
            return status
        if loop.time() > deadline:
            raise AssertionError(f"the run's status never matched; last: {status}")
        await asyncio.sleep(0.1)


def gate_open(status: RunStatus) -> bool:
    return any(g.rule.gate_id == "canary:after" and g.status == "open" for g in status.gates)


async def start_from_the_ui(
    page: Page, shots: Screenshots, ui_url: str, task_queue: str, workflow_id: str, data: dict[str, Any]
) -> None:
    await ui.start_workflow(
        page,
        ui_url,
        workflow_id=workflow_id,
        task_queue=task_queue,
        workflow_type="RunbookWorkflow",
        data=data,
    )
    await shots.take(page, "start-workflow-form")
    await ui.submit_start(page, workflow_id)
    await shots.take(page, "run-started")


async def see_the_open_gate(page: Page, shots: Screenshots, handle: WorkflowHandle[Any, Any]) -> None:
    """Current details and the `status` query, as the UI shows them, once the gate is open."""
    await status_when(handle, gate_open)
    await page.reload()  # the page queried the details when it opened, before the gate did
    details = await ui.current_details(page)
    await expect(details.get_by_text("Waiting for approval: canary:after")).to_be_visible()
    await expect(details.get_by_text(re.compile(r"canary: waiting_gate \(ok 1\)"))).to_be_visible()
    await shots.take(page, "current-details-gate-open")


async def drive_gated_run(
    page: Page, shots: Screenshots, ui_url: str, client: Client, task_queue: str
) -> tuple[RunReport, str]:
    """The README's path on the test runbook: start, details, `decide`, the end. Returns the
    run's report and its id."""
    start, vote = readme_ui_json()
    data = {**start, "runbook": TEST_RUNBOOK}  # same inventory path: the test runbook dir mirrors it
    workflow_id = f"ui-gated-rollout-{uuid.uuid4().hex[:8]}"
    await start_from_the_ui(page, shots, ui_url, task_queue, workflow_id, data)
    handle = client.get_workflow_handle(workflow_id, result_type=RunReport)

    await see_the_open_gate(page, shots, handle)
    details = page.frame_locator("iframe")
    await expect(details.get_by_text("ui-gated-rollout: waiting_gate")).to_be_visible()
    await expect(details.get_by_text("fleet: pending (pending 3)")).to_be_visible()

    # Hosts by name: the `status` query.
    result = await ui.run_query(page, "status")
    await expect(result).to_contain_text('"node-a1": "ok"')
    await expect(result).to_contain_text('"gate_id": "canary:after"')
    await expect(result).to_contain_text('"node-b2": "pending"')
    await shots.take(page, "status-query")

    # Search attributes kept current for the UI.
    await page.get_by_role("tab", name="Search Attributes").click()
    await expect(page.get_by_text("PitstopStatus")).to_be_visible()
    await expect(page.get_by_text("waiting_gate").first).to_be_visible()
    await shots.take(page, "search-attributes")

    dialog = await ui.send_update(page, "decide", vote)
    await expect(dialog).to_be_hidden()
    await shots.take(page, "decide-update-sent")

    # The timeline follows the run as it goes (auto refresh): the fleet's hosts, then the end.
    await page.get_by_role("tab", name="Timeline").click()
    await expect(ui.workflow_status(page, "Completed")).to_be_visible()
    report = await handle.result()
    details = await ui.current_details(page)
    await expect(details.get_by_text("ui-gated-rollout: succeeded")).to_be_visible()
    await expect(details.get_by_text("fleet: ok (ok 3)")).to_be_visible()
    await shots.take(page, "run-completed")
    return report, workflow_id


def assert_the_ui_vote_counted(report: RunReport, vote: dict[str, Any]) -> None:
    assert report.status == "succeeded", report.msg
    (gate,) = report.gates
    assert gate.rule.gate_id == "canary:after" and gate.status == "approved", gate
    (recorded,) = gate.votes
    assert (recorded.approver, recorded.approve, recorded.comment) == (
        vote["approver"],
        True,
        vote["comment"],
    )
    # The UI holds no vote key: the vote is a claim, recorded as such.
    assert not recorded.verified and recorded.source == "unverified"
    assert recorded.claimed_source == vote["source"]
    assert report.requested_by == "dave" and report.requester is not None
    assert not report.requester.verified


async def test_the_readmes_json_starts_a_run_and_its_vote_is_refused_on_a_require_verified_gate(
    page: Page,
    screenshots: Screenshots,
    stack: DevStack,
    temporal_client: Client,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The README's JSON verbatim, on runbooks/examples/gated-rollout.yaml: the run starts and
    waits at its gate; its `canary:after` gate has `require_verified`, so the UI's vote is
    refused, with the reason, in the Update dialog (as the README says)."""
    start, vote = readme_ui_json()
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(REPO_RUNBOOK_DIR))
    workflow_id = f"gated-rollout-{uuid.uuid4().hex[:8]}"
    handle = temporal_client.get_workflow_handle(workflow_id, result_type=RunReport)
    async with serving(temporal_client, task_queue):
        try:
            await start_from_the_ui(page, screenshots, stack.ui_url, task_queue, workflow_id, start)
            await see_the_open_gate(page, screenshots, handle)

            dialog = await ui.send_update(page, "decide", vote)
            refusal = dialog.get_by_role("alert").filter(has_text="counts only verified votes")
            await expect(refusal).to_be_visible()
            await screenshots.take(page, "decide-refused")

            status = await handle.query("status", result_type=RunStatus)
            (gate,) = status.gates
            assert gate.status == "open" and gate.votes == []
            (refused,) = gate.refused
            assert refused.approver == vote["approver"] and refused.claimed_source == vote["source"]
            assert refused.reason is not None and "verified" in refused.reason
        finally:
            with contextlib.suppress(RPCError):  # never started, or already closed
                await handle.terminate("browser test: the README's run was only looked at")


async def test_start_see_the_gate_decide_from_the_ui_and_the_run_completes(
    page: Page,
    screenshots: Screenshots,
    stack: DevStack,
    temporal_client: Client,
    task_queue: str,
    runbook_dir: Path,
) -> None:
    _, vote = readme_ui_json()
    async with serving(temporal_client, task_queue):
        report, _ = await drive_gated_run(page, screenshots, stack.ui_url, temporal_client, task_queue)
    assert_the_ui_vote_counted(report, vote)


async def test_with_payload_encryption_the_ui_encodes_and_decodes_through_the_codec_server(
    page: Page,
    screenshots: Screenshots,
    tmp_path: Path,
    task_queue: str,
    runbook_dir: Path,
) -> None:
    """`pitstop dev up --codec`'s wiring: the UI started with the codec server's endpoint, which
    encrypts what the UI sends (start input, the vote) and decrypts what it shows."""
    _, vote = readme_ui_json()
    config = free_ports_config(tmp_path / "codec-home", parts=("temporal",), codec=True)
    async with DevStack(config).running_async(start_timeout=90) as codec_stack:
        assert codec_stack.ui_codec_endpoint() == codec_stack.codec_endpoint
        settings = Settings(
            temporal_address=codec_stack.temporal_address,
            home=codec_stack.home,
            ui_url=codec_stack.ui_url,
        )
        client = await connect(settings)
        codec_calls: list[str] = []
        page.on(
            "request",
            lambda request: (
                codec_calls.append(request.url.split("?")[0])
                if request.url.startswith(codec_stack.codec_endpoint)
                else None
            ),
        )
        async with serving(client, task_queue):
            report, workflow_id = await drive_gated_run(
                page, screenshots, codec_stack.ui_url, client, task_queue
            )
            # What the UI showed in plain text is ciphertext in Temporal.
            raw = await Client.connect(codec_stack.temporal_address)
            history = await raw.get_workflow_handle(workflow_id).fetch_history()
            started = history.events[0].workflow_execution_started_event_attributes
            assert started.input.payloads[0].metadata["encoding"] == b"binary/encrypted"
            await page.get_by_role("tab", name="Timeline").click()
            await expect(page.get_by_role("textbox", name="Input")).to_contain_text(TEST_RUNBOOK)
            await screenshots.take(page, "input-decoded")
    assert_the_ui_vote_counted(report, vote)
    assert f"{codec_stack.codec_endpoint}/encode" in codec_calls, codec_calls
    assert f"{codec_stack.codec_endpoint}/decode" in codec_calls, codec_calls
