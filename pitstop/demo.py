"""`pitstop demo`: the embedded stack, a worker, and a runbook run end to end.

Gates are answered by a demo approver through the same `decide` Update path that the CLI,
Slack and the Temporal UI use (`--interactive` leaves them to a person instead). The stack
stays up afterwards so the run can be browsed in the Temporal UI; `pitstop dev down`
stops it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.live import Live
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from pitstop.bundle import collect
from pitstop.contracts import Decision, RunReport, RunRequest, RunStatus
from pitstop.devstack import DevStack, StackConfig
from pitstop.settings import Settings
from pitstop.views import report_view, status_view, ui_link

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class DemoScenario:
    runbook: Path
    inventory: Path
    approver: str
    expected_status: str = "succeeded"


DEFAULT_SCENARIO = DemoScenario(
    runbook=REPO / "runbooks" / "examples" / "gated-rollout.yaml",
    inventory=REPO / "runbooks" / "inventories" / "demo.yaml",
    approver="alice",
)


async def answer_gates(handle: WorkflowHandle[object, RunReport], approver: str, console: Console) -> None:
    """Approve every open gate once, as `approver`, through the `decide` Update."""
    answered: set[str] = set()
    while True:
        status = await handle.query("status", result_type=RunStatus)
        for gate in status.gates:
            gate_id = gate.rule.gate_id
            if gate.status != "open" or gate_id in answered:
                continue
            answered.add(gate_id)
            try:
                await handle.execute_update(
                    "decide",
                    Decision(
                        gate=gate_id,
                        approve=True,
                        approver=approver,
                        comment="approved by the demo approver",
                        source="demo",
                    ),
                    id=f"demo-{gate_id}",
                )
                console.print(f"[green]demo approver {approver} approved {gate_id}[/green]")
            except WorkflowUpdateFailedError as exc:
                console.print(f"[yellow]demo approver refused at {gate_id}: {exc.cause}[/yellow]")
        await asyncio.sleep(0.5)


async def run_demo(
    scenario: DemoScenario = DEFAULT_SCENARIO,
    *,
    interactive: bool = False,
    home: Path = Path(".pitstop"),
    console: Console | None = None,
) -> int:
    from pitstop.client import connect
    from worker import build_worker

    console = console or Console()
    started = time.monotonic()
    config = StackConfig.saved(home) or StackConfig.from_env(base=StackConfig(home=home))
    stack = DevStack(config)
    with console.status("starting the embedded stack (Temporal, S3, etcd)…"):
        stack.up()
    console.print(f"stack up in {time.monotonic() - started:.1f}s — Temporal UI {stack.ui_url}")
    settings = Settings(temporal_address=stack.temporal_address, home=home, ui_url=stack.ui_url)
    client: Client = await connect(settings)
    task_queue = f"pitstop-demo-{uuid.uuid4().hex[:6]}"
    files, runbook_name, inventory_name = collect(scenario.runbook, scenario.inventory)
    request = RunRequest(
        runbook=runbook_name, inventory=inventory_name, files=files, requested_by="demo-requester"
    )
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            "RunbookWorkflow", request, id=run_id, task_queue=task_queue, result_type=RunReport
        )
        link = ui_link(stack.ui_url, "default", run_id)
        console.print(f"run [bold]{run_id}[/bold]: {link}")
        approver = (
            None if interactive else asyncio.ensure_future(answer_gates(handle, scenario.approver, console))
        )
        if interactive:
            console.print(
                f"gates wait for you: `pitstop approve {run_id} --as <approver>` or the Temporal UI"
            )
        result = asyncio.ensure_future(handle.result())
        with Live(console=console, refresh_per_second=4, transient=True) as live:
            while not result.done():
                live.update(status_view(await handle.query("status", result_type=RunStatus)))
                await asyncio.wait([result], timeout=0.5)
        if approver is not None:
            approver.cancel()
        report = result.result()
    console.print(report_view(report))
    console.print(f"\nrun in the Temporal UI: {link}")
    console.print(
        f"finished in {time.monotonic() - started:.1f}s; the stack keeps running (`pitstop dev down`)."
    )
    return 0 if report.status == scenario.expected_status else 1
