"""A run survives SIGKILL of its worker: every task completes exactly once per host.

The worker is a real process (`python -m tests.worker_for_tests`), killed with SIGKILL twice
and restarted each time: once while hosts are in the middle of an activity, once while the
stage's `after` gate waits for approval. The gate is then approved through the `decide`
Update, served by the third worker process.

What is counted: `test.durable_step` appends `start` and `done` lines to a file (fsynced,
so nothing is lost with the process). `done` is written just before the activity returns,
so it means "this call completed". A call killed mid-way leaves a `start` line without
its `done`; Temporal retries it (heartbeat timeout) and the retry writes the one `done`.
"Exactly once" is therefore "completed exactly once": the engine neither lost a task nor
scheduled one twice, whatever the kills interrupted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

from pitstop.contracts import Decision, RunReport, RunRequest
from pitstop.settings import Settings
from tests.conftest import REPO_ROOT
from tests.integration.engine.conftest import hosts_inventory, write_bundle
from tests.multicluster import wait_for
from tests.testmodules import CALL_LOG_ENV, HOLD_FILE_ENV
from tests.worker_for_tests import READY_LINE

HOSTS = 20
DURABLE_TASKS_PER_HOST = 3  # drain + upgrade in `fleet`, verify in `verify`
STATUS_KEY = SearchAttributeKey.for_keyword("PitstopStatus")

RUNBOOK = """
name: durability
approvers:
  sre: [alice]
stages:
  - name: fleet
    hosts: gpu
    rolling: {max_in_flight: 4}
    gate: {after: true, approvers: sre}
    tasks:
      - name: drain
        test.durable_step: {sleep: 0.3}
      - debug: {msg: "drained {{ inventory_hostname }}"}
      - name: upgrade
        test.durable_step: {sleep: 0.2}
  - name: verify
    hosts: gpu
    rolling: {max_in_flight: 10}
    tasks:
      - name: verify
        test.durable_step: {}
"""

Call = tuple[str, str]  # (host, task path)


class WorkerProcess:
    """`python -m tests.worker_for_tests` on one task queue, started and SIGKILLed at will."""

    def __init__(self, settings: Settings, task_queue: str, workdir: Path) -> None:
        self.env = {
            **os.environ,
            "TEMPORAL_ADDRESS": settings.temporal_address,
            "TEMPORAL_NAMESPACE": settings.temporal_namespace,
            "PITSTOP_TASK_QUEUE": task_queue,
            CALL_LOG_ENV: str(workdir / "calls.log"),
            HOLD_FILE_ENV: str(workdir / "hold"),
        }
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def output(self) -> Path:
        return self.workdir / f"worker-{self.starts}.out"

    def spawn(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        with self.output.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.worker_for_tests"],
                cwd=REPO_ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return self.proc

    async def start(self, seconds: float = 30.0) -> None:
        """Spawn the worker and wait until it polls its task queue."""
        proc = self.spawn()

        async def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"test worker exited with {proc.returncode}")
            return READY_LINE in self.output.read_text(errors="replace")

        try:
            await wait_for("the test worker to start", ready, seconds)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its output:\n{self.tail()}") from None

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, in-flight activities and workflow tasks are lost."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def tail(self, lines: int = 30) -> str:
        text = self.output.read_text(errors="replace") if self.output.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class CallLog:
    """The `start`/`done` lines written by `test.durable_step` in every worker process."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self, event: str) -> list[tuple[str, str, int]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            kind, host, task, attempt = line.split("\t")
            if kind == event:
                out.append((host, task, int(attempt)))
        return out

    def completed(self) -> Counter[Call]:
        return Counter((host, task) for host, task, _ in self.lines("done"))

    def interrupted(self) -> set[tuple[str, str, int]]:
        """Attempts that started and never completed: the ones a kill cut short."""
        return set(self.lines("start")) - set(self.lines("done"))


@pytest.fixture
def worker_process(temporal_settings: Settings, task_queue: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    proc = WorkerProcess(temporal_settings, task_queue, tmp_path)
    yield proc
    proc.kill()


async def run_status(handle: WorkflowHandle[object, RunReport]) -> str | None:
    # From the server's search attributes, so it is readable while no worker is alive.
    description = await handle.describe()
    return description.typed_search_attributes.get(STATUS_KEY)


async def approve(handle: WorkflowHandle[object, RunReport], gate: str, seconds: float = 45.0) -> None:
    """Vote through the `decide` Update; retried while the restarted worker takes the workflow over."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            await handle.execute_update(
                "decide",
                Decision(gate=gate, approve=True, approver="alice", comment="fleet looks healthy"),
            )
            return
        # Only transport errors are retried: a refused vote is a failure of the test.
        except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


@pytest.mark.timeout(150)
async def test_run_survives_worker_kills_and_completes_every_task_exactly_once(
    temporal_client: Client, worker_process: WorkerProcess, task_queue: str, tmp_path: Path
) -> None:
    files = write_bundle(tmp_path / "bundle", RUNBOOK, hosts_inventory(HOSTS))
    calls = CallLog(tmp_path / "calls.log")
    hold = tmp_path / "hold"
    await worker_process.start()
    handle: WorkflowHandle[object, RunReport] = await temporal_client.start_workflow(
        "RunbookWorkflow",
        RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files, requested_by="requester"),
        id=f"durability-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=RunReport,
        execution_timeout=timedelta(minutes=3),
    )

    # Kill 1: hosts in flight. Hold completions first, so the kill lands while calls are
    # certainly mid-way (started, not completed) rather than between completing and reporting.
    async def some_hosts_done() -> bool:
        return len(calls.lines("done")) >= 8

    await wait_for("the first hosts to complete", some_hosts_done)
    hold.touch()
    await asyncio.sleep(0.5)  # any call already past the hold check completes meanwhile

    async def calls_held() -> bool:
        return bool(calls.interrupted())

    await wait_for("calls to be held mid-way", calls_held)
    done_before_kill = len(calls.lines("done"))
    assert done_before_kill < HOSTS * 2, "the first stage finished before the kill; nothing was in flight"
    worker_process.kill()
    killed_mid_way = calls.interrupted()
    hold.unlink()
    await worker_process.start()

    # Kill 2: the `after` gate of `fleet` is waiting for approval.
    async def gate_pending() -> bool:
        return await run_status(handle) == "waiting_gate"

    await wait_for("the fleet:after gate to open", gate_pending, seconds=60)
    # Every `fleet` call completed once, and nothing of `verify` ran before the approval.
    assert len(calls.completed()) == HOSTS * 2
    assert set(calls.completed().values()) == {1}
    worker_process.kill()
    await worker_process.start()
    await approve(handle, "fleet:after")

    report = await asyncio.wait_for(handle.result(), timeout=90)

    assert report.status == "succeeded", report.msg
    for stage in report.stages:
        assert sorted(h.host for h in stage.hosts) == [f"h{i:02d}" for i in range(HOSTS)], stage.name
        assert {h.host: h.status for h in stage.hosts} == {f"h{i:02d}": "ok" for i in range(HOSTS)}
    # Each host ran its whole task list once, the in-workflow `debug` included.
    assert {tuple(t.name for t in h.tasks) for h in report.stages[0].hosts} == {("drain", "debug", "upgrade")}
    gate = next(g for g in report.gates if g.rule.gate_id == "fleet:after")
    assert gate.status == "approved"
    assert [v.approver for v in gate.votes] == ["alice"]

    expected = {
        (h.host, t.task_id)
        for stage in report.stages
        for h in stage.hosts
        for t in h.tasks
        if t.module == "test.durable_step"
    }
    assert len(expected) == HOSTS * DURABLE_TASKS_PER_HOST
    assert calls.completed() == Counter(dict.fromkeys(expected, 1))
    # The first kill really interrupted calls, and each of those was retried to completion.
    assert killed_mid_way
    for host, task, attempt in killed_mid_way:
        retried = [a for h, t, a in calls.lines("done") if (h, t) == (host, task)]
        assert retried and retried[0] > attempt, (host, task, attempt, retried)
