"""A stage's observe window and the run's rollback (a saga).

`observe` watches a stage for `observe.duration`, running its checks every `interval`; a failing
check, or an operator's rollback, is a rollback trigger. `rollback` compensates in reverse
order: this stage, then every earlier stage; the run-level `rollback` runs at the end of the
run. Workflow code (it runs one-off children through the `HostDriver`), no I/O.
"""

from __future__ import annotations

import contextlib
import math
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import HostResult
    from workflows.run_context import RunContext
    from workflows.run_fleet import LOCALHOST
    from workflows.run_hosts import HostDriver
    from workflows.run_stages import StageRun

# Shortest observe interval honoured; a zero interval would make the window a busy loop.
MIN_OBSERVE_INTERVAL_S = 0.05


def observe_seconds(stage: StageRun) -> float:
    """The window as planned (a templated duration resolved by plan.load); a plan recorded
    before durations could be templated holds only literal ones."""
    planned = stage.plan.observe_seconds
    if planned is not None:
        return planned
    observe = stage.rule.observe
    assert observe is not None and not isinstance(observe.duration, str)
    return float(observe.duration)


class Compensation:
    def __init__(self, run: RunContext, driver: HostDriver) -> None:
        self.run = run
        self.driver = driver

    async def observe(self, stage: StageRun, wave: str | None = None) -> str | None:
        """Watch the stage (or its wave) for `observe.duration`: run the checks every
        `interval`; a failing check, or an operator's rollback, is a rollback trigger."""
        run = self.run
        progress = stage.current()
        observe = stage.rule.observe if wave is None else stage.rule.waves and stage.rule.waves.observe
        assert observe
        seconds = observe_seconds(stage) if wave is None else stage.plan.wave_observe_seconds
        assert seconds is not None
        where = f"stage {stage.name!r}" if wave is None else f"stage {stage.name!r}, wave {wave!r}"
        child = f"{stage.name}/observe" if wave is None else f"{stage.name}/wave/{wave}/observe"
        # A window shorter than its interval is looked at once, at its end (not after a whole
        # interval): `-e observe_window=5s` on a stage that looks every 15s watches 5s.
        interval = max(min(observe.interval, seconds), MIN_OBSERVE_INTERVAL_S)
        rounds = max(1, math.floor(seconds / interval + 1e-9))
        # A plan shows what the checks would say once; it does not wait out the window.
        check_mode = run.p().plan.check_mode
        while progress.observe_round < rounds:
            if not check_mode:
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(
                        lambda: run.rollback_request is not None or run.abort_reason is not None,
                        timeout=timedelta(seconds=interval),
                    )
            if run.abort_reason is not None or run.rollback_request is not None:
                return run.rollback_request
            n = progress.observe_round
            progress.observe_round += 1
            if observe.checks:
                result = await self.driver.run_aux(stage, LOCALHOST, observe.checks, f"{child}/{n}")
                stage.report.observations.append(result)
                if result.status == "failed":
                    return f"observe check failed in {where}: {result.failed_task}: {result.msg}"
            if check_mode:
                break
        return None

    async def rollback(self, stage: StageRun, reason: str) -> None:
        """Compensate in reverse order: this stage, then every earlier stage (a saga)."""
        run = self.run
        run.p().rollback_reason = reason
        stage.set_rollback_reason(reason)
        run.set_status("rolling_back")
        if run.slack is not None:
            run.slack.rolling_back(reason)
        failures: list[str] = []
        for earlier in run.stage_runs().back_from(stage):
            if run.abort_reason is not None:
                break
            if earlier.rule.rollback:
                failures += await self._compensate(earlier)
                earlier.set_status("rolled_back")
            elif earlier is stage:
                # Nothing undoes this stage: say so rather than call it rolled back (a
                # reviewer must not read "rolled back" for a control plane left upgraded).
                earlier.set_status("failed")
            else:
                earlier.set_rollback_reason("no rollback tasks: left as it is")
            run.details()
        run.msg = f"rolled back: {reason}"
        if failures:
            run.msg += f"; compensation failed on {', '.join(failures)}"

    async def _compensate(self, stage: StageRun) -> list[str]:
        """Run a stage's rollback tasks on the hosts it touched (latest first, or once on
        localhost); returns where they failed."""
        touched = stage.touched_hosts()
        if stage.rule.rollback_run_once:
            targets = [LOCALHOST] if touched else []
        else:
            targets = list(reversed(touched))
        failures: list[str] = []
        for host in targets:
            if self.run.abort_reason is not None:
                break
            result = await self.driver.run_aux(
                stage, host, stage.rule.rollback, f"{stage.name}/rollback/{host}"
            )
            stage.report.rollback_hosts.append(result)
            if result.status != "ok":
                failures.append(f"{stage.name}/{host}")
        return failures

    async def run_level(self) -> list[HostResult]:
        """The runbook's own `rollback` tasks, once, on localhost."""
        progress = self.run.p()
        if not progress.plan.runbook.rollback:
            return []
        result = await self.driver.run_aux(None, LOCALHOST, progress.plan.runbook.rollback, "run/rollback")
        if result.status != "ok":
            self.run.msg += f"; run-level rollback failed: {result.msg}"
        return [result]
