"""`pitstop demo`: the embedded stack, the rehearsal cluster, a worker, and the GPU node
maintenance runbook end to end (see `pitstop/demo/maintenance.py`).

Gates are answered by a demo approver through the same `decide` Update path that the CLI,
Slack and the Temporal UI use (`--interactive` leaves them to a person instead). The demo runs
next to the embedded stack, which holds the vote key (`.pitstop/keys/vote.key`): it signs its
start request and its votes with it as the Slack bridge would (subject `demo:<name>`), so its
votes are verified and count on gates with `require_verified`. The stack stays up afterwards
so the run can be browsed in the Temporal UI; `pitstop dev down` stops it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.worker import Interceptor

from pitstop.bundle import collect
from pitstop.contracts import Decision, RunReport, RunRequest
from pitstop.devstack import DevStack, StackConfig
from pitstop.keys import KeyRing
from pitstop.proofs import sign_request, signed_decision
from pitstop.settings import Settings
from pitstop.views import report_view, status_view, styled, ui_link
from workflows.runbook import RunbookWorkflow

if TYPE_CHECKING:
    from pitstop.demo.prometheus_watch import CordonWatch
    from pitstop.metrics.worker import WorkerMetrics
    from pitstop.worker_app import WorkerKeys


def demo_vote(vote_key: KeyRing | None, run_id: str, gate_id: str, approver: str) -> Decision:
    """The demo approver's vote: signed as the Slack bridge signs (when the vote key is here)."""
    comment = "approved by the demo approver"
    if vote_key is None:
        return Decision(gate=gate_id, approve=True, approver=approver, comment=comment, source="demo")
    return signed_decision(
        vote_key,
        run=run_id,
        gate=gate_id,
        approve=True,
        approver=approver,
        subject=f"demo:{approver}",
        click=f"demo-{run_id}-{gate_id}",
        comment=comment,
    )


async def answer_gates(
    handle: WorkflowHandle[Any, RunReport],
    approver: str,
    console: Console,
    vote_key: KeyRing | None = None,
) -> None:
    """Approve every open gate once, as `approver`, through the `decide` Update."""
    answered: set[str] = set()
    while True:
        status = await handle.query(RunbookWorkflow.status)
        for gate in status.gates:
            gate_id = gate.rule.gate_id
            if gate.status != "open" or gate_id in answered:
                continue
            answered.add(gate_id)
            try:
                # (The SDK types an async Update's result as its coroutine: nothing left unawaited.)
                _ = await handle.execute_update(
                    RunbookWorkflow.decide,
                    demo_vote(vote_key, handle.id, gate_id, approver),
                    id=f"demo-{gate_id}",
                )
                console.print(f"[green]demo approver {approver} approved {gate_id}[/green]")
            except WorkflowUpdateFailedError as exc:
                console.print(f"[yellow]demo approver refused at {gate_id}: {exc.cause}[/yellow]")
        await asyncio.sleep(0.5)


async def run_demo(
    *,
    interactive: bool = False,
    home: Path = Path(".pitstop"),
    console: Console | None = None,
    approver: str = "alice",
    codec: bool = False,
) -> int:
    """The maintenance runbook on the rehearsal cluster; 0 when the run behaved as it says.

    Payloads are encrypted when `codec` asks for it or the home already has its key file
    (`pitstop dev up --codec`); otherwise not, so the demo's history reads as plain JSON."""
    from pitstop.client import connect, encryption_summary
    from pitstop.demo import maintenance as dm
    from pitstop.runbook import load_runbook
    from pitstop.worker_app import WorkerKeys

    # Reboots cut SSH connections on purpose; paramiko would log each as an error.
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    # Wide enough for the per-node table even when the output is not a terminal (CI logs).
    console = console or Console(width=None if Console().is_terminal else 160)
    started = time.monotonic()
    stack = _start_stack(home, codec, console, started)
    watch, metrics = _watch_with_prometheus(stack, console)
    workdir = home / "demo" / time.strftime("%Y%m%d-%H%M%S")
    with console.status("starting the rehearsal cluster (12 GPU nodes, 3 failure domains, SSH per node)…"):
        sim = dm.start_cluster(workdir)
    try:
        inventory = dm.write_inventory(sim, workdir / "inventory.yaml")
        dm.apply_environment(dm.worker_environment(sim, workdir))
        console.print(f"rehearsal cluster at {sim.url} (kubeconfig {sim.kubeconfig_path})")
        runbook = load_runbook(dm.RUNBOOK)
        target = str(runbook.vars["firmware_target"])
        limits = [s.rolling.max_unavailable_per_domain for s in runbook.stages if s.rolling]
        per_domain_limit = max((limit for limit in limits if limit is not None), default=1)
        # The stack's home, so the client finds its codec key file as every process of that home does.
        settings = Settings(temporal_address=stack.temporal_address, home=stack.home, ui_url=stack.ui_url)
        client: Client = await connect(settings)
        console.print(f"payload encryption: {encryption_summary(client.data_converter)}")
        run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
        keys = WorkerKeys.load(stack.home)
        request = _request(dm.RUNBOOK, inventory, keys.vote, run_id, stack.s3_endpoint)
        sample = (lambda: watch.sample(sim)) if watch is not None else None
        interceptors = metrics.interceptors if metrics is not None else []
        report, link = await _follow_run(
            client, request, run_id, stack, keys, console, interactive, approver, interceptors, sample
        )
        verdict = dm.judge(sim, report, target, per_domain_limit)
        if watch is not None:
            console.print(watch.said())
            if not watch.matched:
                verdict.problems.append(watch.said())
    finally:
        sim.stop()
        if metrics is not None:
            metrics.stop()
    _print_outcome(console, report, verdict, link, started)
    await _write_report(client, run_id, stack.home / "reports", console)
    return 0 if verdict.ok else 1


async def _write_report(client: Client, run_id: str, out: Path, console: Console) -> None:
    """The run's report (`pitstop report`), read back through Temporal as the CLI reads it.
    A report that cannot be written is said, and does not change the demo's verdict."""
    from pitstop.report.source import ReportSourceError, read_run
    from pitstop.report.write import write_report

    try:
        files = write_report(await read_run(client, run_id), out)
    except (ReportSourceError, OSError) as exc:
        console.print(f"[yellow]no run report: {exc}[/yellow]")
        return
    console.print(f"run report: {files.html} (Markdown and pictures beside it: {files.markdown.name})")


def _start_stack(home: Path, codec: bool, console: Console, started: float) -> DevStack:
    """The embedded stack of `home` (saved or from the environment), up, and this process on it;
    with its Prometheus when Debian's `prometheus` is installed (the demo goes on without it)."""
    from pitstop.demo import prometheus_watch

    config = StackConfig.saved(home) or StackConfig.from_env(base=StackConfig(home=home))
    if codec:
        config = config.model_copy(update={"codec": True})
    if prometheus_watch.available() and "prometheus" not in config.parts:
        with_prometheus = DevStack(config.model_copy(update={"parts": (*config.parts, "prometheus")}))
        try:
            with console.status("starting the embedded stack (Temporal, S3, etcd, Prometheus)…"):
                with_prometheus.up()
        except Exception as exc:  # a taken port, a broken package: the demo runs without it
            console.print(
                f"[yellow]the stack's Prometheus did not start ({exc}); going on without it[/yellow]"
            )
        else:
            return _on_stack(with_prometheus, console, started)
    stack = DevStack(config)
    with console.status("starting the embedded stack (Temporal, S3, etcd)…"):
        stack.up()
    return _on_stack(stack, console, started)


def _on_stack(stack: DevStack, console: Console, started: float) -> DevStack:
    # The in-process worker runs under the policy `up` wrote into the stack's home, and the
    # rehearsal cluster is registered with it there, as with a worker started by hand.
    os.environ["PITSTOP_HOME"] = str(stack.home)
    console.print(f"stack up in {time.monotonic() - started:.1f}s — Temporal UI {stack.ui_url}")
    return stack


def _request(
    runbook: Path, inventory: Path, vote_key: KeyRing | None, run_id: str, s3_endpoint: str
) -> RunRequest:
    """The run's request (its report goes to the stack's S3 as its last task), signed as the
    demo requester when the vote key is here."""
    from pitstop.demo import maintenance as dm

    files, runbook_name, inventory_name = collect(runbook, inventory)
    request = RunRequest(
        runbook=runbook_name,
        inventory=inventory_name,
        files=files,
        vars={**dm.REHEARSAL_VARS, **dm.report_vars(s3_endpoint)},
        requested_by="demo-requester",
    )
    if vote_key is not None:
        request = sign_request(vote_key, request, run=run_id, subject="demo:demo-requester")
    return request


def _watch_with_prometheus(
    stack: DevStack, console: Console
) -> tuple[CordonWatch | None, WorkerMetrics | None]:
    """With the stack's Prometheus: the worker's /metrics where it scrapes, and a watch that
    compares its count of cordoned nodes with the cluster's while the run goes."""
    if "prometheus" not in stack.parts:
        return None, None
    from pitstop.demo.prometheus_watch import CordonWatch, start_worker_metrics

    metrics, address = start_worker_metrics()
    if metrics is None:
        console.print(f"[yellow]the worker's /metrics could not be served ({address})[/yellow]")
        return None, None
    console.print(f"Prometheus {stack.prometheus_url} scrapes the worker's /metrics at {address}")
    return CordonWatch(stack.prometheus_url, "rehearsal"), metrics


async def _follow_run(
    client: Client,
    request: RunRequest,
    run_id: str,
    stack: DevStack,
    keys: WorkerKeys,
    console: Console,
    interactive: bool,
    approver: str,
    interceptors: Sequence[Interceptor] = (),
    sample: Callable[[], None] | None = None,
) -> tuple[RunReport, str]:
    """Start the run on an in-process worker, show its status live (answering its gates unless
    `interactive`) until it ends, calling `sample` (off the event loop) at each refresh; its
    report and its link in the Temporal UI."""
    from pitstop.worker_app import build_worker

    task_queue = f"pitstop-demo-{uuid.uuid4().hex[:6]}"
    async with build_worker(client, task_queue, keys=keys, extra_interceptors=interceptors):
        handle = await client.start_workflow(
            "RunbookWorkflow", request, id=run_id, task_queue=task_queue, result_type=RunReport
        )
        link = ui_link(stack.ui_url, "default", run_id)
        console.print(f"run [bold]{run_id}[/bold]: {link}")
        voter = None
        if interactive:
            console.print(
                f"gates wait for you: `pitstop approve {run_id} --as <approver>` or the Temporal UI"
            )
        else:
            voter = asyncio.ensure_future(answer_gates(handle, approver, console, keys.vote))
        result = asyncio.ensure_future(handle.result())
        with Live(console=console, refresh_per_second=4, transient=True) as live:
            while not result.done():
                live.update(status_view(await handle.query(RunbookWorkflow.status)))
                if sample is not None:
                    await asyncio.to_thread(sample)
                await asyncio.wait([result], timeout=0.5)
        if voter is not None:
            voter.cancel()
        return result.result(), link


def _print_outcome(console: Console, report: RunReport, verdict: Any, link: str, started: float) -> None:
    console.print(report_view(report))
    console.print(node_table(verdict))
    console.print(
        f"counters: {verdict.counters}; most nodes unavailable at once per failure domain: "
        f"{verdict.max_unavailable_per_domain}"
    )
    for problem in verdict.problems:
        console.print(f"[red]not as the runbook says: {problem}[/red]")
    console.print(f"\nrun in the Temporal UI: {link}")
    console.print(
        f"finished in {time.monotonic() - started:.1f}s; the stack keeps running (`pitstop dev down`)."
    )


def node_table(verdict: Any) -> Table:
    table = Table(title="nodes")
    for column in (
        "node",
        "domain",
        "firmware before",
        "after",
        "drain s",
        "NCCL GB/s",
        "DCGM",
        "outcome",
        "state",
    ):
        table.add_column(column)
    for row in verdict.rows:
        reason = row.reason if len(row.reason) <= 90 else row.reason[:87] + "..."
        state = "schedulable" if row.schedulable else f"cordoned: {reason}" if reason else "cordoned"
        table.add_row(
            row.node,
            row.domain,
            row.firmware_before,
            row.firmware_after,
            f"{row.drain_seconds:.2f}" if row.drain_seconds is not None else "-",
            f"{row.nccl_busbw_gbps:.0f}" if row.nccl_busbw_gbps is not None else "-",
            row.dcgm,
            styled(row.outcome),
            state,
        )
    return table
