"""`runs.require`: an earlier pitstop run must have done something first — e.g. the same upgrade
on the lab cluster (the rehearsal of docs/upgrade-process.md "Upgrade order"). The evidence is
that run's own report in Temporal, read through the worker's client, not a name typed into a
variable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from activities.module_activity import module_activity
from activities.runs_children import RUNS_CHILDREN_ACTIVITIES
from pitstop.child_marker import verified
from pitstop.contracts import ModuleCall, ModuleResult, RunReport, RunStatus
from pitstop.errors import ErrorType, fail, make_error
from pitstop.keys import load_key
from pitstop.module_args.runs import REQUIRE_RUN, RequireRunArgs
from pitstop.runbook.durations import parse_duration


@module_activity(REQUIRE_RUN)
async def runs_require(call: ModuleCall, args: RequireRunArgs) -> ModuleResult:
    client = activity.client()
    handle = client.get_workflow_handle(args.run_id, result_type=RunReport)
    try:
        described = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise make_error(
                ErrorType.PRECONDITION_FAILED,
                f"runs.require: there is no run {args.run_id!r} in namespace {client.namespace}",
            ) from None
        raise
    if described.workflow_type != "RunbookWorkflow":
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"runs.require: {args.run_id!r} is a {described.workflow_type}, not a pitstop run",
        )
    evidence = await _evidence(client, handle, described, args.run_id, call.run_id)
    problems = _problems(args, evidence)
    if args.same_vars:
        problems += _different_vars(args.same_vars, await _vars_of(client, args.run_id, described))
    data: dict[str, Any] = {
        "run_id": evidence.run_id,
        "runbook": evidence.runbook,
        "cluster": evidence.cluster,
        "status": evidence.status,
        "ended_at": evidence.ended_at.isoformat(),
        "stages": evidence.stages,
        "requested_by": evidence.requested_by,
    }
    if problems:
        return ModuleResult(
            failed=True, msg=f"run {evidence.run_id} does not count: " + "; ".join(problems), data=data
        )
    where = f" on {evidence.cluster}" if evidence.cluster else ""
    when = "held open by its promotion" if evidence.status == "held" else f"ended {data['ended_at']}"
    said = f"{evidence.runbook}{where}, {evidence.status}, {when}"
    return ModuleResult(msg=f"run {evidence.run_id} ({said}) counts", data=data)


async def _same_promotion(
    client: Client, held: WorkflowExecutionDescription, run_id: str, requiring: str
) -> None:
    """A held run counts only for another ring of the promotion holding it: its outcome is not
    final (a later ring's failure rolls it back), and that promotion stops with it. Both runs'
    markers (signed with the worker key, pitstop/child_marker.py) must name the same parent."""
    ring = load_key("worker")
    if ring is None:
        fail(
            ErrorType.PRECONDITION_FAILED, "runs.require: this worker holds no worker key to check a held run"
        )
    theirs = verified(ring, await held.memo())
    mine = verified(ring, await (await client.get_workflow_handle(requiring).describe()).memo())
    if theirs is None or mine is None or theirs.parent != mine.parent:
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"runs.require: run {run_id} is held open by "
            + (f"promotion {theirs.parent}" if theirs else "no promotion of this worker")
            + "; while held it counts only for that promotion's other rings (wait for it to end)",
        )


@dataclass(frozen=True)
class Evidence:
    """What an earlier run proves: its report once it ended, or — for a promotion's ring held
    open after its stages succeeded (RunRequest.hold) — its status, whose stages are as final."""

    run_id: str
    runbook: str
    check_mode: bool
    cluster: str | None
    status: str
    ended_at: datetime
    stages: dict[str, str]
    requested_by: str


async def _evidence(
    client: Client,
    handle: WorkflowHandle[Any, RunReport],
    described: WorkflowExecutionDescription,
    run_id: str,
    requiring: str,
) -> Evidence:
    if described.status == WorkflowExecutionStatus.RUNNING:
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        if status.status != "held":
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"runs.require: run {run_id} is still running ({status.status}); wait for it to finish",
            )
        await _same_promotion(client, described, run_id, requiring)
        return Evidence(
            run_id=status.run_id,
            runbook=status.runbook,
            check_mode=status.check_mode,
            cluster=status.cluster.name if status.cluster else None,
            status=status.status,
            ended_at=datetime.now(UTC),
            stages={s.name: s.status for s in status.stages},
            requested_by=status.requested_by,
        )
    if described.status != WorkflowExecutionStatus.COMPLETED:
        state = described.status.name.lower() if described.status else "unknown"
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"runs.require: run {run_id} did not complete (it {state}); it proves nothing",
        )
    report = await handle.result()
    return Evidence(
        run_id=report.run_id,
        runbook=report.runbook,
        check_mode=report.check_mode,
        cluster=report.cluster,
        status=report.status,
        ended_at=report.ended_at,
        stages={s.name: s.status for s in report.stages},
        requested_by=report.requested_by,
    )


def _problems(args: RequireRunArgs, report: Evidence) -> list[str]:
    problems: list[str] = []
    if report.runbook != args.runbook:
        problems.append(f"it ran runbook {report.runbook!r}, not {args.runbook!r}")
    if report.check_mode:
        problems.append("it was a plan (check mode): nothing was changed or validated")
    if args.not_cluster is not None and report.cluster == args.not_cluster:
        problems.append(
            f"it ran on {report.cluster}, the cluster being changed: a rehearsal must run elsewhere"
        )
    if args.max_age is not None:
        age = (datetime.now(UTC) - report.ended_at).total_seconds()
        if age > parse_duration(args.max_age):
            problems.append(f"it ended {age / 86400:.1f} days ago, longer than max_age {args.max_age}")
    statuses = report.stages
    wanted = args.stages_ok or list(statuses)
    for name in wanted:
        if name not in statuses:
            problems.append(f"it has no stage {name!r} (stages: {', '.join(statuses) or 'none'})")
        elif statuses[name] != "ok":
            problems.append(f"its stage {name!r} ended {statuses[name]}")
    return problems


async def _vars_of(
    client: Client, run_id: str, described: WorkflowExecutionDescription
) -> dict[str, Any] | None:
    """The variables that run planned with (its runbook's vars, its -e on top), from the result of
    its `plan.load` in the history of its first execution (a run that continued as new carries
    its plan along, but planned it once). None when no plan is found."""
    first = described.raw_description.workflow_execution_info.first_run_id or described.run_id
    scheduled: set[int] = set()
    try:
        async for event in client.get_workflow_handle(run_id, run_id=first).fetch_history_events():
            if event.HasField("activity_task_scheduled_event_attributes"):
                if event.activity_task_scheduled_event_attributes.activity_type.name == "plan.load":
                    scheduled.add(event.event_id)
            elif event.HasField("activity_task_completed_event_attributes"):
                done = event.activity_task_completed_event_attributes
                if done.scheduled_event_id in scheduled:
                    # Read as plain JSON, not as this worker's Plan model: a run planned by another
                    # pitstop version still says which variables it used.
                    [plan] = await client.data_converter.decode(done.result.payloads, [dict])
                    runbook = plan.get("runbook") if isinstance(plan, dict) else None
                    if not isinstance(runbook, dict):
                        return None
                    return {**(runbook.get("vars") or {}), **(plan.get("extra_vars") or {})}
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None  # its first execution is past the namespace's retention
        raise
    return None


def _different_vars(wanted: dict[str, Any], used: dict[str, Any] | None) -> list[str]:
    if used is None:
        return ["its plan is not in its history (or past retention): the variables it used cannot be checked"]
    problems: list[str] = []
    for name, value in wanted.items():
        if name not in used:
            problems.append(f"it did not set {name}")
        elif used[name] != value:
            problems.append(f"it ran with {name} {_differs(used[name], value)}")
    return problems


def _differs(theirs: Any, ours: Any) -> str:
    """What differs, said briefly: the keys of a mapping that differ, or both values."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        keys = sorted(set(theirs) | set(ours), key=str)
        diff = [
            f"{k}: {theirs.get(k)!r} (here {ours.get(k)!r})" for k in keys if theirs.get(k) != ours.get(k)
        ]
        return "where " + ", ".join(diff[:5]) + (f" and {len(diff) - 5} more" if len(diff) > 5 else "")
    return f"{theirs!r}, not {ours!r}"


# With a promotion's child runs (activities/runs_children.py).
RUNS_ACTIVITIES: list[Callable[..., Any]] = [runs_require, *RUNS_CHILDREN_ACTIVITIES]
