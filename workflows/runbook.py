"""RunbookWorkflow: plan, then stages (gates, rolling hosts, observe), rollback, report.

The process it encodes, per stage: open the `before` gate; launch one HostWorkflow per
host within the stage's `serial`/`rolling` limits and failure budget; after each host,
check `rollback_when`; watch the `observe` window; open the `after` gate. A rollback
trigger stops new launches, lets in-flight hosts finish, and runs the compensations in
reverse order (this stage, earlier stages, then the run-level `rollback`).

All state lives in one `RunProgress` model, so continuing as new is one call; the engine
reads and writes each stage through its `StageRun` (`workflows/run_stages.py`). This file
holds the run's handlers (Update, Signals, Queries) and the stage loop; the pure parts sit
beside it: variables (`run_vars`), what the run shows (`run_status`), votes (`run_gates`),
start checks (`run_start`); its children are started and signalled by `run_children`, and
its Slack messages worded by `notifier`.

What a client may not decide: `state` (only a continuation of this run, signed by the
execution it continues, carries it), the messages of the run's hosts (signed by them, see
`workflows/trust.py`), and who a voter or the requester is (only a proof signed with the
vote key makes them verified; see `workflows/gates.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Coroutine
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
        HostInput,
        HostNotice,
        HostResult,
        Plan,
        Requester,
        RunOnceClaim,
        RunOnceReply,
        RunProgress,
        RunReport,
        RunRequest,
        RunState,
        RunStatus,
        RunVars,
        StagePhase,
        StageState,
        VoteRecord,
    )
    from pitstop.runbook.models import Task
    from pitstop.signing import digest
    from pitstop.slack.contracts import SlackRunState, add_notice
    from workflows import gates as gate_rules
    from workflows import run_gates, run_status, run_vars
    from workflows.notifier import SlackNotifier
    from workflows.rollout import RolloutLimits, RolloutState, blocked_reason, next_hosts, stop_launching
    from workflows.run_children import Command, HostChildren
    from workflows.run_stages import StageRun, StageRuns, fresh_records
    from workflows.run_start import (
        STATE_FROM_CLIENT,
        STATE_NOT_SIGNED,
        requester_problem,
        requester_refusal,
    )
    from workflows.run_vars import LOCALHOST

__all__ = ["STATE_FROM_CLIENT", "STATE_NOT_SIGNED", "RunbookWorkflow"]

# Shortest observe interval honoured; a zero interval would make the window a busy loop.
MIN_OBSERVE_INTERVAL_S = 0.05

# How a stage's host loop ended: every eligible host finished, a stop was requested or
# triggered, or nothing can start although hosts remain (their domains are unavailable).
DriveOutcome = Literal["done", "stopped", "stuck"]
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


class _ContinueAsNew(Exception):
    """Raised inside the stage loop when the execution should continue as new."""


@workflow.defn(name="RunbookWorkflow")
class RunbookWorkflow:
    @workflow.init
    def __init__(self, request: RunRequest) -> None:
        self.request = request
        # Nothing from `request.state` is trusted before run() has checked its signature: the
        # validators and queries see no plan and no gates until then.
        self.progress: RunProgress | None = None
        self.stages: StageRuns | None = None
        self.state_check: StateCheck = (
            "pending" if request.state is not None or request.state_signature else "none"
        )
        self.run_status: RunState = "planning"
        self.paused = False
        self.requester = Requester(name=request.requested_by)
        # Refusals heard before the plan exists (they join the run's notices once it does).
        self.early_notices: list[str] = []
        self.abort_reason: str | None = None
        self.rollback_request: str | None = None
        # Why the current stage stopped launching (a rollback trigger); open host gates of
        # the stage close with it, so that hosts waiting for a vote do not hold the rollback.
        self.halt_reason: str | None = None
        self.hosts_to_skip: set[str] = set()
        self.children = HostChildren()
        self.completed: list[HostResult] = []
        self.launches = 0
        self.msg = ""
        # Keeps references to background tasks (child watchers, host gate timers).
        self._background: set[asyncio.Task[None]] = set()
        self._run_once_waiters: dict[str, list[str]] = {}
        self._indexed: dict[str, str] = {}
        # Set once the plan is known (it decides whether and where the run posts to Slack).
        self.slack: SlackNotifier | None = None

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
                decision, self._gates(), workflow.now(), workflow.info().workflow_id
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
                self._gates()[gate_id] = gate_rules.record_refusal(
                    gate, decision, reason, workflow.now(), check
                )
            return None, reason
        assert gate is not None
        updated = gate_rules.apply_vote(gate, decision, workflow.now(), check)
        self._gates()[gate_id] = updated
        self._details()
        return updated.votes[-1], None

    def _judge(
        self, decision: Decision, check: gate_rules.VoteCheck | None
    ) -> tuple[str, GateState | None, str | None]:
        now, run_id = workflow.now(), workflow.info().workflow_id
        return run_gates.judge(decision, check, self._gates(), self._requester(), now, run_id)

    @workflow.signal
    async def pause(self) -> None:
        self.paused = True
        self._upsert()
        self._details()
        await self.children.command("pause")

    @workflow.signal
    async def resume(self) -> None:
        self.paused = False
        self._upsert()
        self._details()
        await self.children.command("resume")

    @workflow.signal
    async def abort(self, reason: str) -> None:
        self.abort_reason = reason or "aborted by operator"
        await self.children.command("abort", self.abort_reason)

    @workflow.signal
    async def skip_host(self, host: str) -> None:
        self.hosts_to_skip.add(host)
        if host in self.children.stage:
            await self.children.command("abort", "skipped by operator", [self.children.stage[host]])

    @workflow.signal
    def rollback(self, reason: str) -> None:
        self.rollback_request = reason or "rollback requested by operator"

    # --- messages from the run's own hosts (signed: see workflows/trust.py) -----------------
    @workflow.signal(unfinished_policy=_ABANDON)
    async def host_gate(self, request: HostGateRequest) -> None:
        if not await self._from_host(RunbookWorkflow.host_gate, request, request.host):
            return
        progress = self._p()
        known = progress.gates.get(request.gate_id)
        if known is not None:
            # Asked again for a gate already decided: the decision stands.
            if known.status != "open":
                approved = known.status == "approved"
                await self.children.answer_gate(
                    request.host, request.gate_id, approved, known.closed_reason or ""
                )
            return
        rule = progress.plan.gates.get(request.template)
        if rule is None or request.gate_id != f"{request.template}@{request.host}":
            await self.children.answer_gate(request.host, request.gate_id, False, "is not in the plan")
            return
        if progress.plan.check_mode:
            await self.children.answer_gate(request.host, request.gate_id, True, "skipped in check mode")
            return
        rule = rule.model_copy(update={"gate_id": request.gate_id})
        progress.gates[request.gate_id] = gate_rules.open_gate(rule, workflow.now(), self._requester())
        self._details()
        # A stage host's gate also closes when the stage stops; a compensation's only on abort.
        stage_host = request.host in self.children.stage
        self._in_background(self._host_gate_watch(request.host, request.gate_id, stage_host))

    @workflow.signal(unfinished_policy=_ABANDON)
    async def run_once_claim(self, claim: RunOnceClaim) -> None:
        if not await self._from_host(RunbookWorkflow.run_once_claim, claim, claim.host):
            return
        progress = self._p()
        known = progress.run_once.get(claim.task_id)
        waiters = self._run_once_waiters.setdefault(claim.task_id, [])
        if known is None:
            known = RunOnceReply(task_id=claim.task_id, owner=claim.host)
            progress.run_once[claim.task_id] = known
            waiters.append(claim.host)
            await self.children.reply_run_once([claim.host], known)
            return
        waiters.append(claim.host)
        if known.result is not None:
            await self.children.reply_run_once([claim.host], known)

    @workflow.signal(unfinished_policy=_ABANDON)
    async def run_once_done(self, reply: RunOnceReply) -> None:
        if not await self._from_host(RunbookWorkflow.run_once_done, reply, reply.owner):
            return
        progress = self._p()
        known = progress.run_once.get(reply.task_id)
        # Only the host that owns the task reports its result, and only once.
        if known is None or known.owner != reply.owner or known.result is not None:
            why = f"{reply.owner!r} does not own a pending result of {reply.task_id!r}"
            self._refused(RunbookWorkflow.run_once_done.__name__, why)
            return
        done = RunOnceReply(task_id=reply.task_id, owner=reply.owner, result=reply.result)
        progress.run_once[reply.task_id] = done
        waiters = self._run_once_waiters.setdefault(reply.task_id, [])
        await self.children.reply_run_once([h for h in waiters if h != reply.owner], done)

    @workflow.signal(unfinished_policy=_ABANDON)
    async def host_notice(self, notice: HostNotice) -> None:
        if await self._from_host(RunbookWorkflow.host_notice, notice, notice.host):
            self._notice(notice.text)

    async def _from_host(
        self,
        signal: Callable[..., Any],
        message: HostGateRequest | RunOnceClaim | RunOnceReply | HostNotice,
        host: str,
    ) -> bool:
        """Whether `message` comes from the host workflow this run runs for `host`."""
        kind = signal.__name__
        child_id = self.children.ids.get(host)
        if self.progress is None or child_id is None:
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
        self._notice(text)

    def _notice(self, text: str) -> None:
        if self.progress is None:
            self.early_notices = add_notice(self.early_notices, text)
        else:
            self.progress.notices = add_notice(self.progress.notices, text)

    @workflow.query
    def status(self) -> RunStatus:
        return run_status.run_status(
            run_id=workflow.info().workflow_id,
            request=self.request,
            progress=self.progress,
            requester=self._requester(),
            shown=self._shown_status(),
            current_stage=self._current_stage_name(),
            paused=self.paused,
            early_notices=self.early_notices,
        )

    @workflow.query
    def slack_thread(self) -> SlackRunState:
        """The run's Slack side: `notify.slack` with `thread: run` replies under its first message."""
        return self.progress.slack if self.progress is not None else SlackRunState()

    # --- the run -----------------------------------------------------------------------
    @workflow.run
    async def run(self, request: RunRequest) -> RunReport:
        refused = await self._start(request)
        if refused is not None:
            return refused
        progress = self._p()
        self._set_status("running")
        self.slack = SlackNotifier(
            progress, self._requester_shown(), lambda: self._current_stage_name() or "run"
        )
        await self.slack.start()
        while True:
            try:
                await self._run_stages()
                break
            except _ContinueAsNew:
                # Messages due now go out from this execution; the next one follows on.
                await self.slack.stop()
                carried = await self._signed_state()
                if carried is not None:
                    state, signature = carried
                    workflow.continue_as_new(
                        request.model_copy(update={"state": state, "state_signature": signature})
                    )
                # An abort or rollback arrived while handlers finished: this execution
                # handles it (the stage loop stops before it would continue as new again).
                await self.slack.start()
        return await self._finish()

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
        self._take(
            RunProgress(
                plan=planned,
                started_at=workflow.now(),
                reports=reports,
                statuses=statuses,
                requester=self.requester,
                # What the plan's reviewer must see first (a stage that bypasses PDBs).
                notices=[*(w for s in planned.stages for w in s.warnings), *self.early_notices],
            )
        )
        return None

    def _take(self, progress: RunProgress) -> None:
        self.progress = progress
        self.stages = StageRuns(progress)

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
        self._take(state)
        self.paused = state.paused
        self.hosts_to_skip = set(state.skip_requests)
        self.requester = state.requester or self.requester
        self.state_check = "ok"
        return None

    async def _signed_state(self) -> tuple[RunProgress, str] | None:
        """The state for the next execution, signed by this one, once no handler is running;
        None when an abort or rollback arrived meanwhile (this execution handles it)."""
        progress = self._p()
        while True:
            await workflow.wait_condition(workflow.all_handlers_finished)
            if self.abort_reason is not None or self.rollback_request is not None:
                return None
            progress.paused = self.paused
            progress.skip_requests = sorted(self.hosts_to_skip)
            before = digest(progress.model_dump(mode="json"))
            state, signature = await trust.sign_state(
                progress.model_copy(update={"executions": progress.executions + 1})
            )
            # A message handled while the state was signed would be lost: sign again.
            unchanged = (self.paused, sorted(self.hosts_to_skip)) == (progress.paused, progress.skip_requests)
            if (
                workflow.all_handlers_finished()
                and unchanged
                and digest(progress.model_dump(mode="json")) == before
            ):
                return state, signature

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
        self.requester = Requester(name=request.requested_by, verified=True, subject=proof.subject)
        return None

    def _requester(self) -> Requester:
        if self.progress is not None and self.progress.requester is not None:
            return self.progress.requester
        return self.requester

    def _requester_shown(self) -> str:
        requester = self._requester()
        return requester.name if requester.verified else f"{requester.name} (unverified)"

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
        self.msg = msg
        self._set_status("failed")
        return run_status.early_report(
            run_id=workflow.info().workflow_id,
            request=self.request,
            requester=self.requester,
            now=workflow.now(),
            msg=msg,
            notices=self.early_notices,
        )

    # --- the stage loop ----------------------------------------------------------------
    async def _run_stages(self) -> None:
        stages = self._stages()
        while (stage := stages.current()) is not None:
            outcome = await self._run_stage(stage)
            if self.slack is not None:
                self.slack.stage_ended(stage.status)
            if outcome != "ok":
                return
            stages.advance()

    async def _run_stage(self, stage: StageRun) -> StageOutcome:
        """Run one stage from its recorded phase to its end."""
        progress = stage.current()
        self.halt_reason = None
        self._upsert(stage=stage.name)
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
        stage.set_status("waiting_gate")
        gate = await self._stage_gate(f"{stage.name}:before")
        if gate.status == "approved":
            return None
        if self.abort_reason is None and self.rollback_request is not None:
            # This stage never started; the stages before it are compensated.
            return await self._rollback(stage, self.rollback_request)
        state: StageState = "aborted" if self.abort_reason else "skipped"
        return self._stop_stage(stage, state, f"stopped before stage {stage.name!r}: {gate.closed_reason}")

    async def _hosts_phase(self, stage: StageRun) -> StageOutcome | None:
        stage.set_status("running")
        self._set_status("running")
        outcome = await self._run_hosts(stage)
        if self.abort_reason is not None:
            return self._stop_stage(stage, "aborted", "")
        trigger = self._rollback_trigger(stage)
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
        self._details()
        trigger = await self._observe(stage)
        if self.abort_reason is not None:
            return self._stop_stage(stage, "aborted", "")
        if trigger is not None:
            return await self._rollback(stage, trigger)
        return None

    async def _gate_after(self, stage: StageRun) -> StageOutcome | None:
        rule = stage.rule
        if rule.gate is None or not rule.gate.after:
            return None
        stage.set_status("waiting_gate")
        gate = await self._stage_gate(f"{stage.name}:after")
        if self.abort_reason is not None:
            return self._stop_stage(stage, "aborted", "")
        if gate.status != "approved":
            why = self.rollback_request or f"gate {stage.name}:after {gate.closed_reason}"
            return await self._rollback(stage, why)
        return None

    def _stop_stage(self, stage: StageRun, state: StageState, msg: str) -> StageOutcome:
        """The run stops in this stage: hosts that never started are marked skipped."""
        stage.stop(state)
        if msg:
            self.msg = msg
        return "stopped"

    # --- hosts -------------------------------------------------------------------------
    async def _run_hosts(self, stage: StageRun) -> DriveOutcome:
        self._skip_failed_earlier(stage)
        state = stage.rollout_state()
        for eligible, limits in stage.windows(state.hosts):
            # A serial batch is a barrier: only its hosts are eligible until it is done.
            state.eligible = eligible
            outcome = await self._drive(stage, state, limits)
            if outcome != "done":
                return outcome
        return "done"

    async def _drive(self, stage: StageRun, state: RolloutState, limits: RolloutLimits) -> DriveOutcome:
        """Launch and collect hosts until the eligible ones are done, or the stage stops."""
        while True:
            while self.completed:
                self._collect(stage, state, self.completed.pop(0))
            for host in sorted(self.hosts_to_skip & set(state.pending())):
                stage.host_skipped(host, "skipped by operator", workflow.now(), state)
            stop = self._stop_reason(stage, state, limits)
            if stop is not None:
                self.halt_reason = stop
            elif not self.paused:
                if self._launch_budget() <= 0:
                    if not state.in_flight and state.pending():
                        raise _ContinueAsNew()
                else:
                    hosts = next_hosts(state, limits)[: self._launch_budget()]
                    state.in_flight.update(hosts)
                    if hosts:
                        await self._launch(stage, hosts)
            pending = state.pending()
            stage.status.blocked_reason = self._blocked_reason(state, limits, stop) if pending else None
            self._details()
            if not state.in_flight:
                if stop is not None:
                    return "stopped"
                if not pending:
                    return "done"
                if not self.paused and self._launch_budget() > 0 and not next_hosts(state, limits):
                    return "stuck"
            await self._wait_for_news(state)

    async def _wait_for_news(self, state: RolloutState) -> None:
        # Wake on news only: a condition that stays true (an abort already seen) would
        # spin instead of waiting for the hosts in flight.
        paused, aborted, rollback = self.paused, self.abort_reason, self.rollback_request
        await workflow.wait_condition(
            lambda: (
                bool(self.completed)
                or self.paused != paused
                or self.abort_reason != aborted
                or self.rollback_request != rollback
                or bool(self.hosts_to_skip & set(state.pending()))
            )
        )

    def _launch_budget(self) -> int:
        """Launches left in this execution before it continues as new."""
        if workflow.info().is_continue_as_new_suggested():
            return 0
        return self.request.max_launches_per_execution - self.launches

    def _stop_reason(self, stage: StageRun, state: RolloutState, limits: RolloutLimits) -> str | None:
        if self.abort_reason is not None:
            return f"aborted: {self.abort_reason}"
        trigger = self._rollback_trigger(stage)
        if trigger is not None:
            return trigger
        if stop_launching(state, limits):
            return blocked_reason(state, limits) or "the stage's failure budget is spent"
        return None

    def _blocked_reason(self, state: RolloutState, limits: RolloutLimits, stop: str | None) -> str | None:
        if stop is not None:
            return f"stopping: {stop}"
        if self.paused:
            return "paused by operator"
        return blocked_reason(state, limits)

    def _skip_failed_earlier(self, stage: StageRun) -> None:
        # As in Ansible, a host that failed takes no further part in the run.
        failed_in = self._stages().failed_earlier(stage)
        for host in stage.plan.hosts:
            if host in failed_in and host not in stage.current().skipped:
                stage.host_skipped(host, f"not run: failed in stage {failed_in[host]!r}", workflow.now())

    async def _launch(self, stage: StageRun, hosts: list[str]) -> None:
        """Start one HostWorkflow per host, their inputs signed together (one local activity)."""
        wid = workflow.info().workflow_id
        inputs: list[tuple[HostInput, str]] = []
        for host in hosts:
            self.launches += 1
            stage.host_started(host)
            child_id = f"{wid}/{stage.name}/{host}"
            self.children.ids[host] = child_id
            inputs.append(
                (
                    trust.normalized(self._host_input(stage, host, stage.rule.tasks, stage_handlers=True)),
                    child_id,
                )
            )
        signed = await trust.sign_host_inputs(inputs)
        await asyncio.gather(
            *(
                self._start_host(stage, inp, child_id)
                for inp, (_, child_id) in zip(signed, inputs, strict=True)
            )
        )

    async def _start_host(self, stage: StageRun, inp: HostInput, child_id: str) -> None:
        handle = await self.children.start(inp, child_id, aux=False)
        await self._catch_up(handle, inp.host)
        self._in_background(self._await_child(inp.host, stage.name, handle))

    async def _catch_up(self, handle: Any, host: str) -> None:
        """Tell a host that just started what it missed while its input was signed and it was
        started: an abort, a skip, a pause (each command goes to the hosts running when it is given)."""
        command: tuple[Command, str] | None = None
        if self.abort_reason is not None:
            command = ("abort", self.abort_reason)
        elif host in self.hosts_to_skip and host in self.children.stage:
            command = ("abort", "skipped by operator")
        elif self.paused:
            command = ("pause", "")
        if command is not None:
            await self.children.command(command[0], command[1], [handle])

    async def _await_child(self, host: str, stage: str, handle: Any) -> None:
        self.completed.append(await self.children.result(host, stage, handle))

    async def _run_aux(self, stage: StageRun | None, host: str, tasks: list[Task], suffix: str) -> HostResult:
        """A one-off child (observe check, rollback), reachable for its gates and run_once."""
        child_id = f"{workflow.info().workflow_id}/{suffix}"
        self.children.ids[host] = child_id
        unsigned = self._host_input(stage, host, tasks, stage_handlers=False, select_tags=False)
        [inp] = await trust.sign_host_inputs([(trust.normalized(unsigned), child_id)])
        handle = await self.children.start(inp, child_id, aux=True)
        await self._catch_up(handle, host)
        try:
            result = await self.children.result(host, stage.name if stage else "run", handle)
        finally:
            self.children.ended(host, aux=True)
        self._close_host_gates(host, f"host {host} ended ({result.status})")
        self._keep(result)
        return result

    def _close_host_gates(self, host: str, why: str) -> None:
        # A host that ended (skipped, aborted) while its gate was open no longer waits for
        # it: close the gate, so that it neither takes votes nor counts as open.
        gates = self._p().gates
        for gate_id, gate in list(gates.items()):
            if gate.status == "open" and gate_id.endswith(f"@{host}"):
                gates[gate_id] = gate_rules.close_on_run_end(gate, workflow.now(), f"closed: {why}")

    def _collect(self, stage: StageRun, state: RolloutState, result: HostResult) -> None:
        self.children.ended(result.host, aux=False)
        self._close_host_gates(result.host, f"host {result.host} ended ({result.status})")
        self._keep(stage.host_ended(result, state, skip_requested=result.host in self.hosts_to_skip))

    def _keep(self, result: HostResult) -> None:
        """What a host leaves for the rest of the run: its facts and its artifacts."""
        progress = self._p()
        if result.facts:
            progress.host_facts.setdefault(result.host, {}).update(result.facts)
        for host, facts in result.delegated_facts.items():
            progress.host_facts.setdefault(host, {}).update(facts)
        known = {a.uri for a in progress.artifacts}
        for artifact in result.artifacts:
            if artifact.uri not in known:
                progress.artifacts.append(artifact)
                known.add(artifact.uri)

    # --- variables ---------------------------------------------------------------------
    def _host_input(
        self,
        stage: StageRun | None,
        host: str,
        tasks: list[Task],
        stage_handlers: bool,
        select_tags: bool = True,
    ) -> HostInput:
        progress = self._p()
        return run_vars.host_input(
            run_id=workflow.info().workflow_id,
            plan=progress.plan,
            stage=stage,
            host=host,
            tasks=tasks,
            host_facts=progress.host_facts,
            run=self._run_vars(),
            requested_by=self.request.requested_by,
            stage_handlers=stage_handlers,
            select_tags=select_tags,
        )

    def _run_vars(self) -> RunVars:
        return run_vars.run_vars(
            run_id=workflow.info().workflow_id,
            runbook=self.request.runbook,
            requested_by=self.request.requested_by,
            requester=self._requester(),
            check_mode=self.request.check_mode,
            progress=self.progress,
            stages=list(self.stages) if self.stages is not None else [],
        )

    def _rollback_trigger(self, stage: StageRun) -> str | None:
        plan = self._p().plan
        return run_vars.rollback_trigger(
            stage=stage,
            rollback_request=self.rollback_request,
            play=plan.runbook.vars,
            extra=plan.extra_vars,
            run=self._run_vars(),
        )

    # --- observe, rollback ---------------------------------------------------------------
    async def _observe(self, stage: StageRun) -> str | None:
        """Watch the stage for `observe.duration`: run the checks every `interval`; a failing
        check, or an operator's rollback, is a rollback trigger."""
        progress = stage.current()
        observe = stage.rule.observe
        assert observe is not None
        interval = max(observe.interval, MIN_OBSERVE_INTERVAL_S)
        rounds = max(1, math.floor(observe.duration / interval + 1e-9))
        # A plan shows what the checks would say once; it does not wait out the window.
        check_mode = self._p().plan.check_mode
        while progress.observe_round < rounds:
            if not check_mode:
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(
                        lambda: self.rollback_request is not None or self.abort_reason is not None,
                        timeout=timedelta(seconds=interval),
                    )
            if self.abort_reason is not None or self.rollback_request is not None:
                return self.rollback_request
            n = progress.observe_round
            progress.observe_round += 1
            if observe.checks:
                result = await self._run_aux(stage, LOCALHOST, observe.checks, f"{stage.name}/observe/{n}")
                stage.report.observations.append(result)
                if result.status == "failed":
                    return f"observe check failed in stage {stage.name!r}: {result.failed_task}: {result.msg}"
            if check_mode:
                break
        return None

    async def _rollback(self, stage: StageRun, reason: str) -> StageOutcome:
        """Compensate in reverse order: this stage, then every earlier stage (a saga)."""
        self._p().rollback_reason = reason
        stage.set_rollback_reason(reason)
        self._set_status("rolling_back")
        if self.slack is not None:
            self.slack.rolling_back(reason)
        failures: list[str] = []
        for earlier in self._stages().back_from(stage):
            if self.abort_reason is not None:
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
            self._details()
        self.msg = f"rolled back: {reason}"
        if failures:
            self.msg += f"; compensation failed on {', '.join(failures)}"
        return "rolled_back"

    async def _compensate(self, stage: StageRun) -> list[str]:
        """Run a stage's rollback tasks on the hosts it touched (latest first, or once on
        localhost); returns the hosts where they failed."""
        touched = stage.touched_hosts()
        if stage.rule.rollback_run_once:
            targets = [LOCALHOST] if touched else []
        else:
            targets = list(reversed(touched))
        failures: list[str] = []
        for host in targets:
            if self.abort_reason is not None:
                break
            result = await self._run_aux(stage, host, stage.rule.rollback, f"{stage.name}/rollback/{host}")
            stage.report.rollback_hosts.append(result)
            if result.status != "ok":
                failures.append(f"{stage.name}/{host}")
        return failures

    async def _run_level_rollback(self) -> list[HostResult]:
        progress = self._p()
        if not progress.plan.runbook.rollback:
            return []
        result = await self._run_aux(None, LOCALHOST, progress.plan.runbook.rollback, "run/rollback")
        if result.status != "ok":
            self.msg += f"; run-level rollback failed: {result.msg}"
        return [result]

    # --- gates ---------------------------------------------------------------------------
    async def _stage_gate(self, gate_id: str) -> GateState:
        progress = self._p()
        if gate_id not in progress.gates:
            rule = progress.plan.gates[gate_id]
            progress.gates[gate_id] = run_gates.open_stage_gate(
                rule, workflow.now(), self._requester(), progress.plan.check_mode
            )
        self._set_status("waiting_gate")
        gate = await self._wait_gate(gate_id, lambda: self.abort_reason or self.rollback_request)
        self._set_status("running")
        return gate

    async def _wait_gate(self, gate_id: str, interrupt: Callable[[], str | None]) -> GateState:
        """Wait for a gate to close by votes or timeout; `interrupt` giving a reason closes it."""
        gates = self._p().gates
        while True:
            gate = gates[gate_id]
            if gate.status != "open":
                return gate
            why = interrupt()
            if why is not None:
                gates[gate_id] = gate_rules.close_on_run_end(gate, workflow.now(), f"closed: {why}")
                self._details()
                return gates[gate_id]
            remaining = (gate.deadline - workflow.now()).total_seconds() if gate.deadline else None
            try:
                await workflow.wait_condition(
                    lambda: gates[gate_id].status != "open" or interrupt() is not None,
                    timeout=timedelta(seconds=max(remaining, 0.001)) if remaining is not None else None,
                )
            except TimeoutError:
                updated, escalated = gate_rules.apply_timeout(gates[gate_id], workflow.now())
                gates[gate_id] = updated
                if escalated:
                    workflow.logger.warning(
                        "gate %s escalated to %s", gate_id, ", ".join(updated.rule.escalate_to)
                    )
            self._details()

    async def _host_gate_watch(self, host: str, gate_id: str, stage_host: bool) -> None:
        def interrupt() -> str | None:
            if stage_host:
                return self.abort_reason or self.rollback_request or self.halt_reason
            return self.abort_reason

        gate = await self._wait_gate(gate_id, interrupt)
        approved = gate.status == "approved"
        await self.children.answer_gate(host, gate_id, approved, gate.closed_reason or gate.status)

    def _gates(self) -> dict[str, GateState]:
        return self.progress.gates if self.progress is not None else {}

    # --- state, status, report -----------------------------------------------------------
    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        self._background.add(asyncio.create_task(work))

    def _p(self) -> RunProgress:
        assert self.progress is not None
        return self.progress

    def _stages(self) -> StageRuns:
        assert self.stages is not None
        return self.stages

    def _current_stage_name(self) -> str | None:
        current = self.stages.current() if self.stages is not None else None
        return current.name if current is not None else None

    def _shown_status(self) -> RunState:
        return run_status.shown_state(self.run_status, self.paused)

    def _set_status(self, status: RunState) -> None:
        self.run_status = status
        self._upsert()
        self._details()

    def _upsert(self, stage: str | None = None) -> None:
        updates = run_status.search_attribute_updates(
            self._shown_status(), self.progress, stage, self._indexed
        )
        if updates:
            workflow.upsert_search_attributes(updates)

    def _details(self) -> None:
        if self.progress is not None:
            workflow.set_current_details(run_status.details(self.progress, self._shown_status()))

    async def _finish(self) -> RunReport:
        progress = self._p()
        run_rollback: list[HostResult] = []
        if progress.rollback_reason is not None and self.abort_reason is None:
            run_rollback = await self._run_level_rollback()
        final = run_status.final_state(progress, self.abort_reason, self.msg)
        if final == "aborted":
            if progress.rollback_reason is not None:
                self.msg = f"aborted during rollback ({progress.rollback_reason}): {self.abort_reason}"
            else:
                self.msg = f"aborted: {self.abort_reason}"
        now = workflow.now()
        for gate_id, gate in list(progress.gates.items()):
            progress.gates[gate_id] = gate_rules.close_on_run_end(gate, now, f"run ended ({final})")
        self._set_status(final)
        if self.slack is not None:
            self.slack.run_ended(final, self.msg)
            # Closed gates' messages lose their buttons before the run's result is final.
            await self.slack.stop()
        return run_status.run_report(
            run_id=workflow.info().workflow_id,
            request=self.request,
            progress=progress,
            requester=self._requester(),
            final=final,
            ended_at=now,
            run_rollback=run_rollback,
            msg=self.msg,
        )
