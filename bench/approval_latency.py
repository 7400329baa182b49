"""Approval latency: from a Slack click to the start of the activity the gate was holding back.

On the README's path, each piece its own process: the embedded stack (`pitstop dev up` in a
temporary PITSTOP_HOME on free ports), `python worker.py` serving the benchmark's no-op module
(`bench/_common.py`, a regular activity), and the Slack bridge (`pitstop slack serve`). One run
of GATES stages, each behind a `before` gate with one host and one `bench.noop` task. For each
gate: wait until the engine has posted its Slack message (to a local recording server standing
in for Slack's Web API), then click Approve the way Slack does: a signed `block_actions` POST to
the bridge over a connection kept open, as Slack's senders keep theirs.

Latency = the step activity's start (its ActivityTaskStarted event: when the server handed the
task to the worker) minus the moment the click was sent; both are this machine's wall clock.
Where it goes, per hop (medians), from the run's and the host's histories:
  bridge     click -> the server schedules the workflow task carrying the `decide` Update
             (HTTP, Slack signature check, approver mapping, vote signing, the Update RPC)
  vote       that task -> Update accepted (the worker checks the vote's signature, the gate rules)
  stage      accepted -> the host's workflow started (host input signed, child started)
  host       started -> its first workflow task done (the input's signature checked)
  dispatch   -> the activity handed to the worker

Prints median and p99 and PASS/MISS against a p99 under TARGET_P99_MS; asserts nothing about
timing (a loaded machine makes MISS, not an error).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import NOOP_MODULE  # noqa: E402
from _fleet_procs import PITSTOP, WorkerProcess, pitstop_cli, stack_env, stop  # noqa: E402

from pitstop.client import connect  # noqa: E402
from pitstop.contracts import RunReport, RunRequest  # noqa: E402
from pitstop.devstack import free_port  # noqa: E402
from pitstop.settings import Settings  # noqa: E402
from tests.integration.slack.slackfake import BOT_TOKEN, SIGNING_SECRET, Clicker, FakeSlack  # noqa: E402

GATES = 30
TARGET_P99_MS = 100.0  # issue 16: p99 <= 100 ms on the dev server
APPROVER_ID = "U0BENCHBOB"
HOPS = ("bridge", "vote", "stage", "host", "dispatch")


def runbook(gates: int) -> str:
    stages = "".join(
        f"""
  - name: s{i:02d}
    hosts: all
    gate: {{before: true, approvers: sre}}
    tasks:
      - {NOOP_MODULE}: {{}}"""
        for i in range(gates)
    )
    return f"name: approval-latency\napprovers:\n  sre: [bob]\nstages:{stages}\n"


@dataclass
class Gate:
    stage: str
    clicked: float  # wall clock, seconds
    hops: dict[str, float]  # hop -> seconds

    @property
    def total_ms(self) -> float:
        return sum(self.hops.values()) * 1000


def start_bridge(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [PITSTOP, "slack", "serve", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--log-level", "WARNING"]
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)


async def wait_healthy(url: str, bridge: subprocess.Popen[bytes], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    async with httpx.AsyncClient(timeout=1) as client:
        while time.monotonic() < deadline:
            if bridge.poll() is not None:
                raise RuntimeError(f"the bridge exited with {bridge.returncode}")
            try:
                if (await client.get(url)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"the bridge did not answer {url} within {within}s")


def _at(event: HistoryEvent) -> float:
    return event.event_time.ToDatetime().timestamp() + 0.0


async def _events(client: Client, workflow_id: str) -> list[HistoryEvent]:
    return [e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()]


async def hops(client: Client, run_id: str, clicks: list[tuple[str, float]]) -> list[Gate]:
    """Each gate's hops from the run's history and its host's (read after the run ended)."""
    run = await _events(client, run_id)
    accepted = [
        i for i, e in enumerate(run) if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    if len(accepted) != len(clicks):
        raise RuntimeError(f"{len(clicks)} clicks but {len(accepted)} accepted Updates in the run's history")
    gates = []
    for (stage, clicked), at in zip(clicks, accepted, strict=True):
        carried = max(
            i for i in range(at) if run[i].HasField("workflow_task_scheduled_event_attributes")
        )  # the task that carried the Update
        host_id = f"{run_id}/{stage}/h00"
        host = await _events(client, host_id)
        first_done = next(e for e in host if e.HasField("workflow_task_completed_event_attributes"))
        step = next(e for e in host if e.HasField("activity_task_started_event_attributes"))
        hop_ends = [_at(run[carried]), _at(run[at]), _at(host[0]), _at(first_done), _at(step)]
        starts = [clicked, *hop_ends[:-1]]
        gates.append(Gate(stage, clicked, {h: e - s for h, s, e in zip(HOPS, starts, hop_ends, strict=True)}))
    return gates


async def measure(env: dict[str, str], slack: FakeSlack, clicker: Clicker, gates: int) -> list[Gate]:
    client = await connect(Settings.from_env(env), tracing=False)
    request = RunRequest(
        runbook="runbook.yaml",
        inventory="inventory.yaml",
        files={"runbook.yaml": runbook(gates), "inventory.yaml": "all:\n  hosts:\n    h00: {}\n"},
        requested_by="requester",
    )
    run_id = f"approval-latency-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        "RunbookWorkflow", request, id=run_id, task_queue=env["PITSTOP_TASK_QUEUE"], result_type=RunReport
    )
    clicks: list[tuple[str, float]] = []
    for i in range(gates):
        stage = f"s{i:02d}"
        posted = await slack.wait_for(
            "chat.postMessage", lambda c, s=stage: f"Approval needed: {s}:before" in c.args["text"], within=60
        )
        clicked = time.time()
        response = await clicker.click(posted, APPROVER_ID)
        if response.status_code != 200:
            raise RuntimeError(f"the bridge answered {response.status_code} to a signed click")
        clicks.append((stage, clicked))
    report = await handle.result()
    if report.status != "succeeded":
        raise RuntimeError(f"the run ended {report.status}: {report.msg}")
    return await hops(client, run_id, clicks)


async def bench(gates: int) -> list[Gate]:
    with tempfile.TemporaryDirectory(prefix="pitstop-bench-approval-") as tmp:
        home = Path(tmp)
        slack = FakeSlack()
        await slack.start()
        approvers = home / "approvers.yaml"
        approvers.write_text(f"users: {{{APPROVER_ID}: bob}}\n")
        pythonpath = (str(REPO / "bench"), os.environ.get("PYTHONPATH", ""))
        env = {
            **stack_env(home),
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": slack.api_url,
            "SLACK_DEFAULT_CHANNEL": "#bench",
            "PITSTOP_SLACK_APPROVERS": str(approvers),
            "OTEL_TRACES_EXPORTER": "none",
            # The worker serves the benchmark's no-op module (a regular activity).
            "PITSTOP_MODULES": "_common",
            "PYTHONPATH": os.pathsep.join(p for p in pythonpath if p),
        }
        worker = WorkerProcess(env, home)
        bridge: subprocess.Popen[bytes] | None = None
        try:
            pitstop_cli(env, "dev", "up", timeout=180)
            worker.start()
            port = free_port()
            bridge = start_bridge(env, port, home / "logs" / "bridge.log")
            await wait_healthy(f"http://127.0.0.1:{port}/healthz", bridge)
            async with httpx.AsyncClient(timeout=10) as http:
                clicker = Clicker(url=f"http://127.0.0.1:{port}/slack/events", http=http)
                return await measure(env, slack, clicker, gates)
        finally:
            await slack.stop()
            if bridge is not None:
                stop(bridge)
            worker.stop()
            pitstop_cli(env, "dev", "down", timeout=120)


def report(gates: list[Gate]) -> None:
    latencies = [g.total_ms for g in gates]
    median = statistics.median(latencies)
    p99 = statistics.quantiles(latencies, n=100, method="inclusive")[98]
    verdict = "PASS" if p99 < TARGET_P99_MS else "MISS"
    print(f"approval latency over {len(latencies)} gates (Slack click -> next activity starts)")
    print(
        f"  median {median:7.1f} ms   p99 {p99:7.1f} ms   min {min(latencies):.1f}   max {max(latencies):.1f}"
    )
    print("  where it goes (median ms): " + "  ".join(
        f"{h} {statistics.median(g.hops[h] for g in gates) * 1000:.1f}" for h in HOPS
    ))  # fmt: skip
    print(f"  target p99 < {TARGET_P99_MS:.0f} ms: {verdict}")


def main() -> int:
    gates = int(sys.argv[1]) if len(sys.argv) > 1 else GATES
    report(asyncio.run(bench(gates)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
