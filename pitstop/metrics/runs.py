"""Runs by status and gates waiting, computed by the worker from what Temporal knows.

Workflow code never touches a metric (a replay must not count twice, and a metric is a side
effect). Instead a sweeper in the worker asks Temporal every `interval` seconds:

- visibility counts of `RunbookWorkflow`s on the worker's task queue, by the run's own status
  (the `PitstopStatus` search attribute each run keeps up to date) for open and completed
  runs, and by Temporal's execution status for runs that ended otherwise (terminated,
  timed out, cancelled, failed as a workflow);
- the `status` Query of each open run (at most `MAX_QUERIED` of them), for its open gates and
  when each opened.

The figures are Temporal's, so every worker of a task queue shows the same ones and a restart
loses nothing. A sweep that fails keeps the previous figures and says so in
`pitstop_runs_sweep_ok`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import get_args

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from temporalio.client import Client
from temporalio.service import RPCError

from pitstop.contracts import RunState, RunStatus

log = logging.getLogger("pitstop.metrics")

WORKFLOW_TYPE = "RunbookWorkflow"
DEFAULT_INTERVAL = 15.0
MAX_QUERIED = 200
RPC_TIMEOUT = timedelta(seconds=5)
OPEN_STATES = ("planning", "running", "waiting_gate", "paused", "rolling_back", "held")
CLOSED_STATES = tuple(s for s in get_args(RunState) if s not in OPEN_STATES)
# Runs that ended without the engine's own verdict: Temporal's word for how.
OTHER_ENDINGS = {
    "Terminated": "terminated",
    "TimedOut": "timed_out",
    "Canceled": "canceled",
    "Failed": "workflow_failed",
}


@dataclass(frozen=True)
class OpenGate:
    run_id: str
    gate: str
    opened_at: float  # unix seconds


@dataclass
class Snapshot:
    runs: dict[str, int] = field(default_factory=dict)
    gates: list[OpenGate] = field(default_factory=list)
    at: float | None = None
    ok: bool = False


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


async def _count(client: Client, query: str) -> int:
    return (await client.count_workflows(query, rpc_timeout=RPC_TIMEOUT)).count


async def sweep(client: Client, task_queue: str) -> Snapshot:
    """One look at the task queue's runs; RPCError when Temporal does not answer."""
    base = f"WorkflowType = {_quote(WORKFLOW_TYPE)} AND TaskQueue = {_quote(task_queue)}"
    runs: dict[str, int] = {}
    for state in OPEN_STATES:
        runs[state] = await _count(
            client, f"{base} AND ExecutionStatus = 'Running' AND PitstopStatus = '{state}'"
        )
    for state in CLOSED_STATES:
        runs[state] = await _count(
            client, f"{base} AND ExecutionStatus = 'Completed' AND PitstopStatus = '{state}'"
        )
    for temporal_status, state in OTHER_ENDINGS.items():
        runs[state] = await _count(client, f"{base} AND ExecutionStatus = '{temporal_status}'")
    gates: list[OpenGate] = []
    async for execution in client.list_workflows(
        f"{base} AND ExecutionStatus = 'Running'", limit=MAX_QUERIED, rpc_timeout=RPC_TIMEOUT
    ):
        try:
            status = await client.get_workflow_handle(execution.id).query(
                "status", result_type=RunStatus, rpc_timeout=RPC_TIMEOUT
            )
        except Exception as exc:  # a run that cannot answer now is looked at next sweep
            log.debug("run %s did not answer its status query: %s", execution.id, exc)
            continue
        gates.extend(
            OpenGate(run_id=execution.id, gate=g.rule.gate_id, opened_at=g.opened_at.timestamp())
            for g in status.gates
            if g.status == "open"
        )
    return Snapshot(runs=runs, gates=gates, at=time.time(), ok=True)


class RunsCollector(Collector):
    """Serves the latest snapshot; a gate's age is computed at scrape time."""

    def __init__(self) -> None:
        self.snapshot = Snapshot()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self.snapshot
        runs = GaugeMetricFamily(
            "pitstop_runs",
            "Runs on this worker's task queue by status (Temporal's visibility).",
            labels=["status"],
        )
        for state, count in sorted(snap.runs.items()):
            runs.add_metric([state], count)
        yield runs
        yield GaugeMetricFamily(
            "pitstop_gates_waiting", "Gates open and waiting for votes.", value=len(snap.gates)
        )
        now = time.time()
        ages = GaugeMetricFamily(
            "pitstop_gate_waiting_seconds",
            "How long the oldest open gate of each run and gate rule has waited (a per-host gate "
            "`name@host` counts under `name`: one series per rule, not per host).",
            labels=["run_id", "gate"],
        )
        oldest: dict[tuple[str, str], float] = {}
        for gate in snap.gates:
            key = (gate.run_id, gate.gate.split("@", 1)[0])
            oldest[key] = max(oldest.get(key, 0.0), now - gate.opened_at)
        for (run_id, rule), age in sorted(oldest.items()):
            ages.add_metric([run_id, rule], max(0.0, age))
        yield ages
        yield GaugeMetricFamily(
            "pitstop_gate_oldest_waiting_seconds",
            "Age of the oldest open gate (0: none).",
            value=max((now - g.opened_at for g in snap.gates), default=0.0),
        )
        yield GaugeMetricFamily(
            "pitstop_runs_sweep_ok",
            "1 when the last look at Temporal succeeded.",
            value=1.0 if snap.ok else 0.0,
        )
        if snap.at is not None:
            yield GaugeMetricFamily(
                "pitstop_runs_sweep_timestamp_seconds",
                "When runs and gates were last counted.",
                value=snap.at,
            )


async def sweep_forever(
    client: Client, task_queue: str, collector: RunsCollector, interval: float = DEFAULT_INTERVAL
) -> None:
    """Refresh `collector` every `interval` seconds until cancelled."""
    while True:
        try:
            collector.snapshot = await sweep(client, task_queue)
        except (RPCError, RuntimeError, OSError) as exc:
            log.warning("runs and gates not counted this time: %s", exc)
            collector.snapshot = Snapshot(
                runs=collector.snapshot.runs,
                gates=collector.snapshot.gates,
                at=collector.snapshot.at,
                ok=False,
            )
        await asyncio.sleep(interval)
