"""A stage's hosts: launch them within the stage's windows and failure budget, collect how each
ended, and run one-off children (observe checks, compensations).

The scheduling itself is pure (`workflows/rollout.py`, fed by `StageRun.windows`); this is the
workflow side of it: starting children with signed inputs, waking on news (a host ended, an
operator's pause, abort, skip or rollback), and stopping the stage when a rollback trigger
holds. Workflow code, no I/O.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from temporalio import workflow

from workflows import trust

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import HostInput, HostResult, RunVars
    from pitstop.runbook.models import Task
    from workflows import gates as gate_rules
    from workflows import run_vars
    from workflows.rollout import RolloutLimits, RolloutState, blocked_reason, next_hosts, stop_launching
    from workflows.run_children import Command, failed_host
    from workflows.run_context import RunContext
    from workflows.run_fleet import FleetCache
    from workflows.run_stages import StageRun

# How a stage's host loop ended: every eligible host finished, a stop was requested or
# triggered, or nothing can start although hosts remain (their domains are unavailable).
DriveOutcome = Literal["done", "stopped", "stuck"]
# Children started in one workflow task (see `_launch`).
LAUNCH_CHUNK = 100
# Patch ids (issue 15): launches chunked and the history budget checked; the stage loop no
# longer waits for its children to start. Runs recorded before replay as they ran.
LAUNCH_LIMITS = "launch-limits"
LAUNCH_IN_BACKGROUND = "launch-in-background"
# Asked once, in the execution's first workflow task (`HostDriver.decide_at_start`): an
# execution that has it launches as both patches above say, without asking them. Why: on
# replay `workflow.patched` is true only once the task holding its marker is replayed, and
# sdk-core may record a local activity's marker in the task before the one whose activation
# received its result (seen under load); replay delivers the result in the marker's task,
# so a patch asked after a local activity (as LAUNCH_IN_BACKGROUND was, after signing the
# hosts' inputs) answered False there and the run failed as non-deterministic. The first
# task follows no local activity. Runs recorded before ask the two patches where they did.
PATCHES_AT_START = "engine-patches-at-start"
# How much of an execution's history new launches may use (see `_launch_budget`).
HISTORY_EVENTS_BUDGET = 10_240
HISTORY_BYTES_BUDGET = 10 * 1024 * 1024


class ContinueAsNew(Exception):
    """Raised inside the stage loop when the execution should continue as new."""


class HostDriver:
    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.completed: list[HostResult] = []
        self.launches = 0
        # Hosts whose child workflow was asked for and has not started yet.
        self.starting: set[str] = set()
        self._fleet: FleetCache | None = None
        self._patched_at_start = False

    def decide_at_start(self) -> None:
        """Called first thing in the execution's first workflow task (see PATCHES_AT_START)."""
        self._patched_at_start = workflow.patched(PATCHES_AT_START)

    def _patched(self, patch_id: str) -> bool:
        return self._patched_at_start or workflow.patched(patch_id)

    def fleet(self) -> FleetCache:
        """What every host of the run shares, computed once per execution (the plan is fixed)."""
        plan = self.run.p().plan
        if self._fleet is None or self._fleet.plan is not plan:
            self._fleet = FleetCache(plan)
        return self._fleet

    async def run_hosts(self, stage: StageRun, wave: str | None = None) -> DriveOutcome:
        """The stage's hosts (or one wave's) within the stage's windows; a wave's windows are
        cut from its own hosts (a `serial` batch or a percentage is of the wave)."""
        self._skip_failed_earlier(stage)
        state = stage.rollout_state()
        ordered = (
            state.hosts if wave is None else [h for h in state.hosts if stage.plan.wave_of.get(h) == wave]
        )
        for eligible, limits in stage.windows(ordered):
            # A serial batch is a barrier: only its hosts are eligible until it is done; a
            # wave's hosts are the only ones eligible until the wave is done.
            state.eligible = eligible if eligible is not None or wave is None else set(ordered)
            outcome = await self._drive(stage, state, limits)
            if outcome != "done":
                return outcome
        return "done"

    async def _drive(self, stage: StageRun, state: RolloutState, limits: RolloutLimits) -> DriveOutcome:
        """Launch and collect hosts until the eligible ones are done, or the stage stops."""
        run = self.run
        while True:
            while self.completed:
                self._collect(stage, state, self.completed.pop(0))
            for host in sorted(run.hosts_to_skip & set(state.pending()) if run.hosts_to_skip else ()):
                stage.host_skipped(host, "skipped by operator", workflow.now(), state)
            stop = self._stop_reason(stage, state, limits)
            if stop is not None:
                run.halt_reason = stop
            elif not run.paused:
                if self._launch_budget() <= 0:
                    if not state.in_flight and state.pending():
                        raise ContinueAsNew()
                else:
                    hosts = next_hosts(state, limits)[: self._launch_budget()]
                    state.in_flight.update(hosts)
                    if hosts:
                        await self._launch(stage, hosts)
            pending = state.pending()
            stage.status.blocked_reason = self._blocked_reason(state, limits, stop) if pending else None
            run.details()
            if not state.in_flight:
                if stop is not None:
                    return "stopped"
                if not pending:
                    return "done"
                if not run.paused and self._launch_budget() > 0 and not next_hosts(state, limits):
                    return "stuck"
            await self._wait_for_news(state)

    async def _wait_for_news(self, state: RolloutState) -> None:
        # Wake on news only: a condition that stays true (an abort already seen) would
        # spin instead of waiting for the hosts in flight.
        run = self.run
        paused, aborted, rollback = run.paused, run.abort_reason, run.rollback_request
        await workflow.wait_condition(
            lambda: (
                bool(self.completed)
                or run.paused != paused
                or run.abort_reason != aborted
                or run.rollback_request != rollback
                # (Evaluated on every activation: no scan of the stage unless a skip is asked.)
                or bool(run.hosts_to_skip and run.hosts_to_skip & set(state.pending()))
            )
        )

    def _launch_budget(self) -> int:
        """Launches left in this execution before it continues as new: none once Temporal
        suggests it (its history count/size thresholds), or once the history has used a
        fifth of Temporal's hard limits (51,200 events, 50 MB) — a server may have the
        suggestion turned off, and the hosts still in flight must fit in what is left."""
        info = workflow.info()
        if info.is_continue_as_new_suggested():
            return 0
        over_budget = (
            info.get_current_history_length() >= HISTORY_EVENTS_BUDGET
            or info.get_current_history_size() >= HISTORY_BYTES_BUDGET
        )
        if over_budget and self._patched(LAUNCH_LIMITS):
            return 0
        return self.run.request.max_launches_per_execution - self.launches

    def _stop_reason(self, stage: StageRun, state: RolloutState, limits: RolloutLimits) -> str | None:
        if self.run.abort_reason is not None:
            return f"aborted: {self.run.abort_reason}"
        trigger = self.rollback_trigger(stage)
        if trigger is not None:
            return trigger
        if stop_launching(state, limits):
            return blocked_reason(state, limits) or "the stage's failure budget is spent"
        return None

    def _blocked_reason(self, state: RolloutState, limits: RolloutLimits, stop: str | None) -> str | None:
        if stop is not None:
            return f"stopping: {stop}"
        if self.run.paused:
            return "paused by operator"
        return blocked_reason(state, limits)

    def _skip_failed_earlier(self, stage: StageRun) -> None:
        # As in Ansible, a host that failed takes no further part in the run.
        failed_in = self.run.stage_runs().failed_earlier(stage)
        for host in stage.plan.hosts:
            if host in failed_in and host not in stage.current().skipped:
                stage.host_skipped(host, f"not run: failed in stage {failed_in[host]!r}", workflow.now())

    # --- children ------------------------------------------------------------------------
    async def _launch(self, stage: StageRun, hosts: list[str]) -> None:
        """Start one HostWorkflow per host, LAUNCH_CHUNK at a time: each chunk's inputs are
        signed together (one local activity) and its children started in one workflow task,
        which thus stays far below gRPC's 4 MB however wide the window. The stage loop does
        not wait for the last chunk's children to start: a busy server takes seconds to start
        a child, and hosts that end meanwhile must free their slots at once."""
        # Runs recorded before chunking started every host of a launch at once.
        size = LAUNCH_CHUNK if len(hosts) <= LAUNCH_CHUNK or self._patched(LAUNCH_LIMITS) else len(hosts)
        for first in range(0, len(hosts), size):
            last = first + size >= len(hosts)
            await self._launch_chunk(stage, hosts[first : first + size], wait_started=not last)

    async def _launch_chunk(self, stage: StageRun, hosts: list[str], wait_started: bool) -> None:
        wid = workflow.info().workflow_id
        inputs: list[tuple[HostInput, str]] = []
        # `run` is the same for the whole batch: build it once, not once per host.
        run_var = self.run_vars().as_template_var()
        for host in hosts:
            self.launches += 1
            stage.host_started(host)
            child_id = f"{wid}/{stage.name}/{host}"
            self.run.children.ids[host] = child_id
            unsigned = self._host_input(stage, host, stage.rule.tasks, stage_handlers=True, run_var=run_var)
            inputs.append((trust.normalized(unsigned), child_id))
        signed = await trust.sign_host_inputs(inputs)
        pairs = [(inp, child_id) for inp, (_, child_id) in zip(signed, inputs, strict=True)]
        if not self._patched(LAUNCH_IN_BACKGROUND):
            # Runs recorded before the change waited for every start (replayed the same way).
            await asyncio.gather(*(self._start_host(stage, inp, child_id) for inp, child_id in pairs))
            return
        self.starting.update(hosts)
        for inp, child_id in pairs:
            self.run.in_background(self._run_host(stage, inp, child_id))
        if wait_started:
            await workflow.wait_condition(lambda: not self.starting.intersection(hosts))

    async def _run_host(self, stage: StageRun, inp: HostInput, child_id: str) -> None:
        """One host, from its start to its result (in the background of the stage loop)."""
        try:
            handle = await self.run.children.start(inp, child_id, aux=False)
        except Exception as exc:  # a child that cannot start is a failed host, not a stuck stage
            self.starting.discard(inp.host)
            self.completed.append(failed_host(inp.host, stage.name, f"host workflow could not start: {exc}"))
            return
        self.starting.discard(inp.host)
        await self._catch_up(handle, inp.host)
        await self._await_child(inp.host, stage.name, handle)

    async def _start_host(self, stage: StageRun, inp: HostInput, child_id: str) -> None:
        handle = await self.run.children.start(inp, child_id, aux=False)
        await self._catch_up(handle, inp.host)
        self.run.in_background(self._await_child(inp.host, stage.name, handle))

    async def _catch_up(self, handle: Any, host: str) -> None:
        """Tell a host that just started what it missed while its input was signed and it was
        started: an abort, a skip, a pause (each command goes to the hosts running when it is given)."""
        run = self.run
        command: tuple[Command, str] | None = None
        if run.abort_reason is not None:
            command = ("abort", run.abort_reason)
        elif host in run.hosts_to_skip and host in run.children.stage:
            command = ("abort", "skipped by operator")
        elif run.paused:
            command = ("pause", "")
        if command is not None:
            await run.children.command(command[0], command[1], [handle])

    async def _await_child(self, host: str, stage: str, handle: Any) -> None:
        self.completed.append(await self.run.children.result(host, stage, handle))

    async def run_aux(self, stage: StageRun | None, host: str, tasks: list[Task], suffix: str) -> HostResult:
        """A one-off child (observe check, rollback), reachable for its gates and run_once."""
        children = self.run.children
        child_id = f"{workflow.info().workflow_id}/{suffix}"
        children.ids[host] = child_id
        unsigned = self._host_input(stage, host, tasks, stage_handlers=False, select_tags=False)
        [inp] = await trust.sign_host_inputs([(trust.normalized(unsigned), child_id)])
        handle = await children.start(inp, child_id, aux=True)
        await self._catch_up(handle, host)
        try:
            result = await children.result(host, stage.name if stage else "run", handle)
        finally:
            children.ended(host, aux=True)
        self._close_host_gates(host, f"host {host} ended ({result.status})")
        self._keep(result)
        return result

    def _close_host_gates(self, host: str, why: str) -> None:
        # A host that ended (skipped, aborted) while its gate was open no longer waits for
        # it: close the gate, so that it neither takes votes nor counts as open.
        gates = self.run.p().gates
        for gate_id, gate in list(gates.items()):
            if gate.status == "open" and gate_id.endswith(f"@{host}"):
                gates[gate_id] = gate_rules.close_on_run_end(gate, workflow.now(), f"closed: {why}")

    def _collect(self, stage: StageRun, state: RolloutState, result: HostResult) -> None:
        self.run.children.ended(result.host, aux=False)
        self._close_host_gates(result.host, f"host {result.host} ended ({result.status})")
        self._keep(stage.host_ended(result, state, skip_requested=result.host in self.run.hosts_to_skip))

    def _keep(self, result: HostResult) -> None:
        """What a host leaves for the rest of the run: its facts and its artifacts."""
        progress = self.run.p()
        if result.facts:
            progress.host_facts.setdefault(result.host, {}).update(result.facts)
        for host, facts in result.delegated_facts.items():
            progress.host_facts.setdefault(host, {}).update(facts)
        known = {a.uri for a in progress.artifacts}
        for artifact in result.artifacts:
            if artifact.uri not in known:
                progress.artifacts.append(artifact)
                known.add(artifact.uri)

    # --- variables -------------------------------------------------------------------------
    def _host_input(
        self,
        stage: StageRun | None,
        host: str,
        tasks: list[Task],
        stage_handlers: bool,
        select_tags: bool = True,
        run_var: dict[str, Any] | None = None,
    ) -> HostInput:
        progress = self.run.p()
        return run_vars.host_input(
            run_id=workflow.info().workflow_id,
            plan=progress.plan,
            stage=stage,
            host=host,
            tasks=tasks,
            host_facts=progress.host_facts,
            run_var=run_var if run_var is not None else self.run_vars().as_template_var(),
            requested_by=self.run.request.requested_by,
            stage_handlers=stage_handlers,
            fleet=self.fleet(),
            select_tags=select_tags,
        )

    def run_vars(self) -> RunVars:
        run = self.run
        return run_vars.run_vars(
            run_id=workflow.info().workflow_id,
            runbook=run.request.runbook,
            requested_by=run.request.requested_by,
            requester=run.who(),
            check_mode=run.request.check_mode,
            progress=run.progress,
            stages=list(run.stages) if run.stages is not None else [],
        )

    def rollback_trigger(self, stage: StageRun) -> str | None:
        plan = self.run.p().plan
        return run_vars.rollback_trigger(
            stage=stage,
            rollback_request=self.run.rollback_request,
            play=plan.runbook.vars,
            extra=plan.extra_vars,
            run=self.run_vars,
        )
