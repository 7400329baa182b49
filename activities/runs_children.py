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
requester was verified, so that the child's gates see the same person.

Whose run: a run found under a child's id counts only when its memo carries this run's marker
for this host, suffix and request, signed with the worker key (pitstop/child_marker.py): a run
someone else started under that id first is refused, never adopted. A child that ended without
a report (terminated, cancelled, timed out) fails the task, saying so. When this task is
cancelled (the promotion aborted or skipped the cluster) while it waits, the child is aborted
too — unless the cancellation is this worker shutting down: the retry on another worker finds
the child and waits on."""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.module_activity import module_activity
from pitstop.child_marker import MEMO_KEY, ChildMarker, mark, verified
from pitstop.contracts import ModuleCall, ModuleResult, RunReport, RunRequest, RunStatus
from pitstop.errors import ErrorType, fail, make_error
from pitstop.keys import KeyConfigError, KeyRing, load_key
from pitstop.module_args.runs import CHILD_RELEASE, CHILD_ROLLBACK, CHILD_RUN, ChildActionArgs, ChildRunArgs
from pitstop.runbook.durations import parse_duration

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# How often a child is looked at: at least this, at most well inside the 60 s heartbeat timeout.
POLL_MIN, POLL_MAX = 0.2, 30.0


def child_id(parent: str, host: str, suffix: str | None = None) -> str:
    """`<parent>.<host>`: the host's change (what runs.release/runs.rollback act on); with a
    suffix, another child of the same host (a promotion's fleet inventories). Two hosts may map
    to one id (`prod/1`, `prod 1`): the marker tells them apart, and the second is refused."""
    return f"{parent}.{_UNSAFE.sub('_', host)}" + (f".{suffix}" if suffix else "")


def _every(poll: str) -> float:
    return min(max(parse_duration(poll), POLL_MIN), POLL_MAX)


def _worker_key(module: str) -> KeyRing:
    try:
        ring = load_key("worker")
    except KeyConfigError as exc:
        raise make_error(ErrorType.PRECONDITION_FAILED, f"{module}: {exc}") from None
    if ring is None:
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"{module}: this worker holds no worker key (PITSTOP_WORKER_KEY[_FILE]): it marks the "
            "child runs it starts with it; run promotions on the central worker",
        )
    return ring


@dataclass(frozen=True)
class Gone:
    """A child that ended without a report (terminated, cancelled, timed out)."""

    run_id: str
    status: str


State = RunStatus | RunReport | Gone


def _summary(state: State) -> dict[str, Any]:
    if isinstance(state, Gone):
        return {"run_id": state.run_id, "status": state.status, "stages": {}}
    return {
        "run_id": state.run_id,
        "status": state.status,
        "stages": {s.name: s.status for s in state.stages},
        "rollback_reason": state.rollback_reason if isinstance(state, RunStatus) else None,
    }


async def _parent_requester(client: Client, parent: str) -> tuple[str, bool]:
    """Who asked for this run, and whether that was verified: from the run's own status."""
    status: RunStatus = await client.get_workflow_handle(parent).query("status", result_type=RunStatus)
    if status.requester is not None:
        return status.requester.name, status.requester.verified
    return status.requested_by, False


def _signed(request: RunRequest, run: str, parent: str, verified_requester: bool) -> RunRequest:
    if not verified_requester:
        return request  # an unverified requester stays a claim in the child too
    try:
        ring = load_key("vote")
    except KeyConfigError:
        ring = None
    if ring is None:
        return request
    from pitstop.proofs import sign_request

    return sign_request(ring, request, run=run, subject=f"run:{parent}")


async def _marker_of(handle: WorkflowHandle[Any, RunReport], ring: KeyRing) -> ChildMarker | None:
    described = await handle.describe()
    return verified(ring, await described.memo())


async def _state(handle: WorkflowHandle[Any, RunReport]) -> State:
    """The child's report once it ended, its status while it runs (`held` once it waits), or
    how it ended without a report."""
    described = await handle.describe()
    if described.status == WorkflowExecutionStatus.RUNNING:
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        return status
    if described.status == WorkflowExecutionStatus.COMPLETED:
        return await handle.result()
    how = described.status.name.lower() if described.status is not None else "unknown"
    return Gone(run_id=handle.id, status=how)


async def _wait(handle: WorkflowHandle[Any, RunReport], every: float, done: set[str]) -> State:
    """Read the child's state every `every` seconds (heartbeating) until it is in `done` or ended."""
    while True:
        state = await _state(handle)
        activity.heartbeat(state.status)
        if state.status in done or not isinstance(state, RunStatus):
            return state
        await asyncio.sleep(every)


def _outcome(what: str, state: State, ok: set[str]) -> ModuleResult:
    data = _summary(state)
    if isinstance(state, Gone):
        said = f"{what}: run {state.run_id} was {state.status}: it ended without a report"
        return ModuleResult(changed=True, failed=True, msg=said, data=data)
    said = f"{what}: run {state.run_id} is {state.status}"
    if isinstance(state, RunReport) and state.msg:
        said += f": {state.msg}"
    return ModuleResult(changed=True, failed=state.status not in ok, msg=said, data=data)


def _not_ours(module: str, run: str) -> ApplicationError:
    return make_error(
        ErrorType.PRECONDITION_FAILED,
        f"{module}: a run {run} exists that this run did not start for this host with these "
        "arguments (its memo carries no marker of this run signed by the worker key): refusing to "
        "count or act on it; if it is stray, terminate it, and check that no two hosts of the "
        "inventory map to the same id",
    )


@module_activity(CHILD_RUN)
async def runs_run(call: ModuleCall, args: ChildRunArgs) -> ModuleResult:
    run = child_id(call.run_id, call.host, args.suffix)
    if call.cluster is not None and call.cluster.task_queue:
        # This task would run on that cluster's activities-only worker, which serves no
        # workflows: the child would never start. A promotion's inventory lists clusters.
        fail(
            ErrorType.INVALID_ARGS,
            f"runs.run: this run's inventory names cluster {call.cluster.name!r} (task queue "
            f"{call.cluster.task_queue!r}); a promotion's inventory lists clusters as hosts and "
            "names none, so that its tasks run on the central worker",
        )
    if call.check_mode:
        return ModuleResult(
            changed=True, msg=f"would run {args.runbook} on {args.inventory} as {run}", data={"run_id": run}
        )
    ring = _worker_key(call.module)
    client = activity.client()
    requester, verified_requester = await _parent_requester(client, call.run_id)
    request = RunRequest(
        runbook=args.runbook, inventory=args.inventory, vars=args.vars, requested_by=requester, hold=args.hold
    )
    request = _signed(request, run, call.run_id, verified_requester)
    marker = mark(ring, call.run_id, call.host, args.suffix, request)
    try:
        handle: WorkflowHandle[Any, RunReport] = await client.start_workflow(
            "RunbookWorkflow",
            request,
            id=run,
            task_queue=activity.info().task_queue,
            result_type=RunReport,
            memo={MEMO_KEY: marker.model_dump(mode="json")},
            # A child that ended is never started again: its outcome is the task's.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        # This task's earlier attempt started it — or someone else did: only ours counts.
        handle = client.get_workflow_handle(run, result_type=RunReport)
        found = await _marker_of(handle, ring)
        # The same marker: this run, this host and suffix, the same request (its digest leaves
        # out the requester proof, which each attempt signs afresh).
        if found is None or found.signed_part() != marker.signed_part():
            raise _not_ours(call.module, run) from None
    try:
        state = await _wait(handle, _every(args.poll), {"held"} if args.hold else set())
    except asyncio.CancelledError:
        if not activity.is_worker_shutdown():
            # The promotion stopped this cluster (abort, skip): its change stops too.
            with contextlib.suppress(Exception):
                await handle.signal("abort", f"promotion {call.run_id} stopped {call.host}")
        raise
    return _outcome(f"{args.runbook} on {call.host}", state, {"held", "succeeded"})


async def _child(call: ModuleCall) -> WorkflowHandle[Any, RunReport]:
    run = child_id(call.run_id, call.host)
    handle = activity.client().get_workflow_handle(run, result_type=RunReport)
    try:
        found = await _marker_of(handle, _worker_key(call.module))
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise make_error(
                ErrorType.PRECONDITION_FAILED,
                f"{call.module}: {call.host} has no child run {run} (runs.run starts it)",
            ) from None
        raise
    if found is None or (found.parent, found.host, found.suffix) != (call.run_id, call.host, None):
        raise _not_ours(call.module, run)
    return handle


@module_activity(CHILD_RELEASE)
async def runs_release(call: ModuleCall, args: ChildActionArgs) -> ModuleResult:
    handle = await _child(call)
    state = await _state(handle)
    if not isinstance(state, RunStatus):
        # Not held (it never was, or something ended it): its end is what happened.
        return _outcome(f"{call.host}", state, {"succeeded"}).model_copy(update={"changed": False})
    if state.status != "held":
        fail(ErrorType.PRECONDITION_FAILED, f"runs.release: run {state.run_id} is {state.status}, not held")
    if call.check_mode:
        return ModuleResult(changed=True, msg=f"would release run {state.run_id}")
    await handle.signal("release")
    ended = await _wait(handle, _every(args.poll), set())
    return _outcome(f"released {call.host}", ended, {"succeeded"})


@module_activity(CHILD_ROLLBACK)
async def runs_rollback(call: ModuleCall, args: ChildActionArgs) -> ModuleResult:
    handle = await _child(call)
    state = await _state(handle)
    if not isinstance(state, RunStatus):
        # Ended already. Rolled back (by its own runbook, when its change failed): nothing left
        # to do. Anything else (released, aborted, failed, terminated) may have left its change
        # in place: this task did not roll it back, and says so.
        undone = isinstance(state, RunReport) and state.status == "rolled_back"
        return ModuleResult(
            changed=False,
            failed=not undone,
            msg=f"run {state.run_id} already ended {state.status}"
            + ("" if undone else "; it was NOT rolled back: its change may still be in place"),
            data=_summary(state),
        )
    if call.check_mode:
        return ModuleResult(changed=True, msg=f"would roll back run {state.run_id}")
    reason = args.reason or f"rolled back by promotion {call.run_id}"
    await handle.signal("rollback", reason)
    ended = await _wait(handle, _every(args.poll), set())
    return _outcome(f"rolled back {call.host}", ended, {"rolled_back"})


RUNS_CHILDREN_ACTIVITIES = [runs_run, runs_release, runs_rollback]
