"""`pitstop run` prints the UI link of the stack in use: the session's stack runs its UI on a
free port, never 8233, and nothing but the stack's own state in PITSTOP_HOME says which."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pitstop.cli.app import build_app
from pitstop.client import connect
from pitstop.devstack import DevStack
from pitstop.settings import Settings


def test_pitstop_run_prints_the_link_of_the_stacks_own_ui_port(
    stack: DevStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_queue: str
) -> None:
    assert stack.config.ui_port != 8233
    monkeypatch.setenv("PITSTOP_HOME", str(stack.home))
    monkeypatch.setenv("TEMPORAL_ADDRESS", stack.temporal_address)
    monkeypatch.setenv("PITSTOP_TASK_QUEUE", task_queue)  # no worker: the run just waits
    for name in ("PITSTOP_UI_URL", "PITSTOP_UI_PORT"):
        monkeypatch.delenv(name, raising=False)
    runbook = tmp_path / "hello.yaml"
    runbook.write_text("name: hello\nhosts: localhost\ntasks:\n  - debug: {msg: hi}\n")
    run_id = f"ui-link-{uuid.uuid4().hex[:8]}"

    result = CliRunner().invoke(build_app(["run"]), ["run", str(runbook), "--id", run_id])

    try:
        assert result.exit_code == 0, result.output
        printed = "".join(result.output.split())  # rich may wrap the line before the link
        assert f"{stack.ui_url}/namespaces/default/workflows/{run_id}" in printed
        assert ":8233/" not in printed
    finally:
        asyncio.run(_terminate(stack, run_id))


async def _terminate(stack: DevStack, run_id: str) -> None:
    client = await connect(Settings(temporal_address=stack.temporal_address, home=stack.home), tracing=False)
    await client.get_workflow_handle(run_id).terminate("test over")
