"""`pitstop run | plan | status | approve | reject | pause | resume | abort | skip-host | rollback`.

Approver identity on the command line is *asserted*, not authenticated: `--as NAME`
(default: the OS user running the command) is the name the gate checks against its
approvers. Who may send Updates to a namespace at all is Temporal's authorization
(mTLS/API keys per namespace); approvals that need a verified identity come from Slack,
whose clicks the bridge signs with the vote key.

A CLI that holds the vote key (PITSTOP_VOTE_KEY[_FILE], or the embedded stack's
`.pitstop/keys/vote.key` on a development machine) signs its votes and start requests with
it, vouching for `--as` (source `cli:<name>`): whoever holds that key can vouch for anyone,
so in production only the Slack bridge and the workers hold it and CLI votes are unverified.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.live import Live
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from pitstop.bundle import BundleError, collect
from pitstop.cli.errors import fail
from pitstop.contracts import Decision, RunReport, RunRequest, RunStatus, VoteRecord
from pitstop.keys import KeyConfigError, KeyRing, load_key
from pitstop.settings import Settings
from pitstop.views import OK_ROWS_SHOWN, report_view, status_view, ui_link

console = Console()
T = TypeVar("T")

FINAL_STATES = {"succeeded", "completed_with_failures", "failed", "rolled_back", "aborted"}


async def _status(handle: WorkflowHandle[Any, Any]) -> RunStatus:
    # By name: importing the workflow classes for their handles would cost the CLI ~0.1 s.
    status: RunStatus = await handle.query("status", result_type=RunStatus)
    return status


def _fail(message: str, code: int = 1) -> NoReturn:
    fail(message, code)


def _run(coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    from pitstop.client import PitstopConnectionError
    from pitstop.codec import PayloadCodecError

    try:
        return asyncio.run(coro())
    # A payload this process cannot decrypt (a key id it lacks, altered data): say which.
    except (PitstopConnectionError, PayloadCodecError) as exc:
        _fail(str(exc))
    except RPCError as exc:
        # Whatever Temporal refused that no command expected (permissions, a namespace).
        _fail(f"Temporal refused the request: {exc.message} (check TEMPORAL_NAMESPACE and your credentials)")


def _no_run(run_id: str, exc: RPCError, settings: Settings) -> str:
    """What to say when Temporal does not know a run id (or refused to say)."""
    if exc.status == RPCStatusCode.NOT_FOUND:
        return (
            f"no run {run_id!r} in namespace {settings.temporal_namespace!r} at {settings.temporal_address}: "
            "check the id that `pitstop run` printed (runs are listed in the Temporal UI, "
            f"{settings.ui_url}/namespaces/{settings.temporal_namespace}/workflows)"
        )
    return f"run {run_id!r}: {exc.message}"


async def _client(settings: Settings) -> Client:
    from pitstop.client import connect

    return await connect(settings, tracing=False)


def _parse_vars(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        if pair.startswith("@"):
            out.update(_vars_file(pair))
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            _fail(f"-e {pair!r}: expected key=value or @file.json")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def _vars_file(pair: str) -> dict[str, Any]:
    """`-e @vars.json`: a JSON object of variables."""
    path = Path(pair[1:])
    try:
        loaded = json.loads(path.read_text())
    except OSError as exc:
        _fail(f"-e {pair}: cannot read {path}: {exc.strerror}; give the path of a JSON file after @")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        _fail(f'-e {pair}: {path} is not JSON ({exc}); write an object such as {{"version": "2.1.0"}}')
    if not isinstance(loaded, dict):
        _fail(f"-e {pair}: {path} holds a JSON {type(loaded).__name__}; write an object of variables")
    return loaded


def _vote_key(settings: Settings) -> KeyRing | None:
    """The vote key, when this machine holds one (a configured but unusable key is an error)."""
    try:
        return load_key("vote", home=settings.home)
    except KeyConfigError as exc:
        _fail(str(exc))
        raise


def _check_file(path: Path, what: str, hint: str) -> None:
    if path.is_dir():
        _fail(f"{what} {path} is a directory: give the {what} file itself")
    if not path.exists():
        _fail(f"{what} {path} does not exist (relative to {Path.cwd()}): {hint}")


def _split(values: list[str]) -> list[str]:
    return [t.strip() for v in values for t in v.split(",") if t.strip()]


def _request(
    runbook: Path,
    inventory: Path | None,
    limit: str | None,
    extra: list[str],
    check: bool,
    tags: list[str],
    skip_tags: list[str],
    requester: str,
    on_worker: bool = False,
) -> RunRequest:
    from pitstop.runbook import RunbookError

    if on_worker:
        # The worker's own runbook directory holds the runbook (a worker whose policy says
        # `runbooks.from_requests: false` runs nothing else): send names, not files.
        files: dict[str, str] = {}
        runbook_name, inventory_name = runbook.as_posix(), inventory.as_posix() if inventory else None
        for name in (runbook_name, inventory_name):
            if name is not None and (Path(name).is_absolute() or ".." in Path(name).parts):
                _fail(f"--on-worker: {name!r} must be relative to the worker's runbook directory")
    else:
        _check_file(
            runbook, "runbook", "check the path, or use --on-worker for one in the worker's directory"
        )
        if inventory is not None:
            _check_file(inventory, "inventory", "check the path given to -i")
        try:
            files, runbook_name, inventory_name = collect(runbook, inventory)
        except (RunbookError, BundleError) as exc:
            _fail(str(exc))
            raise
    return RunRequest(
        runbook=runbook_name,
        inventory=inventory_name,
        files=files,
        limit=limit,
        vars=_parse_vars(extra),
        check_mode=check,
        tags=_split(tags),
        skip_tags=_split(skip_tags),
        requested_by=requester,
    )


async def _follow(
    handle: WorkflowHandle[Any, RunReport], settings: Settings, quiet: bool = False
) -> RunReport:
    """Show live status until the run ends; return its report. The end is the result's
    history long-poll (no polling delay); the status table refreshes every second meanwhile."""
    result = asyncio.ensure_future(handle.result())
    with Live(console=console, refresh_per_second=4, transient=True) as live:
        while not result.done():
            try:
                status = await _status(handle)
                if not quiet:
                    live.update(status_view(status))
            except RPCError:
                pass
            await asyncio.wait([result], timeout=1.0)
    return result.result()


def _exit_for(report: RunReport) -> None:
    console.print(report_view(report))
    raise typer.Exit(0 if report.status == "succeeded" else 1)


def run(
    runbook: Annotated[Path, typer.Argument(help="Runbook file.")],
    inventory: Annotated[Path | None, typer.Option("--inventory", "-i", help="Inventory file.")] = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="Further limit hosts (pattern).")] = None,
    extra_vars: Annotated[list[str], typer.Option("--extra-vars", "-e", help="key=value or @vars.json")] = [],  # noqa: B006
    check: Annotated[bool, typer.Option("--check", help="Check mode: report what would change.")] = False,
    tags: Annotated[list[str], typer.Option("--tags", help="Only tasks with these tags.")] = [],  # noqa: B006
    skip_tags: Annotated[list[str], typer.Option("--skip-tags", help="Skip tasks with these tags.")] = [],  # noqa: B006
    plan: Annotated[
        str | None, typer.Option("--plan", help="Apply exactly what this plan run showed (refuses on drift).")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Follow the run until it ends.")] = False,
    run_id: Annotated[str | None, typer.Option("--id", help="Workflow id (default: generated).")] = None,
    as_user: Annotated[
        str | None, typer.Option("--as", help="Requester identity (default: OS user).")
    ] = None,
    on_worker: Annotated[
        bool,
        typer.Option(
            "--on-worker",
            help="RUNBOOK and INVENTORY are paths in the worker's runbook directory: send their "
            "names, not the files (for workers that run only their own runbooks).",
        ),
    ] = False,
) -> None:
    """Start a runbook run on Temporal."""
    settings = Settings.from_env()
    requester = as_user or getpass.getuser()
    request = _request(runbook, inventory, limit, extra_vars, check, tags, skip_tags, requester, on_worker)

    async def go() -> None:
        client = await _client(settings)
        req = request
        if plan is not None:
            req = await _with_plan(client, req, plan)
        wid = run_id or f"{Path(req.runbook).stem}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        vote_key = _vote_key(settings)
        if vote_key is not None:
            from pitstop.proofs import sign_request

            req = sign_request(vote_key, req, run=wid, subject=f"cli:{req.requested_by}")
        handle = await client.start_workflow(
            "RunbookWorkflow", req, id=wid, task_queue=settings.task_queue, result_type=RunReport
        )
        console.print(
            f"started [bold]{wid}[/bold]  {ui_link(settings.ui_url, settings.temporal_namespace, wid)}"
        )
        if not wait:
            return
        try:
            report = await _follow(handle, settings)
        except WorkflowFailureError as exc:
            _fail(f"run {wid} failed: {exc.cause or exc}")
            return
        if req.check_mode and report.hashes is not None:
            console.print(
                f"plan hash {report.hashes.content[:16]}…  apply with: pitstop run --plan {wid} ..."
            )
        _exit_for(report)

    _run(go)


async def _with_plan(client: Client, request: RunRequest, plan_id: str) -> RunRequest:
    handle = client.get_workflow_handle(plan_id, result_type=RunReport)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        _fail(f"--plan: {_no_run(plan_id, exc, Settings.from_env())}")
    if desc.status != WorkflowExecutionStatus.COMPLETED:
        _fail(f"plan run {plan_id!r} has not completed (status {desc.status.name if desc.status else '?'})")
    report = await handle.result()
    if not report.check_mode:
        _fail(f"run {plan_id!r} was not a plan (check-mode) run")
    if report.hashes is None or report.status not in ("succeeded", "completed_with_failures"):
        _fail(f"plan run {plan_id!r} did not produce a plan (status {report.status}: {report.msg})")
    return request.model_copy(
        update={"check_mode": False, "plan_of": plan_id, "expected_hashes": report.hashes}
    )


def plan(
    runbook: Annotated[Path, typer.Argument(help="Runbook file.")],
    inventory: Annotated[Path | None, typer.Option("--inventory", "-i", help="Inventory file.")] = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="Further limit hosts (pattern).")] = None,
    extra_vars: Annotated[list[str], typer.Option("--extra-vars", "-e", help="key=value or @vars.json")] = [],  # noqa: B006
    tags: Annotated[list[str], typer.Option("--tags")] = [],  # noqa: B006
    skip_tags: Annotated[list[str], typer.Option("--skip-tags")] = [],  # noqa: B006
    as_user: Annotated[
        str | None, typer.Option("--as", help="Requester identity (default: OS user).")
    ] = None,
    on_worker: Annotated[
        bool, typer.Option("--on-worker", help="RUNBOOK and INVENTORY are in the worker's runbook directory.")
    ] = False,
) -> None:
    """Run in check mode and record the plan (apply it later with `pitstop run --plan RUN_ID`)."""
    run(
        runbook,
        inventory=inventory,
        limit=limit,
        extra_vars=extra_vars,
        check=True,
        tags=tags,
        skip_tags=skip_tags,
        plan=None,
        wait=True,
        run_id=None,
        as_user=as_user,
        on_worker=on_worker,
    )


def status(
    run_id: Annotated[str, typer.Argument(help="Run (workflow) id.")],
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until the run ends.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
    all_hosts: Annotated[
        bool,
        typer.Option(
            "--all-hosts", help="List every host of a finished run (default: the first 20 ok per stage)."
        ),
    ] = False,
) -> None:
    """Show a run's stages, hosts and gates (a finished run: its report, with every task)."""
    settings = Settings.from_env()

    async def go() -> None:
        client = await _client(settings)
        handle = client.get_workflow_handle(run_id, result_type=RunReport)
        # A finished run's status is its report, read from history: it needs no worker, and
        # it is what the run recorded (not re-encoded by whichever worker answers a query).
        report = await _finished_report(handle)
        if report is not None:
            if as_json:
                console.print_json(report.model_dump_json())
            else:
                console.print(report_view(report, ok_rows=None if all_hosts else OK_ROWS_SHOWN))
            return
        try:
            current = await _status(handle)
        except RPCError as exc:
            _fail(_no_run(run_id, exc, settings))
        if as_json:
            console.print_json(current.model_dump_json())
            return
        if not watch or current.status in FINAL_STATES:
            console.print(status_view(current))
            await _say_if_waiting(client, current)
            return
        # The end comes from the history long-poll, not from the next refresh.
        try:
            report = await _follow(handle, settings)
        except WorkflowFailureError as exc:
            _fail(f"run {run_id} failed: {exc.cause or exc}")
            return
        console.print(report_view(report, ok_rows=None if all_hosts else OK_ROWS_SHOWN))

    _run(go)


async def _say_if_waiting(client: Client, current: RunStatus) -> None:
    """A run whose cluster's worker is missing waits, it does not fail: say so, and what to do."""
    from pitstop.cluster_queue import run_waiting

    try:
        line = await run_waiting(client, current)
    except RPCError as exc:
        # The status above stands; only this one check could not be made.
        line = f"could not tell whether the cluster's worker is polling: {exc.message}"
    if line:
        console.print(line, style="yellow", highlight=False, soft_wrap=True)


async def _finished_report(handle: WorkflowHandle[Any, RunReport]) -> RunReport | None:
    try:
        desc = await handle.describe()
        if desc.status in (None, WorkflowExecutionStatus.RUNNING):
            return None
        return await handle.result()
    except (RPCError, WorkflowFailureError):
        return None


def _decide(run_id: str, approve: bool, gate: str | None, comment: str, as_user: str | None) -> None:
    settings = Settings.from_env()
    approver = as_user or getpass.getuser()
    decision = Decision(gate=gate, approve=approve, approver=approver, comment=comment, source="cli")
    vote_key = _vote_key(settings)
    click = f"cli-{uuid.uuid4().hex}"

    async def go() -> None:
        client = await _client(settings)
        handle = client.get_workflow_handle(run_id)
        vote_for = decision
        if vote_key is not None:
            from pitstop.proofs import signed_decision

            # A signature names its gate: the one open gate when none is given.
            gate_id = gate or await _only_open_gate(handle, settings)
            vote_for = signed_decision(
                vote_key,
                run=run_id,
                gate=gate_id,
                approve=approve,
                approver=approver,
                subject=f"cli:{approver}",
                click=click,
                comment=comment,
            )
        try:
            # The SDK types an async Update's result as its coroutine; it is the VoteRecord.
            vote = await handle.execute_update("decide", vote_for, id=click, result_type=VoteRecord)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            _fail(f"vote refused: {getattr(cause, 'message', None) or cause or exc}")
            return
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                _fail(_no_run(run_id, exc, settings))
            _fail(f"vote refused: {exc.message}")
        verb = "approved" if approve else "rejected"
        how = (
            f"verified as {vote.source}"
            if vote.verified
            else "unverified: this machine holds no vote key, so the name is a claim"
        )
        console.print(
            f"{approver} {verb} {gate or 'the open gate'} of {run_id} (recorded {vote.at:%H:%M:%S}; {how})"
        )

    _run(go)


async def _only_open_gate(handle: WorkflowHandle[Any, Any], settings: Settings) -> str:
    try:
        status = await _status(handle)
    except RPCError as exc:
        _fail(_no_run(handle.id, exc, settings))
    open_ids: list[str] = sorted(g.rule.gate_id for g in status.gates if g.status == "open")
    if len(open_ids) != 1:
        said = f"several gates are open ({', '.join(open_ids)})" if open_ids else "no gate is open"
        _fail(f"vote refused: {said} in {handle.id}; name one with --gate")
    return open_ids[0]


def approve(
    run_id: Annotated[str, typer.Argument(help="Run (workflow) id.")],
    gate: Annotated[
        str | None, typer.Option("--gate", "-g", help="Gate id (default: the only open gate).")
    ] = None,
    comment: Annotated[str, typer.Option("--comment", "-m", help="Why (some gates require one).")] = "",
    as_user: Annotated[str | None, typer.Option("--as", help="Approver identity (default: OS user).")] = None,
) -> None:
    """Approve a gate (as `--as`, default the OS user)."""
    _decide(run_id, True, gate, comment, as_user)


def reject(
    run_id: Annotated[str, typer.Argument(help="Run (workflow) id.")],
    gate: Annotated[
        str | None, typer.Option("--gate", "-g", help="Gate id (default: the only open gate).")
    ] = None,
    comment: Annotated[str, typer.Option("--comment", "-m", help="Why.")] = "",
    as_user: Annotated[str | None, typer.Option("--as", help="Approver identity (default: OS user).")] = None,
) -> None:
    """Reject a gate."""
    _decide(run_id, False, gate, comment, as_user)


def _signal(run_id: str, name: str, *args: str) -> None:
    settings = Settings.from_env()

    async def go() -> None:
        client = await _client(settings)
        try:
            await client.get_workflow_handle(run_id).signal(name, *args)
        except RPCError as exc:
            _fail(
                _no_run(run_id, exc, settings)
                if exc.status == RPCStatusCode.NOT_FOUND
                else f"cannot signal {run_id!r}: {exc.message}"
            )
        console.print(f"sent {name} to {run_id}")

    _run(go)


def pause(run_id: Annotated[str, typer.Argument()]) -> None:
    """Stop launching hosts and tasks until `resume`."""
    _signal(run_id, "pause")


def resume(run_id: Annotated[str, typer.Argument()]) -> None:
    """Resume a paused run."""
    _signal(run_id, "resume")


def abort(
    run_id: Annotated[str, typer.Argument()],
    reason: Annotated[str, typer.Option("--reason", "-r")] = "aborted by operator",
) -> None:
    """Stop the run at the next task boundary of every host."""
    _signal(run_id, "abort", reason)


def skip_host(run_id: Annotated[str, typer.Argument()], host: Annotated[str, typer.Argument()]) -> None:
    """Skip a host that has not started (or stop it at its next task)."""
    _signal(run_id, "skip_host", host)


def rollback(
    run_id: Annotated[str, typer.Argument()],
    reason: Annotated[str, typer.Option("--reason", "-r")] = "rollback requested by operator",
) -> None:
    """Trigger the runbook's rollback now."""
    _signal(run_id, "rollback", reason)


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(plan)
    app.command()(status)
    app.command()(approve)
    app.command()(reject)
    app.command()(pause)
    app.command()(resume)
    app.command()(abort)
    app.command(name="skip-host")(skip_host)
    app.command()(rollback)
