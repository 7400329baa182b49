"""A promotion's child runs (runbooks/promotion.yaml): `runs.run` starts a runbook on one
cluster as a child of this run and waits until it is held or ended; `runs.release` lets a held
child end; `runs.rollback` rolls it back with its runbook's own rollback.

Each child's id is `<this run's id>.<host>` (the host is the cluster; `runs.run`'s `suffix`
makes it `<this run's id>.<host>.<suffix>`, another child of the host, e.g. its fleet inventory):
a retried task (its worker died while it waited) or a repeated one finds the same run, never
starts a second, and a runbook can act on no run but its own children. The child is started
through the worker's own Temporal client, on this worker's task queue, from the worker's runbook
directory (a promotion's runbooks are reviewed files, never text carried by a request); the child
plans and runs under the worker policy like any run, its module tasks going to its cluster's own
queue (its inventory's `cluster.task_queue`: the worker inside that cluster).

Who asked: the child's requester is this run's (read from this run's own status, not from the
runbook's arguments), signed with the vote key when this worker holds one and this run's
requester was verified, so that the child's gates see the same person."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.module_activity import module_activity
from pitstop.contracts import ModuleCall, ModuleResult, RunReport, RunRequest, RunStatus
from pitstop.errors import ErrorType, fail, make_error
from pitstop.keys import KeyConfigError, load_key
from pitstop.module_args.runs import CHILD_RELEASE, CHILD_ROLLBACK, CHILD_RUN, ChildActionArgs, ChildRunArgs
from pitstop.runbook.durations import parse_duration

ENDED = {"succeeded", "completed_with_failures", "failed", "rolled_back", "aborted"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def child_id(parent: str, host: str, suffix: str | None = None) -> str:
    """`<parent>.<host>`: the host's change (what runs.release/runs.rollback act on); with a
    suffix, another child of the same host (a promotion's fleet inventories)."""
    return f"{parent}.{_UNSAFE.sub('_', host)}" + (f".{suffix}" if suffix else "")


def _summary(status: RunStatus | RunReport) -> dict[str, Any]:
    return {
        "run_id": status.run_id,
        "status": status.status,
        "stages": {s.name: s.status for s in status.stages},
        "rollback_reason": status.rollback_reason if isinstance(status, RunStatus) else None,
    }


async def _parent_requester(client: Client, parent: str) -> tuple[str, bool]:
    """Who asked for this run, and whether that was verified: from the run's own status."""
    status: RunStatus = await client.get_workflow_handle(parent).query("status", result_type=RunStatus)
    if status.requester is not None:
        return status.requester.name, status.requester.verified
    return status.requested_by, False


def _signed(request: RunRequest, run: str, parent: str, verified: bool) -> RunRequest:
    if not verified:
        return request  # an unverified requester stays a claim in the child too
    try:
        ring = load_key("vote")
    except KeyConfigError:
        ring = None
    if ring is None:
        return request
    from pitstop.proofs import sign_request

    return sign_request(ring, request, run=run, subject=f"run:{parent}")


async def _state(handle: WorkflowHandle[Any, RunReport]) -> RunStatus | RunReport:
    """The child's report once it ended, else its status (which says `held` once it waits)."""
    described = await handle.describe()
    if described.status is not None and described.status.name != "RUNNING":
        return await handle.result()
    status: RunStatus = await handle.query("status", result_type=RunStatus)
    return status


async def _wait(
    handle: WorkflowHandle[Any, RunReport], every: float, done: set[str]
) -> RunStatus | RunReport:
    """Read the child's state every `every` seconds (heartbeating) until it is in `done` or ended."""
    while True:
        state = await _state(handle)
        activity.heartbeat(state.status)
        if state.status in done or isinstance(state, RunReport):
            return state
        await asyncio.sleep(every)


def _outcome(what: str, state: RunStatus | RunReport, ok: set[str]) -> ModuleResult:
    data = _summary(state)
    said = f"{what}: run {state.run_id} is {state.status}"
    if isinstance(state, RunReport) and state.msg:
        said += f": {state.msg}"
    return ModuleResult(changed=True, failed=state.status not in ok, msg=said, data=data)


@module_activity(CHILD_RUN)
async def runs_run(call: ModuleCall, args: ChildRunArgs) -> ModuleResult:
    run = child_id(call.run_id, call.host, args.suffix)
    if call.check_mode:
        return ModuleResult(
            changed=True, msg=f"would run {args.runbook} on {args.inventory} as {run}", data={"run_id": run}
        )
    client = activity.client()
    requester, verified = await _parent_requester(client, call.run_id)
    request = RunRequest(
        runbook=args.runbook, inventory=args.inventory, vars=args.vars, requested_by=requester, hold=args.hold
    )
    request = _signed(request, run, call.run_id, verified)
    try:
        handle: WorkflowHandle[Any, RunReport] = await client.start_workflow(
            "RunbookWorkflow",
            request,
            id=run,
            task_queue=activity.info().task_queue,
            result_type=RunReport,
            # A child that ended is never started again: its outcome is the task's.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        handle = client.get_workflow_handle(run, result_type=RunReport)
    state = await _wait(handle, parse_duration(args.poll), {"held"} if args.hold else set())
    return _outcome(f"{args.runbook} on {call.host}", state, {"held", "succeeded"})


async def _child(call: ModuleCall) -> WorkflowHandle[Any, RunReport]:
    run = child_id(call.run_id, call.host)
    handle = activity.client().get_workflow_handle(run, result_type=RunReport)
    try:
        await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise make_error(
                ErrorType.PRECONDITION_FAILED,
                f"{call.module}: {call.host} has no child run {run} (runs.run starts it)",
            ) from None
        raise
    return handle


@module_activity(CHILD_RELEASE)
async def runs_release(call: ModuleCall, args: ChildActionArgs) -> ModuleResult:
    handle = await _child(call)
    state = await _state(handle)
    if isinstance(state, RunReport):
        # Not held (it never was, or something ended it): its end is what happened.
        return _outcome(f"{call.host}", state, {"succeeded"}).model_copy(update={"changed": False})
    if state.status != "held":
        fail(ErrorType.PRECONDITION_FAILED, f"runs.release: run {state.run_id} is {state.status}, not held")
    if call.check_mode:
        return ModuleResult(changed=True, msg=f"would release run {state.run_id}")
    await handle.signal("release")
    ended = await _wait(handle, parse_duration(args.poll), set())
    return _outcome(f"released {call.host}", ended, {"succeeded"})


@module_activity(CHILD_ROLLBACK)
async def runs_rollback(call: ModuleCall, args: ChildActionArgs) -> ModuleResult:
    handle = await _child(call)
    state = await _state(handle)
    if isinstance(state, RunReport):
        # Ended already (it rolled itself back, or was released): nothing left to roll back.
        return ModuleResult(
            changed=False,
            failed=state.status not in ("rolled_back", "failed", "aborted"),
            msg=f"run {state.run_id} already ended {state.status}; it was not rolled back by this task",
            data=_summary(state),
        )
    if call.check_mode:
        return ModuleResult(changed=True, msg=f"would roll back run {state.run_id}")
    reason = args.reason or f"rolled back by promotion {call.run_id}"
    await handle.signal("rollback", reason)
    ended = await _wait(handle, parse_duration(args.poll), set())
    return _outcome(f"rolled back {call.host}", ended, {"rolled_back"})


RUNS_CHILDREN_ACTIVITIES = [runs_run, runs_release, runs_rollback]
