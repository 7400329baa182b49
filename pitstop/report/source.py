"""Read a run for its report through Temporal, as the CLI reads runs: a finished run's RunReport
(its result, from history), or for a run in progress a RunReport put together from its `status`
Query and the results of the host workflows that have ended; and the plan's layout (domains,
limits, waves) and its Slack thread from the run's history."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError

from pitstop.contracts import HostResult, Plan, RunReport, RunRequest, RunStatus, StageReport
from pitstop.report.layout import RunLayout, layout_from_plan
from pitstop.slack.contracts import MessageRef, RunNotice

# Host results read at once for a run in progress (each is one history read).
CHILD_READS = 32
ENDED = {"ok", "failed", "skipped", "aborted"}
# Events of the run's history read between two progress reports.
HISTORY_BEAT = 1000
# Told what has been read so far ("12/400 hosts read"): an activity heartbeats with it.
Progress = Callable[[str], None]


class ReportSourceError(Exception):
    """The run cannot be read (unknown id, no result); the message says which and why."""


class RunSource(BaseModel):
    report: RunReport
    layout: RunLayout
    finished: bool
    slack_thread: MessageRef | None = None


async def read_run(client: Client, run_id: str, progress: Progress | None = None) -> RunSource:
    handle: WorkflowHandle[Any, RunReport] = client.get_workflow_handle(run_id, result_type=RunReport)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        raise ReportSourceError(f"run {run_id!r} not found: {exc.message}") from None
    facts = await history_facts(client, handle, progress)
    layout = layout_from_plan(facts.plan) if facts.plan is not None else RunLayout()
    thread = facts.slack_thread
    if desc.status not in (None, WorkflowExecutionStatus.RUNNING):
        try:
            report = await handle.result()
        except WorkflowFailureError as exc:
            raise ReportSourceError(f"run {run_id!r} ended without a report: {exc.cause or exc}") from None
        return RunSource(report=report, layout=layout, finished=True, slack_thread=thread)
    try:
        status = await handle.query("status", result_type=RunStatus)
    except RPCError as exc:
        raise ReportSourceError(
            f"cannot read the status of {run_id!r} (is a worker running?): {exc.message}"
        ) from None
    started = desc.start_time or datetime.now(UTC)
    report = await report_so_far(client, status, started, datetime.now(UTC), progress)
    return RunSource(report=report, layout=layout, finished=False, slack_thread=thread)


class HistoryFacts(BaseModel):
    """What the report reads from the run's history beside its result."""

    plan: Plan | None = None
    # The run's Slack thread (its first message), None when it posts to Slack nowhere.
    slack_thread: MessageRef | None = None


async def history_facts(
    client: Client, handle: WorkflowHandle[Any, Any], progress: Progress | None = None
) -> HistoryFacts:
    """The plan and the Slack thread from the run's current execution's history: the results of
    `plan.load` and of the first `notify.run_event` (the one that posts outside any thread), or,
    in an execution continued as new, what its input's state carries. Needs no worker."""
    facts = HistoryFacts()
    scheduled: dict[int, str] = {}
    async for event in handle.fetch_history_events():
        if progress is not None and event.event_id % HISTORY_BEAT == 0:
            progress(f"{event.event_id} history events read")
        if event.HasField("workflow_execution_started_event_attributes"):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [request] = await client.data_converter.decode(payloads, [RunRequest])
            if isinstance(request, RunRequest) and request.state is not None:
                return HistoryFacts(plan=request.state.plan, slack_thread=request.state.slack.thread)
        elif event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            name = attrs.activity_type.name
            if name == "plan.load" and facts.plan is None:
                scheduled[event.event_id] = name
            elif name == "notify.run_event" and facts.slack_thread is None:
                [notice] = await client.data_converter.decode(attrs.input.payloads, [RunNotice])
                if isinstance(notice, RunNotice) and notice.thread is None:
                    scheduled[event.event_id] = name
        elif event.HasField("activity_task_completed_event_attributes"):
            done = event.activity_task_completed_event_attributes
            name = scheduled.pop(done.scheduled_event_id, "")
            if name == "plan.load":
                [plan] = await client.data_converter.decode(done.result.payloads, [Plan])
                facts.plan = plan if isinstance(plan, Plan) else None
            elif name == "notify.run_event":
                [ref] = await client.data_converter.decode(done.result.payloads, [MessageRef])
                facts.slack_thread = ref if isinstance(ref, MessageRef) else None
    return facts


async def report_so_far(
    client: Client, status: RunStatus, started: datetime, now: datetime, progress: Progress | None = None
) -> RunReport:
    """A run in progress as a RunReport: every host that has ended, with its tasks (its host
    workflow's result); hosts in flight as `running` since their workflow started, no tasks yet.
    Waves are not known before the run ends (its status names only the current one)."""
    limit = asyncio.Semaphore(CHILD_READS)
    total = sum(1 for stage in status.stages for s in stage.hosts.values() if s != "pending")
    done = 0

    async def host(stage: str, name: str, state: str) -> HostResult | None:
        nonlocal done
        child: WorkflowHandle[Any, HostResult] = client.get_workflow_handle(
            f"{status.run_id}/{stage}/{name}", result_type=HostResult
        )
        async with limit:
            try:
                if state in ENDED:
                    return await child.result()
                desc = await child.describe()
            except (RPCError, WorkflowFailureError):
                return None  # skipped before it started, or its history is gone
            finally:
                done += 1
                if progress is not None:
                    progress(f"{done}/{total} hosts read")
        return HostResult(
            host=name, stage=stage, status="running", started_at=desc.start_time or now, ended_at=now
        )

    stages: list[StageReport] = []
    for stage in status.stages:
        wanted = [(h, s) for h, s in stage.hosts.items() if s != "pending"]
        results = await asyncio.gather(*(host(stage.name, h, s) for h, s in wanted))
        stages.append(
            StageReport(
                name=stage.name,
                status=stage.status,
                hosts=[r for r in results if r is not None],
                rollback_reason=stage.rollback_reason,
            )
        )
    return RunReport(
        run_id=status.run_id,
        runbook=status.runbook,
        requested_by=status.requested_by,
        check_mode=status.check_mode,
        status=status.status,
        requester=status.requester,
        started_at=started,
        ended_at=now,
        stages=stages,
        gates=status.gates,
        rollback_reason=status.rollback_reason,
        artifacts=status.artifacts,
        notices=status.notices,
    )
