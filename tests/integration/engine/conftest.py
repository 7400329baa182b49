"""Engine fixtures: a worker serving RunbookWorkflow/HostWorkflow plus the test modules,
and a helper that writes a runbook + inventory and runs it to the end."""

from __future__ import annotations

import asyncio
import textwrap
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from activities import ACTIVITIES
from pitstop.contracts import RunReport, RunRequest, RunStatus
from pitstop.worker_app import build_worker
from tests import testmodules
from workflows import WORKFLOWS

RunFn = Callable[..., Awaitable[RunReport]]
StartFn = Callable[..., Awaitable[WorkflowHandle[Any, RunReport]]]


@pytest.fixture
async def engine_worker(temporal_client: Client, task_queue: str) -> AsyncIterator[str]:
    testmodules.CALLS.clear()
    testmodules.RECORDS.clear()
    worker = build_worker(
        temporal_client,
        task_queue,
        workflows=WORKFLOWS,
        activities=[*ACTIVITIES, *testmodules.TEST_ACTIVITIES],
    )
    async with worker:
        yield task_queue


def write_bundle(
    tmp_path: Path, runbook: str, inventory: str | None, extra: dict[str, str] | None = None
) -> dict[str, str]:
    files = {"runbook.yaml": textwrap.dedent(runbook)}
    if inventory is not None:
        files["inventory.yaml"] = textwrap.dedent(inventory)
    for name, text in (extra or {}).items():
        files[name] = textwrap.dedent(text)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return files


def hosts_inventory(n: int, domains: int = 1, group: str = "gpu") -> str:
    lines = ["all:", "  children:", f"    {group}:", "      hosts:"]
    for i in range(n):
        lines.append(f"        h{i:02d}: {{failure_domain: d{i % domains}}}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def start_run(temporal_client: Client, engine_worker: str, tmp_path: Path) -> StartFn:
    async def start(
        runbook: str,
        inventory: str | None = None,
        *,
        extra_files: dict[str, str] | None = None,
        requested_by: str = "requester",
        **request: Any,
    ) -> WorkflowHandle[Any, RunReport]:
        files = write_bundle(tmp_path, runbook, inventory, extra_files)
        req = RunRequest(
            runbook="runbook.yaml",
            inventory="inventory.yaml" if inventory is not None else None,
            files=files,
            requested_by=requested_by,
            **request,
        )
        return await temporal_client.start_workflow(
            "RunbookWorkflow",
            req,
            id=f"run-{uuid.uuid4().hex[:10]}",
            task_queue=engine_worker,
            result_type=RunReport,
        )

    return start


@pytest.fixture
def run(start_run: StartFn) -> RunFn:
    async def run_to_end(runbook: str, inventory: str | None = None, **kw: Any) -> RunReport:
        handle = await start_run(runbook, inventory, **kw)
        return await handle.result()

    return run_to_end


async def status_when(
    handle: WorkflowHandle[Any, RunReport], predicate: Callable[[RunStatus], bool], within: float = 20.0
) -> RunStatus:
    """Poll the `status` query until `predicate` holds (the run moves on its own)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        status = await handle.query("status", result_type=RunStatus)
        if predicate(status):
            return status
        if loop.time() > deadline:
            raise AssertionError(f"status never matched; last: {status.model_dump_json(indent=1)}")
        await asyncio.sleep(0.05)
