"""A cluster's own worker: `python worker.py --activities-only` on the cluster's task queue runs
the module tasks of runs whose inventory names that queue, while the workflows run on the
central worker; without it the run waits (and `pitstop status` says why), and when it dies
mid-run a new one finishes the run, every task once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from pitstop.contracts import RunReport
from pitstop.settings import Settings
from tests.integration.engine.conftest import StartFn, start_run
from tests.multicluster import (
    ClusterWorker,
    completed_calls,
    inventory_text,
    module_identities,
    started_calls,
    wait_for,
)

__all__ = ["start_run"]

PITSTOP = Path(sys.executable).parent / "pitstop"
HOSTS = [f"h{i:02d}" for i in range(4)]
TASKS = ("drain", "upgrade")
RUNBOOK = """
name: edge-maintenance
stages:
  - name: fleet
    hosts: gpu
    rolling: {max_in_flight: 2}
    tasks:
      - name: drain
        test.durable_step: {sleep: 0.2}
      - name: upgrade
        test.durable_step: {sleep: 0.2}
"""
WAITING = "waiting: no worker is polling task queue"


def status_text(settings: Settings, run_id: str) -> str:
    """`pitstop status RUN_ID` as an operator runs it, against the session's stack."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "TEMPORAL_NAMESPACE": settings.temporal_namespace,
        "PITSTOP_MODULES": "tests.testmodules",
        "COLUMNS": "250",
    }
    out = subprocess.run(
        [str(PITSTOP), "status", run_id], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


async def status_saying(settings: Settings, run_id: str, text: str, seconds: float) -> str:
    said = ""

    async def says() -> bool:
        nonlocal said
        # In a thread: the central worker runs on this event loop and answers the status query.
        said = await asyncio.to_thread(status_text, settings, run_id)
        return text in said

    try:
        await wait_for(f"`pitstop status` to say {text!r}", says, seconds)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it said:\n{said}") from None
    return said


def assert_each_task_once(log: Path) -> None:
    done = completed_calls(log)
    assert {key[0] for key in done} == set(HOSTS), done
    assert len(done) == len(HOSTS) * len(TASKS), done
    assert set(done.values()) == {1}, f"a task completed more than once: {done}"


async def start(start_run: StartFn, worker: ClusterWorker) -> WorkflowHandle[Any, RunReport]:
    return await start_run(RUNBOOK, inventory_text("edge", worker.task_queue, HOSTS))


@pytest.mark.timeout(120)
async def test_module_tasks_run_on_the_clusters_activities_only_worker(
    temporal_client: Client, start_run: StartFn, cluster_worker: ClusterWorker, tmp_path: Path
) -> None:
    await cluster_worker.start(temporal_client)
    handle = await start(start_run, cluster_worker)
    report = await asyncio.wait_for(handle.result(), timeout=90)

    assert report.status == "succeeded", report.model_dump_json(indent=1)
    assert_each_task_once(tmp_path / "calls.log")
    # History names who ran each module task: the cluster's worker process, never the central
    # worker (this process), which runs the workflows and serves its own queue.
    identities = await module_identities(temporal_client, handle)
    assert set(identities) == {"module.test.durable_step"}, identities
    assert all(cluster_worker.owns(who) for who in identities["module.test.durable_step"]), identities
    assert not any(who.startswith(f"{os.getpid()}@") for who in identities["module.test.durable_step"])
    # The worker said, at start, what it serves and where.
    said = cluster_worker.output.read_text()
    assert f"worker serving task queue '{cluster_worker.task_queue}'" in said, said
    assert "activities only" in said, said


@pytest.mark.timeout(150)
async def test_a_run_whose_cluster_has_no_worker_waits_and_says_so(
    temporal_client: Client,
    temporal_settings: Settings,
    start_run: StartFn,
    cluster_worker: ClusterWorker,
    tmp_path: Path,
) -> None:
    handle = await start(start_run, cluster_worker)

    said = await status_saying(temporal_settings, handle.id, WAITING, seconds=45)
    assert f"'{cluster_worker.task_queue}' (cluster edge)" in said, said
    assert "--activities-only" in said, said
    # Waiting, not failing: the run is open and nothing ran.
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    assert started_calls(tmp_path / "calls.log") == 0

    await cluster_worker.start(temporal_client)
    report = await asyncio.wait_for(handle.result(), timeout=90)
    assert report.status == "succeeded", report.model_dump_json(indent=1)
    assert_each_task_once(tmp_path / "calls.log")
    assert WAITING not in await asyncio.to_thread(status_text, temporal_settings, handle.id)


# The server lists a dead worker's poller until it has not polled for a long-poll's length
# (pitstop.cluster_queue.LIVE_WITHIN, 75 s): the status says so that long after the kill.
@pytest.mark.timeout(300)
async def test_killed_cluster_worker_the_run_waits_and_a_new_one_finishes_it_once(
    temporal_client: Client,
    temporal_settings: Settings,
    start_run: StartFn,
    cluster_worker: ClusterWorker,
    tmp_path: Path,
) -> None:
    log, hold = tmp_path / "calls.log", tmp_path / "hold"
    hold.touch()  # calls wait before completing: the kill lands while they run
    await cluster_worker.start(temporal_client)
    handle = await start(start_run, cluster_worker)

    async def in_flight() -> bool:
        return started_calls(log) >= 2

    await wait_for("calls in flight on the cluster worker", in_flight)
    assert WAITING not in await asyncio.to_thread(status_text, temporal_settings, handle.id)
    cluster_worker.kill()
    assert not completed_calls(log), "a call completed before the kill: nothing was cut short"

    said = await status_saying(temporal_settings, handle.id, WAITING, seconds=150)
    assert f"'{cluster_worker.task_queue}' (cluster edge)" in said, said
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING

    hold.unlink()
    await cluster_worker.start(temporal_client)
    report = await asyncio.wait_for(handle.result(), timeout=90)
    assert report.status == "succeeded", report.model_dump_json(indent=1)
    assert_each_task_once(log)
    identities = await module_identities(temporal_client, handle)
    assert all(cluster_worker.owns(who) for who in identities["module.test.durable_step"]), identities
