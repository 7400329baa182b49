"""RunbookWorkflow: plan, then stages (gates, rolling hosts, observe), rollback, report.

The process it encodes, per stage: open the `before` gate; launch one HostWorkflow per
host within the stage's `serial`/`rolling` limits and failure budget; after each host,
check `rollback_when`; watch the `observe` window; open the `after` gate. A rollback
trigger stops new launches, lets in-flight hosts finish, and runs the compensations in
reverse order (this stage, earlier stages, then the run-level `rollback`).

All state lives in one `RunProgress` model, so continuing as new is one call.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import (
        Decision,
        GateClosed,
        GateState,
        HostGateRequest,
        HostInput,
        HostResult,
        HostState,
        Plan,
        RunOnceClaim,
        RunOnceReply,
        RunProgress,
        RunReport,
        RunRequest,
        RunState,
        RunStatus,
        StageProgress,
        StageReport,
        StageStatus,
        VoteRecord,
    )
    from pitstop.runbook.models import Stage, Task
    from pitstop.runbook.templating import TemplateError, evaluate_bool
    from workflows import gates as gate_rules
    from workflows.host import HostWorkflow
    from workflows.rollout import (
        RolloutLimits,
        RolloutState,
        blocked_reason,
        next_hosts,
        order_hosts,
        resolve_count,
        serial_batches,
        stop_launching,
    )

RUNBOOK_KEY = SearchAttributeKey.for_keyword("PitstopRunbook")
CLUSTER_KEY = SearchAttributeKey.for_keyword("PitstopCluster")
STAGE_KEY = SearchAttributeKey.for_keyword("PitstopStage")
STATUS_KEY = SearchAttributeKey.for_keyword("PitstopStatus")

# A stage without `serial`/`rolling` runs all its hosts at once, as Ansible does; this cap
# keeps pending children far below Temporal's 2,000 per execution.
MAX_PARALLEL_HOSTS = 200
LOCALHOST = "localhost"


class _ContinueAsNew(Exception):
    """Raised inside the stage loop when the execution should continue as new."""


@workflow.defn(name="RunbookWorkflow")
class RunbookWorkflow:
    @workflow.init
    def __init__(self, request: RunRequest) -> None:
        self.request = request
        self.progress: RunProgress | None = request.state
        self.run_status: RunState = "planning" if request.state is None else "running"
        self.paused = False
        self.abort_reason: str | None = None
        self.rollback_request: str | None = None
        self.skip_requests: set[str] = set()
        self.children: dict[str, Any] = {}
        self.completed: list[HostResult] = []
        self.launches = 0
        self.msg = ""
        # Keeps references to background tasks (child watchers, host gate timers).
        self._background: set[asyncio.Task[None]] = set()
        self._run_once_waiters: dict[str, list[str]] = {}
        self._indexed: dict[str, str] = {}

    # --- Update, Signals, Query --------------------------------------------------------
    @workflow.update
    def decide(self, decision: Decision) -> VoteRecord:
        """Vote on a gate. A refusal is recorded in the run's status and returned as an error."""
        gate_id = self._gate_id_for(decision)
        gate = self._gates().get(gate_id)
        now = workflow.now()
        reason = gate_rules.refusal_reason(gate, decision, self.request.requested_by, now, gate_id)
        if reason is not None:
            if gate is not None:
                self._gates()[gate_id] = gate_rules.record_refusal(gate, decision, reason, now)
            raise ApplicationError(reason, type="VoteRefused", non_retryable=True)
        assert gate is not None
        updated = gate_rules.apply_vote(gate, decision, now)
        self._gates()[gate_id] = updated
        return updated.votes[-1]

    @decide.validator
    def _validate_decide(self, decision: Decision) -> None:
        # Requests that would add nothing to the audit trail are rejected before they reach
        # history: votes for gates that do not exist, and the same refused vote repeated.
        gate_id = self._gate_id_for(decision)
        gate = self._gates().get(gate_id)
        reason = gate_rules.refusal_reason(gate, decision, self.request.requested_by, workflow.now(), gate_id)
        if reason is None:
            return
        if gate is None or gate_rules.is_repeat_refusal(gate, decision, reason):
            raise ValueError(reason)

    @workflow.signal(name="decide_signal")
    def decide_signal(self, decision: Decision) -> None:
        """Signal twin of `decide` for clients that can only signal; refusals are recorded."""
        gate_id = self._gate_id_for(decision)
        gate = self._gates().get(gate_id)
        now = workflow.now()
        reason = gate_rules.refusal_reason(gate, decision, self.request.requested_by, now, gate_id)
        if gate is None:
            workflow.logger.warning("vote refused: %s", reason)
            return
        if reason is not None:
            if not gate_rules.is_repeat_refusal(gate, decision, reason):
                self._gates()[gate_id] = gate_rules.record_refusal(gate, decision, reason, now)
            return
        self._gates()[gate_id] = gate_rules.apply_vote(gate, decision, now)

    @workflow.signal
    async def pause(self) -> None:
        self.paused = True
        await self._tell_children("pause")

    @workflow.signal
    async def resume(self) -> None:
        self.paused = False
        await self._tell_children("resume")

    @workflow.signal
    async def abort(self, reason: str) -> None:
        self.abort_reason = reason or "aborted by operator"
        await self._tell_children("abort", self.abort_reason)

    @workflow.signal
    async def skip_host(self, host: str) -> None:
        self.skip_requests.add(host)
        if host in self.children:
            await self.children[host].signal("abort", "skipped by operator")

    @workflow.signal
    def rollback(self, reason: str) -> None:
        self.rollback_request = reason or "rollback requested by operator"

    @workflow.signal
    async def host_gate(self, request: HostGateRequest) -> None:
        if self.progress is None or request.gate_id in self.progress.gates:
            return
        rule = self.progress.plan.gates.get(request.template)
        if rule is None:
            await self._answer_host_gate(request.host, request.gate_id, False, "is not in the plan")
            return
        rule = rule.model_copy(update={"gate_id": request.gate_id})
        if self.progress.plan.check_mode:
            await self._answer_host_gate(request.host, request.gate_id, True, "skipped in check mode")
            return
        self.progress.gates[request.gate_id] = gate_rules.open_gate(rule, workflow.now())
        self._background.add(asyncio.create_task(self._host_gate_watch(request.host, request.gate_id)))

    @workflow.signal
    async def run_once_claim(self, claim: RunOnceClaim) -> None:
        assert self.progress is not None
        known = self.progress.run_once.get(claim.task_id)
        if known is None:
            known = RunOnceReply(task_id=claim.task_id, owner=claim.host)
            self.progress.run_once[claim.task_id] = known
            self._waiters(claim.task_id).append(claim.host)
            await self._signal_host(claim.host, "run_once_reply", known)
            return
        self._waiters(claim.task_id).append(claim.host)
        if known.result is not None:
            await self._signal_host(claim.host, "run_once_reply", known)

    @workflow.signal
    async def run_once_done(self, reply: RunOnceReply) -> None:
        assert self.progress is not None
        self.progress.run_once[reply.task_id] = reply
        for host in self._waiters(reply.task_id):
            if host != reply.owner:
                await self._signal_host(host, "run_once_reply", reply)

    @workflow.query
    def status(self) -> RunStatus:
        progress = self.progress
        return RunStatus(
            run_id=workflow.info().workflow_id,
            runbook=progress.plan.runbook.name if progress else self.request.runbook,
            requested_by=self.request.requested_by,
            check_mode=self.request.check_mode,
            status="paused" if self.paused and self.run_status == "running" else self.run_status,
            current_stage=self._current_stage_name(),
            paused=self.paused,
            stages=list(progress.statuses) if progress else [],
            gates=list(progress.gates.values()) if progress else [],
            rollback_reason=progress.rollback_reason if progress else None,
            plan_hash=progress.plan.hashes.content if progress else None,
        )

    # --- the run -----------------------------------------------------------------------
    @workflow.run
    async def run(self, request: RunRequest) -> RunReport:
        if self.progress is None:
            planned = await self._load_plan(request)
            if isinstance(planned, RunReport):
                return planned
            self.progress = RunProgress(
                plan=planned,
                started_at=workflow.now(),
                reports=[StageReport(name=s.name, status="pending") for s in planned.stages],
                statuses=[
                    StageStatus(name=s.name, hosts={h: "pending" for h in s.hosts}) for s in planned.stages
                ],
            )
        progress = self.progress
        self._set_status("running")
        try:
            while progress.stage_index < len(progress.plan.stages):
                outcome = await self._run_stage(progress.stage_index)
                if outcome != "ok":
                    break
                progress.stage_index += 1
                progress.stage = StageProgress()
        except _ContinueAsNew:
            await workflow.wait_condition(workflow.all_handlers_finished)
            progress.executions += 1
            workflow.continue_as_new(request.model_copy(update={"state": progress}))
        return await self._finish()

    async def _load_plan(self, request: RunRequest) -> Plan | RunReport:
        try:
            plan: Plan = await workflow.execute_activity(
                "plan.load",
                request.model_copy(update={"state": None}),
                result_type=Plan,
                start_to_close_timeout=timedelta(minutes=2),
                retry_policy=RetryPolicy(maximum_attempts=3, non_retryable_error_types=["InvalidArgs"]),
            )
        except ActivityError as err:
            cause = err.cause
            return self._early_report(f"plan failed: {cause if cause is not None else err}")
        if request.expected_hashes is not None:
            changed = plan.hashes.differences(request.expected_hashes)
            if changed or plan.hashes.content != request.expected_hashes.content:
                what = ", ".join(changed) or "extra vars, limit or tags"
                return self._early_report(
                    f"refusing to apply plan {request.plan_of or '?'}: {what} changed since it was planned; "
                    "run `pitstop plan` again and review the new plan"
                )
        return plan

    def _early_report(self, msg: str) -> RunReport:
        self.run_status = "failed"
        self.msg = msg
        now = workflow.now()
        return RunReport(
            run_id=workflow.info().workflow_id,
            runbook=self.request.runbook,
            requested_by=self.request.requested_by,
            check_mode=self.request.check_mode,
            status="failed",
            started_at=now,
            ended_at=now,
            msg=msg,
        )

    async def _run_stage(self, index: int) -> str:
        """Run one stage from its recorded phase; returns 'ok', 'stopped' or 'rolled_back'."""
        progress = self._p()
        stage = progress.plan.runbook.stages[index]
        sp = progress.stage
        status = progress.statuses[index]
        self._upsert(stage=stage.name)
        if sp.phase == "gate_before":
            if stage.gate is not None and stage.gate.before:
                status.status = "waiting_gate"
                gate = await self._stage_gate(f"{stage.name}:before")
                if gate.status != "approved":
                    status.status = "aborted" if self.abort_reason else "skipped"
                    progress.reports[index].status = status.status
                    self.msg = f"stopped before stage {stage.name!r}: {gate.closed_reason}"
                    return "stopped"
            sp.phase = "hosts"
        if sp.phase == "hosts":
            status.status = "running"
            self._set_status("running")
            await self._run_hosts(index, stage)
            if self.abort_reason is not None:
                status.status = "aborted"
                progress.reports[index].status = "aborted"
                return "stopped"
            sp.phase = "observe"
        trigger = self._rollback_trigger(index, stage, final=True)
        if trigger is None and sp.phase == "observe":
            if stage.observe is not None:
                status.status = "observing"
                trigger = await self._observe(index, stage)
            if trigger is None:
                sp.phase = "gate_after"
        if trigger is None and sp.phase == "gate_after":
            if stage.gate is not None and stage.gate.after:
                status.status = "waiting_gate"
                gate = await self._stage_gate(f"{stage.name}:after")
                if gate.status != "approved":
                    trigger = f"gate {stage.name}:after {gate.closed_reason}"
            sp.phase = "done"
        if trigger is not None:
            await self._rollback(index, trigger)
            return "rolled_back"
        failed = bool(sp.failed)
        status.status = "failed" if failed else "ok"
        progress.reports[index].status = status.status
        return "ok"

    # --- hosts -------------------------------------------------------------------------
    async def _run_hosts(self, index: int, stage: Stage) -> None:
        progress = self._p()
        planned = progress.plan.stages[index]
        sp = progress.stage
        ordered = order_hosts(
            planned.hosts, planned.domains, stage.rolling.order if stage.rolling else "inventory"
        )
        total = len(ordered)
        state = RolloutState(
            hosts=ordered,
            domain_of=planned.domains,
            done=set(sp.done),
            failed=set(sp.failed),
            skipped=set(sp.skipped),
        )
        if stage.serial is not None:
            for batch in serial_batches(ordered, list(stage.serial.root)):
                limits = RolloutLimits(
                    max_in_flight=len(batch),
                    max_fail_percentage=stage.max_fail_percentage,
                    any_errors_fatal=stage.any_errors_fatal,
                    failed_hosts_unavailable=False,
                )
                # The batch barrier: only this batch's hosts are eligible until it is done.
                state.eligible = set(batch)
                if not await self._drive(index, stage, state, limits):
                    return
            return
        if stage.rolling is not None:
            window = resolve_count(stage.rolling.max_in_flight, total)
            per_domain = stage.rolling.max_unavailable_per_domain
        else:
            window, per_domain = min(total, MAX_PARALLEL_HOSTS) or 1, None
        limits = RolloutLimits(
            max_in_flight=window,
            max_unavailable_per_domain=per_domain,
            max_fail_percentage=stage.max_fail_percentage,
            any_errors_fatal=stage.any_errors_fatal,
        )
        await self._drive(index, stage, state, limits)

    async def _drive(self, index: int, stage: Stage, state: RolloutState, limits: RolloutLimits) -> bool:
        """Launch and collect hosts until the eligible ones are done. False = stop the stage."""
        progress = self._p()
        status = progress.statuses[index]
        while True:
            self._apply_skips(state, status)
            stopping = self._stopping(index, stage, state, limits)
            if not stopping and not self.paused:
                if self.launches >= self.request.max_launches_per_execution:
                    stopping = True
                    if not state.in_flight and state.pending():
                        raise _ContinueAsNew()
                else:
                    for host in next_hosts(state, limits)[
                        : self.request.max_launches_per_execution - self.launches
                    ]:
                        await self._launch(index, stage, host)
                        state.in_flight.add(host)
            status.blocked_reason = blocked_reason(state, limits) if state.pending() else None
            self._details()
            if not state.in_flight and (stopping or not state.pending()):
                return not stopping or not self._trigger_pending(index, stage)
            await workflow.wait_condition(
                lambda: (
                    bool(self.completed)
                    or self.abort_reason is not None
                    or self.rollback_request is not None
                    or bool(self.skip_requests & set(state.pending()))
                    or (
                        not self.paused
                        and bool(next_hosts(state, limits))
                        and not self._stopping_now(state, limits)
                    )
                )
            )
            while self.completed:
                self._collect(index, stage, state, self.completed.pop(0))

    def _stopping_now(self, state: RolloutState, limits: RolloutLimits) -> bool:
        return self.launches >= self.request.max_launches_per_execution or stop_launching(state, limits)

    def _stopping(self, index: int, stage: Stage, state: RolloutState, limits: RolloutLimits) -> bool:
        if self.abort_reason is not None:
            return True
        return stop_launching(state, limits) or self._trigger_pending(index, stage)

    def _trigger_pending(self, index: int, stage: Stage) -> bool:
        return (
            self.rollback_request is not None or self._rollback_trigger(index, stage, final=False) is not None
        )

    def _apply_skips(self, state: RolloutState, status: StageStatus) -> None:
        for host in sorted(self.skip_requests & set(state.pending())):
            state.skipped.add(host)
            self._p().stage.skipped.append(host)
            status.hosts[host] = "skipped"

    async def _launch(self, index: int, stage: Stage, host: str) -> None:
        progress = self._p()
        self.launches += 1
        progress.stage.started.append(host)
        progress.statuses[index].hosts[host] = "running"
        handle = await workflow.start_child_workflow(
            HostWorkflow.run,
            self._host_input(stage, host, stage.tasks, stage_handlers=True),
            id=f"{workflow.info().workflow_id}/{stage.name}/{host}",
            task_queue=workflow.info().task_queue,
        )
        self.children[host] = handle
        if self.paused:
            await handle.signal("pause")
        self._background.add(asyncio.create_task(self._await_child(host, stage.name, handle)))

    async def _await_child(self, host: str, stage: str, handle: Any) -> None:
        self.completed.append(await self._child_result(host, stage, handle))

    async def _child_result(self, host: str, stage: str, handle: Any) -> HostResult:
        try:
            result: HostResult = await handle
            return result
        except ChildWorkflowError as err:
            now = workflow.now()
            return HostResult(
                host=host,
                stage=stage,
                status="failed",
                msg=f"host workflow failed: {err.cause or err}",
                started_at=now,
                ended_at=now,
            )

    def _collect(self, index: int, stage: Stage, state: RolloutState, result: HostResult) -> None:
        progress = self._p()
        self.children.pop(result.host, None)
        state.in_flight.discard(result.host)
        host_state: HostState = result.status
        if result.status == "failed":
            state.failed.add(result.host)
            progress.stage.failed.append(result.host)
        elif result.status == "aborted":
            state.skipped.add(result.host)
            progress.stage.skipped.append(result.host)
            host_state = "skipped" if result.host in self.skip_requests else "aborted"
        else:
            state.done.add(result.host)
            progress.stage.done.append(result.host)
        progress.statuses[index].hosts[result.host] = host_state
        progress.reports[index].hosts.append(result)

    def _host_input(
        self,
        stage: Stage | None,
        host: str,
        tasks: list[Task],
        stage_handlers: bool,
        extra: dict[str, Any] | None = None,
    ) -> HostInput:
        plan = self._p().plan
        hostvars = plan.hostvars.get(host, {"inventory_hostname": host, "group_names": []})
        merged: dict[str, Any] = dict(hostvars)
        merged.update(plan.runbook.vars)
        if stage is not None:
            merged.update(stage.vars)
        merged.update(plan.extra_vars)
        merged["run"] = self._run_vars()
        merged["stage"] = self._stage_vars(stage)
        if extra:
            merged.update(extra)
        handlers = [*(stage.handlers if stage is not None and stage_handlers else []), *plan.runbook.handlers]
        return HostInput(
            run_workflow_id=workflow.info().workflow_id,
            run_id=workflow.info().workflow_id,
            stage=stage.name if stage is not None else "run",
            host=host,
            tasks=tasks,
            handlers=handlers,
            vars=merged,
            hostvars=plan.hostvars,
            modules=plan.modules,
            task_queue=plan.task_queue,
            cluster=plan.cluster,
            check_mode=plan.check_mode,
            tags=plan.tags,
            skip_tags=plan.skip_tags,
            approvers=plan.runbook.approvers,
            requested_by=self.request.requested_by,
        )

    def _run_vars(self) -> dict[str, Any]:
        progress = self.progress
        return {
            "id": workflow.info().workflow_id,
            "requested_by": self.request.requested_by,
            "check_mode": self.request.check_mode,
            "rollback_reason": progress.rollback_reason if progress else None,
        }

    def _stage_vars(self, stage: Stage | None) -> dict[str, Any]:
        progress = self._p()
        if stage is None:
            return {}
        index = next(i for i, s in enumerate(progress.plan.runbook.stages) if s.name == stage.name)
        planned = progress.plan.stages[index]
        report = progress.reports[index]
        sp = progress.stage if index == progress.stage_index else None
        return {
            "name": stage.name,
            "hosts": list(planned.hosts),
            "done_hosts": list(sp.done) if sp else [h.host for h in report.hosts if h.status == "ok"],
            "failed_hosts": list(sp.failed) if sp else [h.host for h in report.hosts if h.status == "failed"],
            "skipped_hosts": list(sp.skipped) if sp else [],
            "results": {h.host: {"status": h.status, "msg": h.msg} for h in report.hosts},
        }

    # --- rollback triggers, observe, rollback ------------------------------------------------
    def _rollback_trigger(self, index: int, stage: Stage, final: bool) -> str | None:
        progress = self._p()
        if self.rollback_request is not None:
            return self.rollback_request
        sp = progress.stage
        total = len(progress.plan.stages[index].hosts)
        if stage.any_errors_fatal and sp.failed:
            return f"any_errors_fatal: {sp.failed[0]} failed"
        pct = stage.max_fail_percentage
        if pct is not None and total and len(sp.failed) * 100.0 > pct * total:
            return (
                f"failure budget exceeded in stage {stage.name!r}: {len(sp.failed)} of {total} hosts failed "
                f"(max_fail_percentage {pct:g})"
            )
        if stage.rollback_when:
            ctx = {**progress.plan.runbook.vars, **stage.vars, **progress.plan.extra_vars}
            ctx["stage"] = self._stage_vars(stage)
            ctx["run"] = self._run_vars()
            for expression in stage.rollback_when:
                try:
                    if evaluate_bool(expression, ctx):
                        return f"rollback_when held: {expression}"
                except TemplateError as exc:
                    return f"rollback_when could not be evaluated ({exc}); rolling back to be safe"
        return None

    async def _observe(self, index: int, stage: Stage) -> str | None:
        progress = self._p()
        observe = stage.observe
        assert observe is not None
        rounds = max(1, int(observe.duration // max(observe.interval, 1.0)))
        while progress.stage.observe_round < rounds:
            await workflow.sleep(timedelta(seconds=observe.interval))
            n = progress.stage.observe_round
            progress.stage.observe_round += 1
            if not observe.checks:
                continue
            handle = await workflow.start_child_workflow(
                HostWorkflow.run,
                self._host_input(stage, LOCALHOST, observe.checks, stage_handlers=False),
                id=f"{workflow.info().workflow_id}/{stage.name}/observe/{n}",
                task_queue=workflow.info().task_queue,
            )
            result = await self._child_result(LOCALHOST, stage.name, handle)
            progress.reports[index].observations.append(result)
            if result.status != "ok":
                return f"observe check failed in stage {stage.name!r}: {result.failed_task}: {result.msg}"
            if self.rollback_request is not None or self.abort_reason is not None:
                return self.rollback_request
        return None

    async def _rollback(self, index: int, reason: str) -> None:
        progress = self._p()
        progress.rollback_reason = reason
        progress.statuses[index].rollback_reason = reason
        progress.reports[index].rollback_reason = reason
        self._set_status("rolling_back")
        # Compensation in reverse order: this stage, then every earlier stage.
        for i in range(index, -1, -1):
            stage = progress.plan.runbook.stages[i]
            report = progress.reports[i]
            if stage.rollback:
                touched = progress.stage.started if i == index else [h.host for h in report.hosts]
                targets = [LOCALHOST] if stage.rollback_run_once else list(reversed(touched))
                for host in targets:
                    handle = await workflow.start_child_workflow(
                        HostWorkflow.run,
                        self._host_input(stage, host, stage.rollback, stage_handlers=False),
                        id=f"{workflow.info().workflow_id}/{stage.name}/rollback/{host}",
                        task_queue=workflow.info().task_queue,
                    )
                    report.rollback_hosts.append(await self._child_result(host, stage.name, handle))
            progress.statuses[i].status = "rolled_back"
            report.status = "rolled_back"
        self.msg = f"rolled back: {reason}"

    async def _run_level_rollback(self) -> list[HostResult]:
        progress = self._p()
        if not progress.plan.runbook.rollback:
            return []
        handle = await workflow.start_child_workflow(
            HostWorkflow.run,
            self._host_input(None, LOCALHOST, progress.plan.runbook.rollback, stage_handlers=False),
            id=f"{workflow.info().workflow_id}/run/rollback",
            task_queue=workflow.info().task_queue,
        )
        return [await self._child_result(LOCALHOST, "run", handle)]

    # --- gates ---------------------------------------------------------------------------
    async def _stage_gate(self, gate_id: str) -> GateState:
        progress = self._p()
        gate = progress.gates.get(gate_id)
        if gate is None:
            rule = progress.plan.gates[gate_id]
            gate = gate_rules.open_gate(rule, workflow.now())
            if progress.plan.check_mode:
                gate = gate.model_copy(
                    update={
                        "status": "approved",
                        "closed_at": workflow.now(),
                        "closed_reason": (
                            f"check mode: would ask {', '.join(rule.approvers)} (quorum {rule.quorum})"
                        ),
                    }
                )
            progress.gates[gate_id] = gate
        self._set_status("waiting_gate")
        gate = await self._wait_gate(gate_id)
        self._set_status("running")
        return gate

    async def _wait_gate(self, gate_id: str) -> GateState:
        progress = self._p()
        while True:
            gate = progress.gates[gate_id]
            if gate.status != "open":
                return gate
            if self.abort_reason is not None:
                progress.gates[gate_id] = gate_rules.close_on_run_end(gate, workflow.now(), self.abort_reason)
                return progress.gates[gate_id]
            remaining = (gate.deadline - workflow.now()).total_seconds() if gate.deadline else None
            try:
                await workflow.wait_condition(
                    lambda: progress.gates[gate_id].status != "open" or self.abort_reason is not None,
                    timeout=timedelta(seconds=max(remaining, 0.001)) if remaining is not None else None,
                )
            except TimeoutError:
                updated, escalated = gate_rules.apply_timeout(progress.gates[gate_id], workflow.now())
                progress.gates[gate_id] = updated
                if escalated:
                    workflow.logger.warning(
                        "gate %s escalated to %s", gate_id, ", ".join(updated.rule.escalate_to)
                    )

    async def _host_gate_watch(self, host: str, gate_id: str) -> None:
        gate = await self._wait_gate(gate_id)
        approved = gate.status == "approved"
        await self._answer_host_gate(host, gate_id, approved, gate.closed_reason or gate.status)

    async def _answer_host_gate(self, host: str, gate_id: str, approved: bool, reason: str) -> None:
        closed = GateClosed(gate_id=gate_id, approved=approved, reason=reason)
        await self._signal_host(host, "gate_closed", closed)

    def _gate_id_for(self, decision: Decision) -> str:
        if decision.gate:
            return decision.gate
        open_ids = [g.rule.gate_id for g in self._gates().values() if g.status == "open"]
        if len(open_ids) == 1:
            return open_ids[0]
        if len(open_ids) > 1:
            raise ValueError(f"several gates are open ({', '.join(open_ids)}); name one with --gate")
        return "(none open)"

    def _gates(self) -> dict[str, GateState]:
        return self.progress.gates if self.progress is not None else {}

    # --- children, status, report --------------------------------------------------------
    async def _signal_host(self, host: str, signal: str, arg: Any) -> None:
        handle = self.children.get(host)
        if handle is not None:
            await handle.signal(signal, arg)

    async def _tell_children(self, signal: str, *args: Any) -> None:
        for handle in list(self.children.values()):
            await handle.signal(signal, *args)

    def _waiters(self, task_id: str) -> list[str]:
        return self._run_once_waiters.setdefault(task_id, [])

    def _current_stage_name(self) -> str | None:
        progress = self.progress
        if progress is None or progress.stage_index >= len(progress.plan.stages):
            return None
        return progress.plan.stages[progress.stage_index].name

    def _p(self) -> RunProgress:
        assert self.progress is not None
        return self.progress

    def _set_status(self, status: RunState) -> None:
        self.run_status = status
        self._upsert()
        self._details()

    def _upsert(self, stage: str | None = None) -> None:
        progress = self.progress
        wanted: dict[str, str] = {STATUS_KEY.name: self.run_status}
        if progress is not None:
            wanted[RUNBOOK_KEY.name] = progress.plan.runbook.name
            if progress.plan.cluster is not None:
                wanted[CLUSTER_KEY.name] = progress.plan.cluster.name
        if stage is not None:
            wanted[STAGE_KEY.name] = stage
        # Each upsert is a history event: send only what changed.
        keys = {k.name: k for k in (STATUS_KEY, RUNBOOK_KEY, CLUSTER_KEY, STAGE_KEY)}
        updates: list[SearchAttributeUpdate[Any]] = [
            keys[name].value_set(value) for name, value in wanted.items() if self._indexed.get(name) != value
        ]
        if updates:
            self._indexed.update(wanted)
            workflow.upsert_search_attributes(updates)

    def _details(self) -> None:
        progress = self.progress
        if progress is None:
            return
        lines = [f"**{progress.plan.runbook.name}**: {self.run_status}"]
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
        workflow.set_current_details("\n".join(lines))

    async def _finish(self) -> RunReport:
        progress = self._p()
        run_rollback: list[HostResult] = []
        if progress.rollback_reason is not None:
            run_rollback = await self._run_level_rollback()
            final: RunState = "rolled_back"
        elif self.abort_reason is not None:
            final = "aborted"
            self.msg = f"aborted: {self.abort_reason}"
        elif self.msg:
            final = "failed"
        elif any(s.status == "failed" for s in progress.statuses):
            final = "completed_with_failures"
        else:
            final = "succeeded"
        now = workflow.now()
        for gate_id, gate in list(progress.gates.items()):
            progress.gates[gate_id] = gate_rules.close_on_run_end(gate, now, f"run ended ({final})")
        self._set_status(final)
        return RunReport(
            run_id=workflow.info().workflow_id,
            runbook=progress.plan.runbook.name,
            requested_by=self.request.requested_by,
            check_mode=progress.plan.check_mode,
            status=final,
            started_at=progress.started_at,
            ended_at=now,
            hashes=progress.plan.hashes,
            stages=progress.reports,
            gates=list(progress.gates.values()),
            rollback_reason=progress.rollback_reason,
            run_rollback=run_rollback,
            msg=self.msg,
        )
