"""RunbookWorkflow: plan, then stages (gates, rolling hosts, observe), rollback, report.

The process it encodes, per stage: open the `before` gate; launch one HostWorkflow per
host within the stage's `serial`/`rolling` limits and failure budget; after each host,
check `rollback_when`; watch the `observe` window; open the `after` gate. A rollback
trigger stops new launches, lets in-flight hosts finish, and runs the compensations in
reverse order (this stage, earlier stages, then the run-level `rollback`).

All state lives in one `RunProgress` model, so continuing as new is one call; the engine
reads and writes each stage through its `StageRun` (`workflows/run_stages.py`). This file
holds the run's handlers (Update, Signals, Queries) and the stage loop. Beside it: the state
they share (`run_context`), the hosts of a stage (`run_hosts`), observe and rollback
(`run_rollback`), waiting for gates (`run_gate_wait`), the children (`run_children`), and the
pure parts: variables (`run_vars`), what the run shows (`run_status`), votes (`run_gates`),
start checks (`run_start`). Slack messages are worded by `notifier`.

What a client may not decide: `state` (only a continuation of this run, signed by the
execution it continues, carries it), the messages of the run's hosts (signed by them, see
`workflows/trust.py`), and who a voter or the requester is (only a proof signed with the
vote key makes them verified; see `workflows/gates.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError
from temporalio.workflow import HandlerUnfinishedPolicy

from workflows import trust

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import (
        Decision,
        GateState,
        HostGateRequest,
        HostNotice,
        HostResult,
        Plan,
        Requester,
        RunOnceClaim,
        RunOnceReply,
        RunProgress,
        RunReport,
        RunRequest,
        RunStatus,
        StagePhase,
        StageState,
        VoteRecord,
    )
    from pitstop.slack.contracts import SlackRunState
    from workflows import gates as gate_rules
    from workflows import run_gates, run_status
    from workflows.notifier import SlackNotifier
    from workflows.run_context import RunContext
    from workflows.run_gate_wait import GateWaits
    from workflows.run_hosts import ContinueAsNew, DriveOutcome, HostDriver
    from workflows.run_rollback import Compensation
    from workflows.run_stages import StageRun, fresh_records
    from workflows.run_start import (
        STATE_FROM_CLIENT,
        STATE_NOT_SIGNED,
        requester_problem,
        requester_refusal,
    )
    from workflows.run_waves import WaveRunner

__all__ = ["STATE_FROM_CLIENT", "STATE_NOT_SIGNED", "RunbookWorkflow"]

# How a stage (or one of its phases) ended: None while it goes on.
StageOutcome = Literal["ok", "stopped", "rolled_back"]
# Whether the state a start request carries was checked: "none" (a fresh start), "pending",
# "ok" (a continuation of this run), "refused" (the run ends at once).
StateCheck = Literal["none", "pending", "ok", "refused"]
# A stage's phases in order, each with the one after it.
NEXT_PHASE: dict[StagePhase, StagePhase] = {
    "gate_before": "hosts",
    "hosts": "observe",
    "observe": "gate_after",
    "gate_after": "done",
}
_ABANDON = HandlerUnfinishedPolicy.ABANDON


@workflow.defn(name="RunbookWorkflow")
class RunbookWorkflow:
    @workflow.init
    def __init__(self, request: RunRequest) -> None:
        self.ctx = RunContext(request)
        self.state_check: StateCheck = (
            "pending" if request.state is not None or request.state_signature else "none"
        )
        self.hosts = HostDriver(self.ctx)
        self.compensation = Compensation(self.ctx, self.hosts)
        self.gate_waits = GateWaits(self.ctx)
        self.waves = WaveRunner(
            self.ctx,
            self.hosts,
            self.compensation,
            self.gate_waits,
            hosts_ended=self._hosts_ended,
            stop=self._stop_stage,
            rollback=self._rollback,
        )
        self._run_once_waiters: dict[str, list[str]] = {}

    # --- Update, Signals, Query --------------------------------------------------------
    @workflow.update(unfinished_policy=_ABANDON)
    async def decide(self, decision: Decision) -> VoteRecord:
        """Vote on a gate. A refusal is recorded in the run's status and returned as an error."""
        vote, reason = await self._vote(decision, repeat_ok=True)
        if reason is not None:
            raise ApplicationError(reason, type="VoteRefused", non_retryable=True)
        assert vote is not None
        return vote

    @decide.validator
    def _validate_decide(self, decision: Decision) -> None:
        # Requests that would add nothing to the audit trail are rejected before they reach
        # history: votes for gates that do not exist, and the same refused vote repeated.
        # Cheap checks only: a signed vote's signature is checked by the handler.
        if self.state_check == "pending":
            return  # the handler waits until this execution's state is known
        check = gate_rules.VoteCheck.of(decision.proof, valid=None) if decision.proof else None
        _, gate, reason = self._judge(decision, check)
        if reason is None:
            return
        if gate is None or gate_rules.is_repeat_refusal(gate, decision, reason):
            raise ApplicationError(reason, type="VoteRefused", non_retryable=True)

    @workflow.signal(name="decide_signal", unfinished_policy=_ABANDON)
    async def decide_signal(self, decision: Decision) -> None:
        """Signal twin of `decide` for clients that can only signal; refusals are recorded."""
        _, reason = await self._vote(decision, repeat_ok=False)
        if reason is not None:
            workflow.logger.warning("vote refused: %s", reason)

    async def _vote(self, decision: Decision, repeat_ok: bool) -> tuple[VoteRecord | None, str | None]:
        """Judge a vote, check its signature when it has one, and count or refuse it."""
        if self.state_check == "pending":
            await workflow.wait_condition(lambda: self.state_check != "pending")
        check = gate_rules.VoteCheck.unsigned()
        problem: str | None = None
        if decision.proof is not None:
            # The proof's cheap checks first; its signature (a local activity) only when they
            # pass, also for a vote the gate's rules refuse: the audit trail then says who it was.
            check = gate_rules.VoteCheck(verified=False)
            if run_gates.proof_checkable(
                decision, self.ctx.gates(), workflow.now(), workflow.info().workflow_id
            ):
                verdict = await trust.check_vote(decision.proof)
                check = gate_rules.VoteCheck.of(decision.proof, valid=verdict.valid)
                if not verdict.valid:
                    problem = f"the vote's signature was not accepted: {verdict.reason}; nothing was counted"
        # Judged as the gate is now: other votes may have counted while the signature was checked.
        gate_id, gate, reason = self._judge(decision, check)
        if problem is not None and gate is not None:
            reason = problem
        if reason is not None:
            if gate is not None and (repeat_ok or not gate_rules.is_repeat_refusal(gate, decision, reason)):
                self.ctx.gates()[gate_id] = gate_rules.record_refusal(
                    gate, decision, reason, workflow.now(), check
                )
            return None, reason
        assert gate is not None
        updated = gate_rules.apply_vote(gate, decision, workflow.now(), check)
        self.ctx.gates()[gate_id] = updated
        self.ctx.details()
        return updated.votes[-1], None

    def _judge(
        self, decision: Decision, check: gate_rules.VoteCheck | None
    ) -> tuple[str, GateState | None, str | None]:
        now, run_id = workflow.now(), workflow.info().workflow_id
        return run_gates.judge(decision, check, self.ctx.gates(), self.ctx.who(), now, run_id)

    @workflow.signal
    async def pause(self) -> None:
        self.ctx.paused = True
        self.ctx.upsert()
        self.ctx.details()
        await self.ctx.children.command("pause")

    @workflow.signal
    async def resume(self) -> None:
        self.ctx.paused = False
        self.ctx.upsert()
        self.ctx.details()
        await self.ctx.children.command("resume")

    @workflow.signal
    async def abort(self, reason: str) -> None:
        self.ctx.abort_reason = reason or "aborted by operator"
        await self.ctx.children.command("abort", self.ctx.abort_reason)

    @workflow.signal
    async def skip_host(self, host: str) -> None:
        self.ctx.hosts_to_skip.add(host)
        if host in self.ctx.children.stage:
            await self.ctx.children.command("abort", "skipped by operator", [self.ctx.children.stage[host]])

    @workflow.signal
    def rollback(self, reason: str) -> None:
        self.ctx.rollback_request = reason or "rollback requested by operator"

    @workflow.signal
    def release(self) -> None:
        """A held run (RunRequest.hold) ends as its stages left it. Anything else ignores it."""
        self.ctx.released = True

    # --- messages from the run's own hosts (signed: see workflows/trust.py) -----------------
    @workflow.signal(unfinished_policy=_ABANDON)
    async def host_gate(self, request: HostGateRequest) -> None:
        if not await self._from_host(RunbookWorkflow.host_gate, request, request.host):
            return
        progress = self.ctx.p()
        known = progress.gates.get(request.gate_id)
        if known is not None:
            # Asked again for a gate already decided: the decision stands.
            if known.status != "open":
                approved = known.status == "approved"
                await self.ctx.children.answer_gate(
                    request.host, request.gate_id, approved, known.closed_reason or ""
                )
            return
        rule = progress.plan.gates.get(request.template)
        if rule is None or request.gate_id != f"{request.template}@{request.host}":
            await self.ctx.children.answer_gate(request.host, request.gate_id, False, "is not in the plan")
            return
        if progress.plan.check_mode:
            await self.ctx.children.answer_gate(request.host, request.gate_id, True, "skipped in check mode")
            return
        rule = rule.model_copy(update={"gate_id": request.gate_id})
        progress.gates[request.gate_id] = gate_rules.open_gate(rule, workflow.now(), self.ctx.who())
        self.ctx.details()
        # A stage host's gate also closes when the stage stops; a compensation's only on abort.
        stage_host = request.host in self.ctx.children.stage
        self.ctx.in_background(self.gate_waits.host_gate(request.host, request.gate_id, stage_host))

    @workflow.signal(unfinished_policy=_ABANDON)
    async def run_once_claim(self, claim: RunOnceClaim) -> None:
        if not await self._from_host(RunbookWorkflow.run_once_claim, claim, claim.host):
            return
        progress = self.ctx.p()
        known = progress.run_once.get(claim.task_id)
        waiters = self._run_once_waiters.setdefault(claim.task_id, [])
        if known is None:
            known = RunOnceReply(task_id=claim.task_id, owner=claim.host)
            progress.run_once[claim.task_id] = known
            waiters.append(claim.host)
            await self.ctx.children.reply_run_once([claim.host], known)
            return
        waiters.append(claim.host)
        if known.result is not None:
            await self.ctx.children.reply_run_once([claim.host], known)

    @workflow.signal(unfinished_policy=_ABANDON)
    async def run_once_done(self, reply: RunOnceReply) -> None:
        if not await self._from_host(RunbookWorkflow.run_once_done, reply, reply.owner):
            return
        progress = self.ctx.p()
        known = progress.run_once.get(reply.task_id)
        # Only the host that owns the task reports its result, and only once.
        if known is None or known.owner != reply.owner or known.result is not None:
            why = f"{reply.owner!r} does not own a pending result of {reply.task_id!r}"
            self._refused(RunbookWorkflow.run_once_done.__name__, why)
            return
        done = RunOnceReply(task_id=reply.task_id, owner=reply.owner, result=reply.result)
        progress.run_once[reply.task_id] = done
        waiters = self._run_once_waiters.setdefault(reply.task_id, [])
        await self.ctx.children.reply_run_once([h for h in waiters if h != reply.owner], done)

    @workflow.signal(unfinished_policy=_ABANDON)
    async def host_notice(self, notice: HostNotice) -> None:
        if await self._from_host(RunbookWorkflow.host_notice, notice, notice.host):
            self.ctx.notice(notice.text)

    async def _from_host(
        self,
        signal: Callable[..., Any],
        message: HostGateRequest | RunOnceClaim | RunOnceReply | HostNotice,
        host: str,
    ) -> bool:
        """Whether `message` comes from the host workflow this run runs for `host`."""
        kind = signal.__name__
        child_id = self.ctx.children.ids.get(host)
        if self.ctx.progress is None or child_id is None:
            self._refused(kind, f"this run has no host workflow running for {host[:80]!r}")
            return False
        if not await trust.verify_message(kind, message, child_id):
            self._refused(
                kind,
                "its signature does not verify: it was not sent by a host of this run (or the workers "
                "of this task queue do not share one worker key, PITSTOP_WORKER_KEY)",
            )
            return False
        return True

    def _refused(self, kind: str, why: str) -> None:
        text = f"refused a {kind!r} signal: {why}; nothing changed"
        workflow.logger.warning(text)
        self.ctx.notice(text)

    @workflow.query
    def status(self) -> RunStatus:
        return run_status.run_status(
            run_id=workflow.info().workflow_id,
            request=self.ctx.request,
            progress=self.ctx.progress,
            requester=self.ctx.who(),
            shown=self.ctx.shown_status(),
            current_stage=self.ctx.current_stage_name(),
            paused=self.ctx.paused,
            early_notices=self.ctx.early_notices,
        )

    @workflow.query
    def slack_thread(self) -> SlackRunState:
        """The run's Slack side: `notify.slack` with `thread: run` replies under its first message."""
        return self.ctx.progress.slack if self.ctx.progress is not None else SlackRunState()

    # --- the run -----------------------------------------------------------------------
    @workflow.run
    async def run(self, request: RunRequest) -> RunReport:
        self.hosts.decide_at_start()
        refused = await self._start(request)
        if refused is not None:
            return refused
        progress = self.ctx.p()
        self.ctx.set_status("running")
        self.ctx.slack = SlackNotifier(
            progress, self.ctx.who_shown(), lambda: self.ctx.current_stage_name() or "run"
        )
        await self.ctx.slack.start()
        while True:
            try:
                await self._run_stages()
                break
            except ContinueAsNew:
                # Messages due now go out from this execution; the next one follows on.
                await self.ctx.slack.stop()
                carried = await self.ctx.signed_state()
                if carried is not None:
                    state, signature = carried
                    workflow.continue_as_new(
                        request.model_copy(update={"state": state, "state_signature": signature})
                    )
                # An abort or rollback arrived while handlers finished: this execution
                # handles it (the stage loop stops before it would continue as new again).
                await self.ctx.slack.start()
        if request.hold:
            await self._hold()
        return await self._finish()

    async def _hold(self) -> None:
        """A promotion's ring: a run whose stages all succeeded stays open until the promotion
        releases it, or rolls it back (a later ring failed) with the runbook's own rollback,
        every stage latest first, as when its last stage fails. An abort ends it as it is."""
        progress = self.ctx.p()
        stages = self.ctx.stage_runs().all
        if (
            self.ctx.abort_reason is not None
            or progress.rollback_reason is not None
            or self.ctx.msg
            or not stages
            or any(s.status.status not in ("ok", "skipped") for s in stages)
        ):
            return  # it did not succeed: it ends now, and says why
        self.ctx.set_status("held")
        await workflow.wait_condition(
            lambda: (
                self.ctx.released
                or self.ctx.rollback_request is not None
                or self.ctx.abort_reason is not None
            )
        )
        # A rollback heard in the same activation as a release wins: undoing is the safe side.
        if self.ctx.abort_reason is not None or self.ctx.rollback_request is None:
            return
        await self.compensation.rollback(stages[-1], self.ctx.rollback_request)

    async def _start(self, request: RunRequest) -> RunReport | None:
        """The run's state: continued, or planned afresh; a report when the run ends at once."""
        if self.state_check == "pending":
            refused = await self._continue_from(request)
            return self._early_report(refused) if refused is not None else None
        refused = await self._check_requester(request)
        if refused is not None:
            return self._early_report(refused)
        planned = await self._load_plan(request)
        if isinstance(planned, RunReport):
            return planned
        reports, statuses = fresh_records(planned.stages)
        self.ctx.take(
            RunProgress(
                plan=planned,
                started_at=workflow.now(),
                reports=reports,
                statuses=statuses,
                requester=self.ctx.requester,
                # What the plan's reviewer must see first (a stage that bypasses PDBs).
                notices=[*(w for s in planned.stages for w in s.warnings), *self.ctx.early_notices],
            )
        )
        return None

    async def _continue_from(self, request: RunRequest) -> str | None:
        """Take the state this execution continues with, if it is really this run's own."""
        state = request.state
        if state is None or workflow.info().continued_run_id is None:
            # Only continue-as-new sets continued_run_id: a client cannot.
            self.state_check = "refused"
            return STATE_FROM_CLIENT
        if not await trust.verify_state(state, request.state_signature):
            # Continued as new, but not from this run (another workflow can continue as new
            # into a RunbookWorkflow with whatever state it likes): refused the same way.
            self.state_check = "refused"
            return STATE_NOT_SIGNED
        self.ctx.take(state)
        self.ctx.paused = state.paused
        self.ctx.hosts_to_skip = set(state.skip_requests)
        self.ctx.requester = state.requester or self.ctx.requester
        self.state_check = "ok"
        return None

    async def _check_requester(self, request: RunRequest) -> str | None:
        """Who asked for the run: verified when the start request carries a valid proof."""
        proof = request.requester_proof
        if proof is None:
            return None
        problem = requester_problem(proof, request, workflow.info().workflow_id, workflow.now())
        if problem is None:
            verdict = await trust.check_requester(proof)
            if not verdict.valid:
                problem = verdict.reason
        if problem is not None:
            return requester_refusal(problem)
        self.ctx.requester = Requester(name=request.requested_by, verified=True, subject=proof.subject)
        return None

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
            # The loader's own `file:line:col: message`, without the error type in front.
            return self._early_report(
                f"plan failed: {cause.message if isinstance(cause, FailureError) else err}"
            )
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
        self.ctx.msg = msg
        self.ctx.set_status("failed")
        return run_status.early_report(
            run_id=workflow.info().workflow_id,
            request=self.ctx.request,
            requester=self.ctx.requester,
            now=workflow.now(),
            msg=msg,
            notices=self.ctx.early_notices,
        )

    # --- the stage loop ----------------------------------------------------------------
    async def _run_stages(self) -> None:
        stages = self.ctx.stage_runs()
        while (stage := stages.current()) is not None:
            outcome = await self._run_stage(stage)
            if self.ctx.slack is not None:
                self.ctx.slack.stage_ended(stage.status)
            if outcome != "ok":
                return
            stages.advance()

    async def _run_stage(self, stage: StageRun) -> StageOutcome:
        """Run one stage from its recorded phase to its end."""
        progress = stage.current()
        self.ctx.halt_reason = None
        self.ctx.upsert(stage=stage.name)
        phases: dict[StagePhase, Callable[[StageRun], Awaitable[StageOutcome | None]]] = {
            "gate_before": self._gate_before,
            "hosts": self._hosts_phase,
            "observe": self._observe_phase,
            "gate_after": self._gate_after,
        }
        for phase, run_phase in phases.items():
            if progress.phase == phase:
                ended = await run_phase(stage)
                if ended is not None:
                    return ended
                progress.phase = NEXT_PHASE[phase]
        stage.set_status("failed" if progress.failed else "ok")
        return "ok"

    async def _gate_before(self, stage: StageRun) -> StageOutcome | None:
        rule = stage.rule
        if rule.gate is None or not rule.gate.before:
            return None
        refused = self.waves.canary_refusal(stage)
        if refused is not None:
            # No approver is asked for a stage its canaries do not stand for.
            return self._stop_stage(stage, "failed", refused)
        stage.set_status("waiting_gate")
        gate = await self.gate_waits.stage_gate(f"{stage.name}:before")
        if gate.status == "approved":
            return None
        if self.ctx.abort_reason is None and self.ctx.rollback_request is not None:
            # This stage never started; the stages before it are compensated.
            return await self._rollback(stage, self.ctx.rollback_request)
        state: StageState = "aborted" if self.ctx.abort_reason else "skipped"
        return self._stop_stage(stage, state, f"stopped before stage {stage.name!r}: {gate.closed_reason}")

    async def _hosts_phase(self, stage: StageRun) -> StageOutcome | None:
        stage.set_status("running")
        self.ctx.set_status("running")
        if stage.plan.waves:
            return await self.waves.run_waves(stage)
        return await self._hosts_ended(stage, await self.hosts.run_hosts(stage))

    async def _hosts_ended(self, stage: StageRun, outcome: DriveOutcome) -> StageOutcome | None:
        """After the stage's hosts (or a wave's): stopped, rolled back, or on to what follows."""
        if self.ctx.abort_reason is not None:
            return self._stop_stage(stage, "aborted", "")
        trigger = self.hosts.rollback_trigger(stage)
        if trigger is not None:
            return await self._rollback(stage, trigger)
        progress = stage.current()
        if progress.failed and not progress.done:
            # As Ansible ends a playbook when a play has no hosts left: a stage where every
            # host failed stops the run (a refused preflight must not go on to upgrade).
            why = f"every host of stage {stage.name!r} failed{stage.failures_said()}"
            return self._stop_stage(stage, "failed", why)
        if outcome == "stuck":
            why = f"stage {stage.name!r} stopped: {stage.status.blocked_reason or 'no host can start'}"
            return self._stop_stage(stage, "failed", why)
        return None

    async def _observe_phase(self, stage: StageRun) -> StageOutcome | None:
        if stage.rule.observe is None:
            return None
        stage.set_status("observing")
        self.ctx.details()
        trigger = await self.compensation.observe(stage)
        if self.ctx.abort_reason is not None:
            return self._stop_stage(stage, "aborted", "")
        if trigger is not None:
            return await self._rollback(stage, trigger)
        return None

    async def _gate_after(self, stage: StageRun) -> StageOutcome | None:
        rule = stage.rule
        if rule.gate is None or not rule.gate.after:
            return None
        stage.set_status("waiting_gate")
        gate = await self.gate_waits.stage_gate(f"{stage.name}:after")
        if self.ctx.abort_reason is not None:
            return self._stop_stage(stage, "aborted", "")
        if gate.status != "approved":
            why = self.ctx.rollback_request or f"gate {stage.name}:after {gate.closed_reason}"
            return await self._rollback(stage, why)
        return None

    async def _rollback(self, stage: StageRun, reason: str) -> StageOutcome:
        await self.compensation.rollback(stage, reason)
        return "rolled_back"

    def _stop_stage(self, stage: StageRun, state: StageState, msg: str) -> StageOutcome:
        """The run stops in this stage: hosts that never started are marked skipped."""
        stage.stop(state)
        if msg:
            self.ctx.msg = msg
        return "stopped"

    # --- the end -------------------------------------------------------------------------
    async def _finish(self) -> RunReport:
        progress = self.ctx.p()
        run_rollback: list[HostResult] = []
        if progress.rollback_reason is not None and self.ctx.abort_reason is None:
            run_rollback = await self.compensation.run_level()
        final = run_status.final_state(progress, self.ctx.abort_reason, self.ctx.msg)
        if final == "aborted":
            if progress.rollback_reason is not None:
                self.ctx.msg = (
                    f"aborted during rollback ({progress.rollback_reason}): {self.ctx.abort_reason}"
                )
            else:
                self.ctx.msg = f"aborted: {self.ctx.abort_reason}"
        now = workflow.now()
        for gate_id, gate in list(progress.gates.items()):
            progress.gates[gate_id] = gate_rules.close_on_run_end(gate, now, f"run ended ({final})")
        self.ctx.set_status(final)
        if self.ctx.slack is not None:
            self.ctx.slack.run_ended(final, self.ctx.msg)
            # Closed gates' messages lose their buttons before the run's result is final.
            await self.ctx.slack.stop()
        return run_status.run_report(
            run_id=workflow.info().workflow_id,
            request=self.ctx.request,
            progress=progress,
            requester=self.ctx.who(),
            final=final,
            ended_at=now,
            run_rollback=run_rollback,
            msg=self.ctx.msg,
        )
