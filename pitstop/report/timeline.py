"""The rollout as spans: one row per node (its phases from its task outcomes), the stages,
waves and gates as marks on the same clock. Pure: a RunReport and the plan's layout in."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from pitstop.contracts import HostResult, RunReport, TaskOutcome
from pitstop.report.layout import RunLayout
from pitstop.report.phases import Phase, phase_of

# Ansible's implicit localhost is the worker, not a node: stages on it (preflight, a report, a
# change record) are run-wide steps, shown as stage bands, never as a node's row.
WORKER_HOST = "localhost"

Outcome = Literal["ok", "changed", "failed", "ignored", "running"]
# A task that failed and was rescued still failed for the node (the rescue left it cordoned).
_OUTCOME: dict[str, Outcome] = {
    "ok": "ok",
    "changed": "changed",
    "failed": "failed",
    "rescued": "failed",
    "aborted": "failed",
    "ignored": "ignored",
}


class PhaseSpan(BaseModel):
    """Consecutive tasks of one phase and one outcome on one node."""

    phase: Phase
    start: datetime
    end: datetime
    outcome: Outcome
    tasks: list[str] = Field(default_factory=list)
    # The failed task's message (the annotation on the picture).
    reason: str = ""


class NodeRow(BaseModel):
    host: str
    stage: str
    domain: str | None = None
    wave: str | None = None
    status: str
    start: datetime
    end: datetime
    phases: list[PhaseSpan] = Field(default_factory=list)
    # Why the node did not end ok (its failed task and message), empty when it did.
    reason: str = ""
    # Out of service: from its cordon to its uncordon; `until` None when it was never given back.
    out_from: datetime | None = None
    out_until: datetime | None = None


class StageBand(BaseModel):
    name: str
    status: str
    start: datetime
    end: datetime


class WaveMark(BaseModel):
    stage: str
    number: int
    wave: str
    hosts: int
    gate: str | None = None
    started_at: datetime | None = None
    hosts_ended_at: datetime | None = None
    observed_until: datetime | None = None


class VoteMark(BaseModel):
    approver: str
    approve: bool
    at: datetime
    source: str
    verified: bool
    comment: str = ""


class GateMark(BaseModel):
    gate: str
    status: str
    opened_at: datetime
    closed_at: datetime | None = None
    closed_reason: str | None = None
    votes: list[VoteMark] = Field(default_factory=list)


def task_outcome(task: TaskOutcome) -> Outcome | None:
    """None: the task did not run (skipped), so it draws nothing."""
    return _OUTCOME.get(task.status)


def phase_spans(tasks: list[TaskOutcome]) -> list[PhaseSpan]:
    """Tasks that ran, merged into phases. Tasks before the node's first cordon are its
    pre-checks (capacity, facts), and tasks after its first failure its rescue (annotate, give
    jobs back, fail): phase `other`, not the validation or the return to service they resemble."""
    ran = [(t, o) for t in tasks if (o := task_outcome(t)) is not None]
    first_cordon = next((i for i, (t, _) in enumerate(ran) if phase_of(t.module) == "cordon"), 0)
    first_failure = next((i for i, (_, o) in enumerate(ran) if o == "failed"), len(ran))
    spans: list[PhaseSpan] = []
    for i, (task, outcome) in enumerate(ran):
        phase = phase_of(task.module) if first_cordon <= i <= first_failure else "other"
        reason = task.msg if outcome == "failed" else ""
        last = spans[-1] if spans else None
        # One span per run of tasks with the same phase and outcome: a failed check shows red
        # beside the checks of its phase that passed.
        if last is not None and last.phase == phase and last.outcome == outcome:
            last.end = max(last.end, task.ended_at)
            last.tasks.append(task.name)
            continue
        spans.append(
            PhaseSpan(
                phase=phase,
                start=task.started_at,
                end=task.ended_at,
                outcome=outcome,
                tasks=[task.name],
                reason=reason,
            )
        )
    return spans


def out_of_service(host: HostResult) -> tuple[datetime | None, datetime | None]:
    """From the start of its first cordon to the end of its last uncordon that worked."""
    worked = [t for t in host.tasks if t.status in ("ok", "changed")]
    cordons = [t.started_at for t in worked if phase_of(t.module) == "cordon"]
    if not cordons:
        return None, None
    back = [t.ended_at for t in worked if t.module in ("kube.uncordon", "kube.untaint")]
    return min(cordons), max(back) if back else None


def node_rows(report: RunReport, layout: RunLayout) -> list[NodeRow]:
    """One row per host and stage, in the order the hosts started."""
    rows: list[NodeRow] = []
    for stage in report.stages:
        planned = layout.stage(stage.name)
        for host in stage.hosts:
            if host.host == WORKER_HOST:
                continue
            out_from, out_until = out_of_service(host)
            phases = phase_spans(host.tasks) or _running(host)
            reason = ""
            if host.status not in ("ok", "running"):
                reason = _first_failure(phases) or (
                    f"{host.failed_task}: {host.msg}" if host.failed_task else host.msg
                )
            rows.append(
                NodeRow(
                    host=host.host,
                    stage=stage.name,
                    domain=(planned.domains.get(host.host) if planned else None)
                    or layout.domain_of(host.host),
                    wave=planned.wave_of.get(host.host) if planned else None,
                    status=host.status,
                    start=host.started_at,
                    end=host.ended_at,
                    phases=phases,
                    reason=reason,
                    out_from=out_from,
                    out_until=out_until,
                )
            )
    return sorted(rows, key=lambda r: r.start)


def _first_failure(phases: list[PhaseSpan]) -> str:
    """The task that failed first and its message: the cause, not the rescue's `fail` after it."""
    failed = next((s for s in phases if s.outcome == "failed"), None)
    return f"{failed.tasks[0]}: {failed.reason}" if failed is not None else ""


def _running(host: HostResult) -> list[PhaseSpan]:
    # A host in flight (a run in progress) has no task outcomes yet: one grey span.
    if host.status != "running":
        return []
    return [PhaseSpan(phase="other", start=host.started_at, end=host.ended_at, outcome="running")]


def stage_bands(report: RunReport) -> list[StageBand]:
    bands: list[StageBand] = []
    for stage in report.stages:
        if not stage.hosts:
            continue
        bands.append(
            StageBand(
                name=stage.name,
                status=stage.status,
                start=min(h.started_at for h in stage.hosts),
                end=max(h.ended_at for h in stage.hosts),
            )
        )
    return bands


def wave_marks(report: RunReport) -> list[WaveMark]:
    return [
        WaveMark(stage=stage.name, **wave.model_dump(include=set(WaveMark.model_fields) - {"stage"}))
        for stage in report.stages
        for wave in stage.waves
    ]


def gate_marks(report: RunReport) -> list[GateMark]:
    return [
        GateMark(
            gate=gate.rule.gate_id,
            status=gate.status,
            opened_at=gate.opened_at,
            closed_at=gate.closed_at,
            closed_reason=gate.closed_reason,
            votes=[
                VoteMark(
                    approver=v.approver,
                    approve=v.approve,
                    at=v.at,
                    source=v.source,
                    verified=v.verified,
                    comment=v.comment,
                )
                for v in gate.votes
            ],
        )
        for gate in report.gates
    ]
