"""A stage with `waves`: one wave at a time, each with its gate, its hosts and its window.

Before the first wave, every value the canaries must cover (`waves.canary`) needs a canary that
passed. Then, for each wave in the planned order: the wave's gate (every wave after the first;
the stage's own `gate.before` stands for the first), its `checks` (a failing one stops the run
before the wave changes anything), its hosts under the stage's limits, and its `observe`
window. A rejected wave gate or a failing window rolls the stage back as the
stage's `after` gate and window do. Where the stage is (`StageProgress.wave_index`,
`wave_phase`) is recorded, so a continued-as-new run resumes in the same wave and phase.
Workflow code, no I/O.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import StageState, WaveReport
    from workflows import waves
    from workflows.run_context import RunContext
    from workflows.run_fleet import LOCALHOST
    from workflows.run_gate_wait import GateWaits
    from workflows.run_hosts import DriveOutcome, HostDriver
    from workflows.run_rollback import Compensation
    from workflows.run_stages import StageRun

StageOutcome = Literal["ok", "stopped", "rolled_back"]
HostsEnded = Callable[[StageRun, DriveOutcome], Awaitable[StageOutcome | None]]
Stop = Callable[[StageRun, StageState, str], StageOutcome]
Rollback = Callable[[StageRun, str], Awaitable[StageOutcome]]


class WaveRunner:
    def __init__(
        self,
        run: RunContext,
        hosts: HostDriver,
        compensation: Compensation,
        gate_waits: GateWaits,
        *,
        hosts_ended: HostsEnded,
        stop: Stop,
        rollback: Rollback,
    ) -> None:
        self.run = run
        self.hosts = hosts
        self.compensation = compensation
        self.gate_waits = gate_waits
        self.hosts_ended = hosts_ended
        self.stop = stop
        self.rollback = rollback

    async def run_waves(self, stage: StageRun) -> StageOutcome | None:
        progress = stage.current()
        planned = stage.plan
        if progress.wave_index == 0 and progress.wave_phase == "gate":
            refused = self.canary_refusal(stage)
            if refused is not None:
                return self.stop(stage, "failed", refused)
        while progress.wave_index < len(planned.waves):
            index = progress.wave_index
            wave = planned.waves[index]
            stage.status.wave = waves.label(planned, index)
            record = waves.wave_record(stage.report, planned, index)
            if progress.wave_phase == "gate":
                ended = await self._gate(stage, index, record)
                if ended is not None:
                    return ended
                stage.set_status("running")
                self.run.set_status("running")
                record.started_at = workflow.now()
                progress.wave_phase = "checks"
            if progress.wave_phase == "checks":
                refused = await self._checks(stage, wave, record)
                if refused is not None:
                    return self.stop(stage, "failed", refused)
                progress.wave_phase = "hosts"
            if progress.wave_phase == "hosts":
                self.run.details()
                ended = await self.hosts_ended(stage, await self.hosts.run_hosts(stage, wave))
                if ended is not None:
                    return ended
                lost = waves.wave_lost(planned, wave, progress.done, progress.failed)
                if lost:
                    # As a stage where every host failed stops the run: the next domain must not
                    # follow a domain where nothing went through.
                    why = f"every host of wave {wave!r} of stage {stage.name!r} failed{stage.failures_said()}"
                    return self.stop(stage, "failed", why)
                record.hosts_ended_at = workflow.now()
                progress.wave_phase = "observe"
            ended = await self._observe(stage, wave, record)
            if ended is not None:
                return ended
            progress.observe_round = 0
            progress.wave_index += 1
            progress.wave_phase = "gate"
        stage.status.wave = None
        return None

    def canary_refusal(self, stage: StageRun) -> str | None:
        """Why the stage may not start: a value its canaries must cover none of whose canaries
        passed. A canary passed when it ended ok having run a task (not one whose every task
        `--tags` left out)."""
        rule = stage.rule.waves
        if rule is None or rule.canary is None or not stage.plan.coverage:
            return None
        canary = next(s for s in self.run.stage_runs() if s.name == rule.canary.stage)
        passed = {
            h.host
            for h in canary.report.hosts
            if h.status == "ok" and any(t.status in ("ok", "changed") for t in h.tasks)
        }
        missing = waves.uncovered(stage.plan, passed)
        if not missing:
            return None
        return (
            f"stage {stage.name!r} did not start: no canary in stage {canary.name!r} passed for "
            f"{'; '.join(missing)}"
        )

    async def _gate(self, stage: StageRun, index: int, record: WaveReport) -> StageOutcome | None:
        rule = stage.rule.waves
        if index == 0 or rule is None or rule.gate is None:
            return None
        planned = stage.plan
        gate_id = waves.gate_id(stage.name, planned.waves[index])
        record.gate = gate_id
        stage.set_status("waiting_gate")
        prompt = waves.gate_prompt(rule.gate.prompt or "", planned, index, stage.report)
        gate = await self.gate_waits.stage_gate(gate_id, waves.gate_template(stage.name), prompt)
        if self.run.abort_reason is not None:
            return self.stop(stage, "aborted", "")
        if gate.status != "approved":
            return await self.rollback(
                stage, self.run.rollback_request or f"gate {gate_id} {gate.closed_reason}"
            )
        return None

    async def _checks(self, stage: StageRun, wave: str, record: WaveReport) -> str | None:
        """Why the wave may not start (None: it may), from its `checks` run on the worker as
        the wave is about to start; the rest of the stage's hosts are then left out."""
        rule = stage.rule.waves
        if rule is None or not rule.checks:
            return None
        result = await self.hosts.run_aux(stage, LOCALHOST, rule.checks, f"{stage.name}/wave/{wave}/checks")
        stage.report.observations.append(result)
        said = "; ".join(f"{t.name}: {t.msg}" if t.name else t.msg for t in result.tasks if t.msg)
        record.checks = result.msg or said or result.status
        if result.status != "failed":
            return None
        return f"wave {wave!r} of stage {stage.name!r} did not start: {result.failed_task}: {result.msg}"

    async def _observe(self, stage: StageRun, wave: str, record: WaveReport) -> StageOutcome | None:
        rule = stage.rule.waves
        if rule is None or rule.observe is None:
            return None
        stage.set_status("observing")
        self.run.details()
        trigger = await self.compensation.observe(stage, wave)
        if self.run.abort_reason is not None:
            return self.stop(stage, "aborted", "")
        if trigger is not None:
            return await self.rollback(stage, trigger)
        record.observed_until = workflow.now()
        stage.set_status("running")
        return None
