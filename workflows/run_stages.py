"""One `StageRun` per stage: the stage's rule, plan, progress, status and report held together.

A run keeps its stages in `RunProgress` as parallel lists (`plan.runbook.stages`, `plan.stages`,
`statuses`, `reports`) plus the current stage's `StageProgress`, because that is the form that
crosses boundaries (the `status` Query, the report, continue-as-new) and stays compatible with
recorded histories. `StageRuns.of` zips them once, when an execution starts; the engine reads
and writes a stage only through its `StageRun`, so that a stage's state is written in one place
and a host's ending in one method. See the glossary in `pitstop/contracts.py`.

Pure: no Temporal calls (times are passed in), no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from pitstop.contracts import (
    HostResult,
    HostState,
    PlannedStage,
    RunProgress,
    StageProgress,
    StageReport,
    StageState,
    StageStatus,
)
from pitstop.runbook.models import Stage
from workflows.rollout import RolloutLimits, RolloutState, order_hosts, resolve_count, serial_batches

# A stage without `serial`/`rolling` runs all its hosts at once, as Ansible does; this cap
# keeps pending children far below Temporal's 2,000 per execution.
MAX_PARALLEL_HOSTS = 200
# The most hosts one run keeps in flight, whatever `max_in_flight` or a `serial` batch asks:
# Temporal refuses a 2,001st pending child in one execution (observe checks and rollbacks run
# as children too, so this leaves room for them).
ENGINE_MAX_IN_FLIGHT = 1000
# States a stage is in while it runs: shown in its status only; its report keeps the state
# it had before (pending) until the stage ends.
RUNNING_STATES: frozenset[StageState] = frozenset({"waiting_gate", "running", "observing"})


@dataclass(eq=False)
class StageRun:
    """One stage of the run. `progress` is set only while this is the current stage. Compared by
    identity: there is one per stage."""

    rule: Stage
    plan: PlannedStage
    status: StageStatus
    report: StageReport
    progress: StageProgress | None = None

    @property
    def name(self) -> str:
        return self.rule.name

    def current(self) -> StageProgress:
        assert self.progress is not None, f"stage {self.name!r} is not the current stage"
        return self.progress

    # --- the stage's state ---------------------------------------------------------------
    def set_status(self, state: StageState) -> None:
        """The only place a stage's state is written (its status, and its report once it ends)."""
        self.status.status = state
        if state not in RUNNING_STATES:
            self.report.status = state

    def set_rollback_reason(self, reason: str) -> None:
        self.status.rollback_reason = reason
        self.report.rollback_reason = reason

    def stop(self, state: StageState) -> None:
        """The run stops in this stage: hosts that never started are marked skipped."""
        self.set_status(state)
        for host, host_state in self.status.hosts.items():
            if host_state == "pending":
                self.status.hosts[host] = "skipped"

    # --- its hosts -------------------------------------------------------------------------
    def host_started(self, host: str) -> None:
        self.current().started.append(host)
        self.status.hosts[host] = "running"

    def host_ended(self, result: HostResult, rollout: RolloutState, skip_requested: bool) -> HostResult:
        """Record one host's ending everywhere it shows (scheduler, progress, status, report);
        returns the result as reported (an aborted host the operator skipped is `skipped`)."""
        progress = self.current()
        host = result.host
        rollout.in_flight.discard(host)
        host_state: HostState = result.status
        if result.status == "failed":
            rollout.failed.add(host)
            progress.failed.append(host)
        elif result.status == "aborted":
            rollout.skipped.add(host)
            progress.skipped.append(host)
            if skip_requested:
                host_state = "skipped"
                result = result.model_copy(update={"status": "skipped"})
        else:
            rollout.done.add(host)
            progress.done.append(host)
        self.status.hosts[host] = host_state
        self.report.hosts.append(result)
        return result

    def host_skipped(self, host: str, msg: str, now: datetime, rollout: RolloutState | None = None) -> None:
        """A host of this stage that will not run (skipped by the operator, failed earlier)."""
        if rollout is not None:
            rollout.skipped.add(host)
        self.current().skipped.append(host)
        self.status.hosts[host] = "skipped"
        self.report.hosts.append(
            HostResult(host=host, stage=self.name, status="skipped", msg=msg, started_at=now, ended_at=now)
        )

    def hosts_with(self, status: HostState) -> list[str]:
        """Hosts whose reported result has this status."""
        return [h.host for h in self.report.hosts if h.status == status]

    def failed_results(self) -> list[HostResult]:
        """Every failed result of the stage: its hosts, observe checks and compensations."""
        report = self.report
        return [
            h for h in [*report.hosts, *report.observations, *report.rollback_hosts] if h.status == "failed"
        ]

    def failures_said(self, most: int = 2) -> str:
        """The stage's failed hosts and why, so that a rollback reason explains itself."""
        failed = [h for h in self.report.hosts if h.status == "failed"]
        if not failed:
            return ""
        said = "; ".join(
            f"{h.host}: {(h.failed_task + ': ') if h.failed_task else ''}{h.msg[:300]}" for h in failed[:most]
        )
        more = f" (and {len(failed) - most} more)" if len(failed) > most else ""
        return f" ({said}{more})"

    def touched_hosts(self) -> list[str]:
        """Hosts a compensation of this stage must undo: those that started (current stage) or
        that have a result other than skipped (an earlier stage)."""
        if self.progress is not None:
            return list(self.progress.started)
        return [h.host for h in self.report.hosts if h.status != "skipped"]

    # --- scheduling ------------------------------------------------------------------------
    def rollout_state(self) -> RolloutState:
        """The scheduler's view of this stage, resumed from its recorded progress."""
        progress = self.current()
        rule = self.rule
        ordered = order_hosts(
            self.plan.hosts, self.plan.domains, rule.rolling.order if rule.rolling else "inventory"
        )
        return RolloutState(
            hosts=ordered,
            domain_of=self.plan.domains,
            done=set(progress.done),
            failed=set(progress.failed),
            skipped=set(progress.skipped),
        )

    def windows(self, ordered: list[str]) -> list[tuple[set[str] | None, RolloutLimits]]:
        """The stage's launch windows: one per `serial` batch (its hosts only, the batch a
        barrier), or one over every host (a rolling window, or all at once)."""
        rule = self.rule
        if rule.serial is not None:
            return [
                (
                    set(batch),
                    RolloutLimits(
                        max_in_flight=min(len(batch), ENGINE_MAX_IN_FLIGHT),
                        max_fail_percentage=rule.max_fail_percentage,
                        any_errors_fatal=rule.any_errors_fatal,
                        failed_hosts_unavailable=False,
                    ),
                )
                for batch in serial_batches(ordered, list(rule.serial.root))
            ]
        total = len(ordered)
        if rule.rolling is not None:
            window = min(resolve_count(rule.rolling.max_in_flight, total), ENGINE_MAX_IN_FLIGHT)
            per_domain = rule.rolling.max_unavailable_per_domain
        else:
            window, per_domain = min(total, MAX_PARALLEL_HOSTS) or 1, None
        limits = RolloutLimits(
            max_in_flight=window,
            max_unavailable_per_domain=per_domain,
            max_fail_percentage=rule.max_fail_percentage,
            any_errors_fatal=rule.any_errors_fatal,
        )
        return [(None, limits)]


def fresh_records(stages: list[PlannedStage]) -> tuple[list[StageReport], list[StageStatus]]:
    """The reports and statuses of a run that has not started any stage."""
    reports = [StageReport(name=s.name, status="pending") for s in stages]
    statuses = [StageStatus(name=s.name, hosts={h: "pending" for h in s.hosts}) for s in stages]
    return reports, statuses


class StageRuns:
    """The run's stages in order, over one `RunProgress` (shared, not copied)."""

    def __init__(self, progress: RunProgress) -> None:
        self.progress = progress
        plan = progress.plan
        # The one place the four parallel lists are read together.
        self.all = [
            StageRun(rule=rule, plan=planned, status=status, report=report)
            for rule, planned, status, report in zip(
                plan.runbook.stages, plan.stages, progress.statuses, progress.reports, strict=True
            )
        ]
        current = self.current()
        if current is not None:
            current.progress = progress.stage

    def __iter__(self) -> Iterator[StageRun]:
        return iter(self.all)

    def current(self) -> StageRun | None:
        index = self.progress.stage_index
        return self.all[index] if index < len(self.all) else None

    def advance(self) -> None:
        """The current stage is over: the next one (if any) becomes current, from its start."""
        ended = self.current()
        if ended is not None:
            ended.progress = None
        self.progress.stage_index += 1
        self.progress.stage = StageProgress()
        following = self.current()
        if following is not None:
            following.progress = self.progress.stage

    def back_from(self, stage: StageRun) -> list[StageRun]:
        """This stage and every earlier one, latest first (the order compensations run in)."""
        return list(reversed(self.all[: self.all.index(stage) + 1]))

    def before(self, stage: StageRun) -> list[StageRun]:
        return self.all[: self.all.index(stage)]

    def failed_earlier(self, stage: StageRun) -> dict[str, str]:
        """Hosts that failed in a stage before this one, and the first stage they failed in."""
        failed_in: dict[str, str] = {}
        for earlier in self.before(stage):
            for result in earlier.report.hosts:
                if result.status == "failed":
                    failed_in.setdefault(result.host, earlier.name)
        return failed_in
