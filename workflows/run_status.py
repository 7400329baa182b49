"""What a run shows of itself: the current details (Temporal UI), its search attributes, the
`status` Query's answer, and the final report.

Pure builders over the run's state; the workflow passes in what Temporal knows (the run's id,
the time) and applies what they return.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

from pitstop.contracts import (
    HostResult,
    Requester,
    RunProgress,
    RunReport,
    RunRequest,
    RunState,
    RunStatus,
)

RUNBOOK_KEY = SearchAttributeKey.for_keyword("PitstopRunbook")
CLUSTER_KEY = SearchAttributeKey.for_keyword("PitstopCluster")
STAGE_KEY = SearchAttributeKey.for_keyword("PitstopStage")
STATUS_KEY = SearchAttributeKey.for_keyword("PitstopStatus")
_KEYS = {k.name: k for k in (STATUS_KEY, RUNBOOK_KEY, CLUSTER_KEY, STAGE_KEY)}


def shown_state(state: RunState, paused: bool) -> RunState:
    return "paused" if paused and state == "running" else state


def search_attribute_updates(
    shown: RunState, progress: RunProgress | None, stage: str | None, indexed: dict[str, str]
) -> list[SearchAttributeUpdate[Any]]:
    """The search attributes that changed since `indexed` (which is brought up to date): each
    upsert is a history event, so only what changed is sent."""
    wanted: dict[str, str] = {STATUS_KEY.name: shown}
    if progress is not None:
        wanted[RUNBOOK_KEY.name] = progress.plan.runbook.name
        if progress.plan.cluster is not None:
            wanted[CLUSTER_KEY.name] = progress.plan.cluster.name
    if stage is not None:
        wanted[STAGE_KEY.name] = stage
    updates: list[SearchAttributeUpdate[Any]] = [
        _KEYS[name].value_set(value) for name, value in wanted.items() if indexed.get(name) != value
    ]
    if updates:
        indexed.update(wanted)
    return updates


def details(progress: RunProgress, shown: RunState) -> str:
    """The run's current details: each stage's state and host counts, open gates, artifacts."""
    lines = [f"**{progress.plan.runbook.name}**: {shown}"]
    for st in progress.statuses:
        counts: dict[str, int] = {}
        for value in st.hosts.values():
            counts[value] = counts.get(value, 0) + 1
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        line = f"- {st.name}: {st.status} ({summary})"
        if st.blocked_reason:
            line += f" — {st.blocked_reason}"
        lines.append(line)
    open_gates = [g.rule.gate_id for g in progress.gates.values() if g.status == "open"]
    if open_gates:
        lines.append(f"Waiting for approval: {', '.join(open_gates)}")
    lines.extend(f"[{a.name}]({a.uri})" for a in progress.artifacts)
    return "\n".join(lines)


def run_status(
    *,
    run_id: str,
    request: RunRequest,
    progress: RunProgress | None,
    requester: Requester,
    shown: RunState,
    current_stage: str | None,
    paused: bool,
    early_notices: list[str],
) -> RunStatus:
    """The `status` Query's answer (before planning: what the request says)."""
    return RunStatus(
        run_id=run_id,
        runbook=progress.plan.runbook.name if progress else request.runbook,
        requested_by=request.requested_by,
        requester=requester,
        check_mode=request.check_mode,
        status=shown,
        current_stage=current_stage,
        paused=paused,
        stages=list(progress.statuses) if progress else [],
        gates=list(progress.gates.values()) if progress else [],
        rollback_reason=progress.rollback_reason if progress else None,
        plan_hash=progress.plan.hashes.content if progress else None,
        artifacts=list(progress.artifacts) if progress else [],
        notices=list(progress.notices) if progress else list(early_notices),
        cluster=progress.plan.cluster if progress else None,
    )


def final_state(progress: RunProgress, abort_reason: str | None, msg: str) -> RunState:
    """How a run that got past planning ended (a rollback's own outcome already decided)."""
    if progress.rollback_reason is not None:
        return "aborted" if abort_reason is not None else "rolled_back"
    if abort_reason is not None:
        return "aborted"
    if msg:
        return "failed"
    if any(s.status == "failed" for s in progress.statuses):
        return "completed_with_failures"
    return "succeeded"


def run_report(
    *,
    run_id: str,
    request: RunRequest,
    progress: RunProgress,
    requester: Requester,
    final: RunState,
    ended_at: datetime,
    run_rollback: list[HostResult],
    msg: str,
) -> RunReport:
    plan = progress.plan
    return RunReport(
        run_id=run_id,
        runbook=plan.runbook.name,
        requested_by=request.requested_by,
        requester=requester,
        check_mode=plan.check_mode,
        status=final,
        started_at=progress.started_at,
        ended_at=ended_at,
        cluster=plan.cluster.name if plan.cluster else None,
        hashes=plan.hashes,
        stages=progress.reports,
        gates=list(progress.gates.values()),
        rollback_reason=progress.rollback_reason,
        run_rollback=run_rollback,
        artifacts=list(progress.artifacts),
        msg=msg,
        notices=list(progress.notices),
    )


def early_report(
    *, run_id: str, request: RunRequest, requester: Requester, now: datetime, msg: str, notices: list[str]
) -> RunReport:
    """The report of a run that ended before its plan existed (refused, or planning failed)."""
    return RunReport(
        run_id=run_id,
        runbook=request.runbook,
        requested_by=request.requested_by,
        requester=requester,
        check_mode=request.check_mode,
        status="failed",
        started_at=now,
        ended_at=now,
        msg=msg,
        notices=list(notices),
    )
