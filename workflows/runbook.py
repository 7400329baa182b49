"""RunbookWorkflow: plan, then stages (gates, rolling hosts, observe), rollback, report.

The process it encodes, per stage: open the `before` gate; launch one HostWorkflow per
host within the stage's `serial`/`rolling` limits and failure budget; after each host,
check `rollback_when`; watch the `observe` window; open the `after` gate. A rollback
trigger stops new launches, lets in-flight hosts finish, and runs the compensations in
reverse order (this stage, earlier stages, then the run-level `rollback`).

All state lives in one `RunProgress` model, so continuing as new is one call.

What a client may not decide: `state` (only a continuation of this run, signed by the
execution it continues, carries it), the messages of the run's hosts (signed by them, see
`workflows/trust.py`), and who a voter or the requester is (only a proof signed with the
vote key makes them verified; see `workflows/gates.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, FailureError
from temporalio.workflow import HandlerUnfinishedPolicy

from workflows import trust

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import (
        Decision,
        GateClosed,
        GateState,
        HostCommand,
        HostGateRequest,
        HostInput,
        HostNotice,
        HostResult,
        HostState,
        Plan,
        Requester,
        RunOnceClaim,
        RunOnceReply,
        RunProgress,
        RunReport,
        RunRequest,
        RunState,
        RunStatus,
        StageProgress,
        StageReport,
        StageState,
        StageStatus,
        VoteRecord,
        request_digest,
    )
    from pitstop.runbook.models import Stage, Task
    from pitstop.runbook.templating import TemplateError, evaluate_bool
    from pitstop.signing import digest
    from pitstop.slack.blocks import escape
    from pitstop.slack.contracts import SlackRunState, add_notice
    from workflows import gates as gate_rules
    from workflows.host import HostWorkflow
    from workflows.notifier import SlackNotifier
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
# Shortest observe interval honoured; a zero interval would make the window a busy loop.
MIN_OBSERVE_INTERVAL_S = 0.05

# How a stage's host loop ended: every eligible host finished, a stop was requested or
# triggered, or nothing can start although hosts remain (their domains are unavailable).
DriveOutcome = Literal["done", "stopped", "stuck"]
# Whether the state a start request carries was checked: "none" (a fresh start), "pending",
# "ok" (a continuation of this run), "refused" (the run ends at once).
StateCheck = Literal["none", "pending", "ok", "refused"]

STATE_FROM_CLIENT = (
    "refused: this start request carries `state`, which only a run continuing as new may carry "
    "(it would skip planning and could bring gates already approved); nothing ran. Start the run "
    "without `state` (and without `state_signature`)"
)
STATE_NOT_SIGNED = (
    "refused: the state this execution continues with is not signed by the execution it continues "
    "(worker key); nothing ran. If the run really continued as new, the workers of this task queue "
    "do not share one worker key (PITSTOP_WORKER_KEY)"
)
# Signed start requests are good for this long, so that one seen in history cannot start
# another run later under the same id.
REQUESTER_PROOF_MAX_AGE = timedelta(minutes=15)
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
        self.state_check: StateCheck = (
            "pending" if request.state is not None or request.state_signature else "none"
        )
        self.run_status: RunState = "planning"
        self.paused = False
        self.requester = Requester(name=request.requested_by)
        # Refusals heard before the plan exists (they join the run's notices once it does).
        self.early_notices: list[str] = []
        # Commands sent to each host workflow (see HostCommand.seq), and the order they go in.
        self.command_seq: dict[str, int] = {}
        self.commands_given = 0
        self.commands_sent = 0
        self.abort_reason: str | None = None
        self.rollback_request: str | None = None
        # Why the current stage stopped launching (a rollback trigger); open host gates of
        # the stage close with it, so that hosts waiting for a vote do not hold the rollback.
        self.halt_reason: str | None = None
        self.hosts_to_skip: set[str] = set()
        # Stage hosts in flight, and the one-off children (observe checks, rollbacks).
        self.children: dict[str, Any] = {}
        self.aux_children: dict[str, Any] = {}
        self.completed: list[HostResult] = []
        self.launches = 0
        self.msg = ""
        # Keeps references to background tasks (child watchers, host gate timers).
        self._background: set[asyncio.Task[None]] = set()
        self._run_once_waiters: dict[str, list[str]] = {}
        # The workflow id of each host's child, set before it starts (its messages may be
        # handled before its start is), removed when it ends.
        self.host_ids: dict[str, str] = {}
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
            if self._proof_checkable(decision):
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

    @workflow.signal
    async def pause(self) -> None:
        self.paused = True
        self._upsert()
        self._details()
        await self._command_hosts("pause")

    @workflow.signal
    async def resume(self) -> None:
        self.paused = False
        self._upsert()
        self._details()
        await self._command_hosts("resume")

    @workflow.signal
    async def abort(self, reason: str) -> None:
        self.abort_reason = reason or "aborted by operator"
        await self._command_hosts("abort", self.abort_reason)

    @workflow.signal
    async def skip_host(self, host: str) -> None:
        self.hosts_to_skip.add(host)
        if host in self.children:
            await self._command_hosts("abort", "skipped by operator", [self.children[host]])

    @workflow.signal
    def rollback(self, reason: str) -> None:
        self.rollback_request = reason or "rollback requested by operator"

    # --- messages from the run's own hosts (signed: see workflows/trust.py) -----------------
    @workflow.signal(unfinished_policy=_ABANDON)
    async def host_gate(self, request: HostGateRequest) -> None:
        if not await self._from_host("host_gate", request, request.host):
            return
        progress = self._p()
        known = progress.gates.get(request.gate_id)
        if known is not None:
            # Asked again for a gate already decided: the decision stands.
            if known.status != "open":
                approved = known.status == "approved"
                await self._answer_host_gate(
                    request.host, request.gate_id, approved, known.closed_reason or ""
                )
            return
        rule = progress.plan.gates.get(request.template)
        if rule is None or request.gate_id != f"{request.template}@{request.host}":
            await self._answer_host_gate(request.host, request.gate_id, False, "is not in the plan")
            return
        if progress.plan.check_mode:
            await self._answer_host_gate(request.host, request.gate_id, True, "skipped in check mode")
            return
        rule = rule.model_copy(update={"gate_id": request.gate_id})
        progress.gates[request.gate_id] = gate_rules.open_gate(rule, workflow.now(), self._requester())
        self._details()
        # A stage host's gate also closes when the stage stops; a compensation's only on abort.
        stage_host = request.host in self.children
        self._background.add(
            asyncio.create_task(self._host_gate_watch(request.host, request.gate_id, stage_host))
        )

    @workflow.signal(unfinished_policy=_ABANDON)
    async def run_once_claim(self, claim: RunOnceClaim) -> None:
        if not await self._from_host("run_once_claim", claim, claim.host):
            return
        progress = self._p()
        known = progress.run_once.get(claim.task_id)
        if known is None:
            known = RunOnceReply(task_id=claim.task_id, owner=claim.host)
            progress.run_once[claim.task_id] = known
            self._waiters(claim.task_id).append(claim.host)
            await self._reply_run_once([claim.host], known)
            return
        self._waiters(claim.task_id).append(claim.host)
        if known.result is not None:
            await self._reply_run_once([claim.host], known)

    @workflow.signal(unfinished_policy=_ABANDON)
    async def run_once_done(self, reply: RunOnceReply) -> None:
        if not await self._from_host("run_once_done", reply, reply.owner):
            return
        progress = self._p()
        known = progress.run_once.get(reply.task_id)
        # Only the host that owns the task reports its result, and only once.
        if known is None or known.owner != reply.owner or known.result is not None:
            self._refused(
                "run_once_done", f"{reply.owner!r} does not own a pending result of {reply.task_id!r}"
            )
            return
        done = RunOnceReply(task_id=reply.task_id, owner=reply.owner, result=reply.result)
        progress.run_once[reply.task_id] = done
        await self._reply_run_once([h for h in self._waiters(reply.task_id) if h != reply.owner], done)

    @workflow.signal(unfinished_policy=_ABANDON)
    async def host_notice(self, notice: HostNotice) -> None:
        if await self._from_host("host_notice", notice, notice.host):
            self._notice(notice.text)

    async def _from_host(
        self, kind: str, message: HostGateRequest | RunOnceClaim | RunOnceReply | HostNotice, host: str
    ) -> bool:
        """Whether `message` comes from the host workflow this run runs for `host`."""
        child_id = self.host_ids.get(host)
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
        progress = self.progress
        return RunStatus(
            run_id=workflow.info().workflow_id,
            runbook=progress.plan.runbook.name if progress else self.request.runbook,
            requested_by=self.request.requested_by,
            requester=self._requester(),
            check_mode=self.request.check_mode,
            status=self._shown_status(),
            current_stage=self._current_stage_name(),
            paused=self.paused,
            stages=list(progress.statuses) if progress else [],
            gates=list(progress.gates.values()) if progress else [],
            rollback_reason=progress.rollback_reason if progress else None,
            plan_hash=progress.plan.hashes.content if progress else None,
            artifacts=list(progress.artifacts) if progress else [],
            notices=list(progress.notices) if progress else list(self.early_notices),
        )

    @workflow.query
    def slack_thread(self) -> SlackRunState:
        """The run's Slack side: `notify.slack` with `thread: run` replies under its first message."""
        return self.progress.slack if self.progress is not None else SlackRunState()

    # --- the run -----------------------------------------------------------------------
    @workflow.run
    async def run(self, request: RunRequest) -> RunReport:
        if self.state_check == "pending":
            refused = await self._continue_from(request)
            if refused is not None:
                return self._early_report(refused)
        else:
            refused = await self._check_requester(request)
            if refused is not None:
                return self._early_report(refused)
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
                requester=self.requester,
                # What the plan's reviewer must see first (a stage that bypasses PDBs).
                notices=[*(w for s in planned.stages for w in s.warnings), *self.early_notices],
            )
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
        self.progress = state
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
        problem: str | None = None
        if proof.run != workflow.info().workflow_id:
            problem = f"it is signed for run {proof.run!r}, not this run"
        elif proof.requested_by != request.requested_by:
            problem = f"it is signed for requester {proof.requested_by!r}, not {request.requested_by!r}"
        elif proof.request != request_digest(request):
            problem = "the request was changed after it was signed"
        elif abs(workflow.now() - proof.at) > REQUESTER_PROOF_MAX_AGE:
            problem = f"it was signed at {proof.at.isoformat()}, too long before this run started"
        else:
            verdict = await trust.check_requester(proof)
            if not verdict.valid:
                problem = verdict.reason
        if problem is not None:
            return (
                f"refused: the start request's requester signature is not valid ({problem}); nothing ran. "
                "Start the run again (without a signature, the requester is shown as unverified)"
            )
        self.requester = Requester(name=request.requested_by, verified=True, subject=proof.subject)
        return None

    def _requester(self) -> Requester:
        if self.progress is not None and self.progress.requester is not None:
            return self.progress.requester
        return self.requester

    def _requester_shown(self) -> str:
        requester = self._requester()
        return requester.name if requester.verified else f"{requester.name} (unverified)"

    async def _run_stages(self) -> None:
        progress = self._p()
        while progress.stage_index < len(progress.plan.stages):
            outcome = await self._run_stage(progress.stage_index)
            self._say_stage(progress.stage_index)
            if outcome != "ok":
                return
            progress.stage_index += 1
            progress.stage = StageProgress()

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
        now = workflow.now()
        return RunReport(
            run_id=workflow.info().workflow_id,
            runbook=self.request.runbook,
            requested_by=self.request.requested_by,
            requester=self.requester,
            check_mode=self.request.check_mode,
            status="failed",
            started_at=now,
            ended_at=now,
            msg=msg,
            notices=list(self.early_notices),
        )

    async def _run_stage(self, index: int) -> str:
        """Run one stage from its recorded phase; returns 'ok', 'stopped' or 'rolled_back'."""
        progress = self._p()
        stage = progress.plan.runbook.stages[index]
        sp = progress.stage
        status = progress.statuses[index]
        self.halt_reason = None
        self._upsert(stage=stage.name)
        if sp.phase == "gate_before":
            if stage.gate is not None and stage.gate.before:
                status.status = "waiting_gate"
                gate = await self._stage_gate(f"{stage.name}:before")
                if gate.status != "approved":
                    if self.abort_reason is None and self.rollback_request is not None:
                        # This stage never started; the stages before it are compensated.
                        await self._rollback(index, self.rollback_request)
                        return "rolled_back"
                    return self._stop_stage(
                        index,
                        "aborted" if self.abort_reason else "skipped",
                        f"stopped before stage {stage.name!r}: {gate.closed_reason}",
                    )
            sp.phase = "hosts"
        if sp.phase == "hosts":
            status.status = "running"
            self._set_status("running")
            outcome = await self._run_hosts(index, stage)
            if self.abort_reason is not None:
                return self._stop_stage(index, "aborted", "")
            trigger = self._rollback_trigger(index, stage)
            if trigger is not None:
                await self._rollback(index, trigger)
                return "rolled_back"
            if sp.failed and not sp.done:
                # As Ansible ends a playbook when a play has no hosts left: a stage where every
                # host failed stops the run (a refused preflight must not go on to upgrade).
                return self._stop_stage(
                    index, "failed", f"every host of stage {stage.name!r} failed{self._failures_said(index)}"
                )
            if outcome == "stuck":
                return self._stop_stage(
                    index,
                    "failed",
                    f"stage {stage.name!r} stopped: {status.blocked_reason or 'no host can start'}",
                )
            sp.phase = "observe"
        if sp.phase == "observe":
            if stage.observe is not None:
                status.status = "observing"
                self._details()
                trigger = await self._observe(index, stage)
                if self.abort_reason is not None:
                    return self._stop_stage(index, "aborted", "")
                if trigger is not None:
                    await self._rollback(index, trigger)
                    return "rolled_back"
            sp.phase = "gate_after"
        if sp.phase == "gate_after":
            if stage.gate is not None and stage.gate.after:
                status.status = "waiting_gate"
                gate = await self._stage_gate(f"{stage.name}:after")
                if self.abort_reason is not None:
                    return self._stop_stage(index, "aborted", "")
                if gate.status != "approved":
                    await self._rollback(
                        index, self.rollback_request or f"gate {stage.name}:after {gate.closed_reason}"
                    )
                    return "rolled_back"
            sp.phase = "done"
        status.status = "failed" if sp.failed else "ok"
        progress.reports[index].status = status.status
        return "ok"

    def _stop_stage(self, index: int, state: StageState, msg: str) -> str:
        """The run stops in this stage: hosts that never started are marked skipped."""
        progress = self._p()
        status = progress.statuses[index]
        status.status = state
        progress.reports[index].status = state
        for host, host_state in status.hosts.items():
            if host_state == "pending":
                status.hosts[host] = "skipped"
        if msg:
            self.msg = msg
        return "stopped"

    def _say(self, text: str, broadcast: bool = False) -> None:
        if self.slack is not None:
            self.slack.say(text, broadcast)

    def _say_stage(self, index: int) -> None:
        status = self._p().statuses[index]
        counts: dict[str, int] = {}
        for value in status.hosts.values():
            counts[value] = counts.get(value, 0) + 1
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no hosts"
        self._say(f"Stage *{escape(status.name)}*: {status.status} ({summary})")

    # --- hosts -------------------------------------------------------------------------
    async def _run_hosts(self, index: int, stage: Stage) -> DriveOutcome:
        progress = self._p()
        planned = progress.plan.stages[index]
        sp = progress.stage
        self._skip_failed_earlier(index)
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
                outcome = await self._drive(index, stage, state, limits)
                if outcome != "done":
                    return outcome
            return "done"
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
        return await self._drive(index, stage, state, limits)

    async def _drive(
        self, index: int, stage: Stage, state: RolloutState, limits: RolloutLimits
    ) -> DriveOutcome:
        """Launch and collect hosts until the eligible ones are done, or the stage stops."""
        status = self._p().statuses[index]
        while True:
            while self.completed:
                self._collect(index, state, self.completed.pop(0))
            self._apply_skips(index, state)
            stop = self._stop_reason(index, stage, state, limits)
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
                        await self._launch(index, stage, hosts)
            pending = state.pending()
            status.blocked_reason = self._blocked_reason(state, limits, stop) if pending else None
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

    def _stop_reason(
        self, index: int, stage: Stage, state: RolloutState, limits: RolloutLimits
    ) -> str | None:
        if self.abort_reason is not None:
            return f"aborted: {self.abort_reason}"
        trigger = self._rollback_trigger(index, stage)
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

    def _skip_failed_earlier(self, index: int) -> None:
        # As in Ansible, a host that failed takes no further part in the run.
        progress = self._p()
        failed_in: dict[str, str] = {}
        for report in progress.reports[:index]:
            for result in report.hosts:
                if result.status == "failed":
                    failed_in.setdefault(result.host, report.name)
        for host in progress.plan.stages[index].hosts:
            if host in failed_in and host not in progress.stage.skipped:
                self._mark_skipped(index, host, f"not run: failed in stage {failed_in[host]!r}")

    def _apply_skips(self, index: int, state: RolloutState) -> None:
        for host in sorted(self.hosts_to_skip & set(state.pending())):
            state.skipped.add(host)
            self._mark_skipped(index, host, "skipped by operator")

    def _mark_skipped(self, index: int, host: str, msg: str) -> None:
        progress = self._p()
        now = workflow.now()
        progress.stage.skipped.append(host)
        progress.statuses[index].hosts[host] = "skipped"
        progress.reports[index].hosts.append(
            HostResult(
                host=host,
                stage=progress.plan.stages[index].name,
                status="skipped",
                msg=msg,
                started_at=now,
                ended_at=now,
            )
        )

    async def _launch(self, index: int, stage: Stage, hosts: list[str]) -> None:
        """Start one HostWorkflow per host, their inputs signed together (one local activity)."""
        progress = self._p()
        wid = workflow.info().workflow_id
        inputs: list[tuple[HostInput, str]] = []
        for host in hosts:
            self.launches += 1
            progress.stage.started.append(host)
            progress.statuses[index].hosts[host] = "running"
            child_id = f"{wid}/{stage.name}/{host}"
            self.host_ids[host] = child_id
            inputs.append(
                (trust.normalized(self._host_input(stage, host, stage.tasks, stage_handlers=True)), child_id)
            )
        signed = await trust.sign_host_inputs(inputs)
        await asyncio.gather(
            *(
                self._start_host(stage, inp, child_id)
                for inp, (_, child_id) in zip(signed, inputs, strict=True)
            )
        )

    async def _start_host(self, stage: Stage, inp: HostInput, child_id: str) -> None:
        handle = await workflow.start_child_workflow(
            HostWorkflow.run, inp, id=child_id, task_queue=workflow.info().task_queue
        )
        self.children[inp.host] = handle
        await self._catch_up(handle, inp.host)
        self._background.add(asyncio.create_task(self._await_child(inp.host, stage.name, handle)))

    async def _catch_up(self, handle: Any, host: str) -> None:
        """Tell a host that just started what it missed while its input was signed and it was
        started: an abort, a skip, a pause (each command goes to the hosts running when it is given)."""
        if self.abort_reason is not None:
            await self._command_hosts("abort", self.abort_reason, [handle])
        elif host in self.hosts_to_skip and host in self.children:
            await self._command_hosts("abort", "skipped by operator", [handle])
        elif self.paused:
            await self._command_hosts("pause", handles=[handle])

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

    async def _run_aux(self, stage: Stage | None, host: str, tasks: list[Task], suffix: str) -> HostResult:
        """A one-off child (observe check, rollback), reachable for its gates and run_once."""
        child_id = f"{workflow.info().workflow_id}/{suffix}"
        self.host_ids[host] = child_id
        [inp] = await trust.sign_host_inputs(
            [
                (
                    trust.normalized(
                        self._host_input(stage, host, tasks, stage_handlers=False, select_tags=False)
                    ),
                    child_id,
                )
            ]
        )
        handle = await workflow.start_child_workflow(
            HostWorkflow.run, inp, id=child_id, task_queue=workflow.info().task_queue
        )
        self.aux_children[host] = handle
        await self._catch_up(handle, host)
        try:
            result = await self._child_result(host, stage.name if stage else "run", handle)
        finally:
            self.aux_children.pop(host, None)
            self.host_ids.pop(host, None)
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

    def _collect(self, index: int, state: RolloutState, result: HostResult) -> None:
        progress = self._p()
        self.children.pop(result.host, None)
        self.host_ids.pop(result.host, None)
        self._close_host_gates(result.host, f"host {result.host} ended ({result.status})")
        state.in_flight.discard(result.host)
        host_state: HostState = result.status
        if result.status == "failed":
            state.failed.add(result.host)
            progress.stage.failed.append(result.host)
        elif result.status == "aborted":
            state.skipped.add(result.host)
            progress.stage.skipped.append(result.host)
            if result.host in self.hosts_to_skip:
                host_state = "skipped"
                result = result.model_copy(update={"status": "skipped"})
        else:
            state.done.add(result.host)
            progress.stage.done.append(result.host)
        progress.statuses[index].hosts[result.host] = host_state
        progress.reports[index].hosts.append(result)
        self._keep(result)

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

    def _host_input(
        self,
        stage: Stage | None,
        host: str,
        tasks: list[Task],
        stage_handlers: bool,
        extra: dict[str, Any] | None = None,
        select_tags: bool = True,
    ) -> HostInput:
        plan = self._p().plan
        hostvars = plan.hostvars.get(host, {"inventory_hostname": host, "group_names": []})
        merged: dict[str, Any] = dict(hostvars)
        merged.update(plan.runbook.vars)
        if stage is not None:
            merged.update(stage.vars)
        # Facts set in earlier stages sit above play vars and below extra vars (Ansible).
        merged.update(self._p().host_facts.get(host, {}))
        merged.update(plan.extra_vars)
        merged.setdefault("groups", self._groups())
        merged["run"] = self._run_vars()
        merged["stage"] = self._stage_vars(stage)
        if extra:
            merged.update(extra)
        if stage is not None and stage.tags:
            # A stage's tags apply to every task in it, as a play's do in Ansible.
            tasks = [t.model_copy(update={"tags": [*stage.tags, *t.tags]}) for t in tasks]
        handlers = [*(stage.handlers if stage is not None and stage_handlers else []), *plan.runbook.handlers]
        return HostInput(
            run_workflow_id=workflow.info().workflow_id,
            run_id=workflow.info().workflow_id,
            stage=stage.name if stage is not None else "run",
            host=host,
            tasks=tasks,
            handlers=handlers,
            vars=merged,
            hostvars=self._hostvars(),
            modules=plan.modules,
            task_queue=plan.task_queue,
            cluster=plan.cluster,
            check_mode=plan.check_mode,
            # Compensations and observe checks run whole, whatever --tags chose.
            tags=plan.tags if select_tags else [],
            skip_tags=plan.skip_tags if select_tags else [],
            approvers=plan.runbook.approvers,
            requested_by=self.request.requested_by,
        )

    def _hostvars(self) -> dict[str, dict[str, Any]]:
        """`hostvars`, with the facts localhost set in earlier stages: run-wide results (the
        version inventory, the acceptance baseline) are set there and read by every host as
        `hostvars['localhost'].<fact>`. Other hosts' facts stay their own, so that a task's
        input does not grow with the fleet."""
        progress = self._p()
        carried = progress.host_facts.get(LOCALHOST)
        if not carried:
            return progress.plan.hostvars
        hostvars = dict(progress.plan.hostvars)
        hostvars[LOCALHOST] = {**hostvars.get(LOCALHOST, {"inventory_hostname": LOCALHOST}), **carried}
        return hostvars

    def _groups(self) -> dict[str, list[str]]:
        """Ansible's `groups` magic variable: each group's hosts, and `all`."""
        plan = self._p().plan
        groups: dict[str, list[str]] = {"all": []}
        for host, hv in plan.hostvars.items():
            if host != LOCALHOST:
                groups["all"].append(host)
            for group in hv.get("group_names") or []:
                groups.setdefault(str(group), []).append(host)
        return groups

    def _run_vars(self) -> dict[str, Any]:
        progress = self.progress
        return {
            "id": workflow.info().workflow_id,
            "runbook": progress.plan.runbook.name if progress else self.request.runbook,
            "cluster": progress.plan.cluster.name if progress and progress.plan.cluster else None,
            "requested_by": self.request.requested_by,
            # Whether a holder of the vote key vouched for the requester (and who that was).
            "requester_verified": self._requester().verified,
            "requester_source": self._requester().subject,
            "check_mode": self.request.check_mode,
            "started_at": progress.started_at.isoformat() if progress else None,
            "rollback_reason": progress.rollback_reason if progress else None,
            # What a change record reports: each stage's outcome and every gate's votes.
            "stages": self._stage_summaries() if progress else [],
            "gates": self._gate_summaries() if progress else [],
        }

    def _stage_summaries(self) -> list[dict[str, Any]]:
        progress = self._p()
        out: list[dict[str, Any]] = []
        for status, report in zip(progress.statuses, progress.reports, strict=True):
            out.append(
                {
                    "name": status.name,
                    "status": status.status,
                    "rollback_reason": status.rollback_reason,
                    "done_hosts": [h for h, st in status.hosts.items() if st == "ok"],
                    "failed_hosts": [h for h, st in status.hosts.items() if st == "failed"],
                    "failures": [
                        {"host": h.host, "task": h.failed_task, "msg": h.msg[:500]}
                        for h in [*report.hosts, *report.observations, *report.rollback_hosts]
                        if h.status == "failed"
                    ],
                }
            )
        return out

    def _gate_summaries(self) -> list[dict[str, Any]]:
        return [
            {
                "id": gate_id,
                "status": gate.status,
                "closed_reason": gate.closed_reason,
                "votes": [
                    {
                        "approver": v.approver,
                        "approve": v.approve,
                        "comment": v.comment,
                        "source": v.source,
                        "verified": v.verified,
                        "at": v.at.isoformat(),
                    }
                    for v in gate.votes
                ],
            }
            for gate_id, gate in self._p().gates.items()
        ]

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
            "skipped_hosts": list(sp.skipped)
            if sp
            else [h.host for h in report.hosts if h.status == "skipped"],
            "results": {h.host: {"status": h.status, "msg": h.msg} for h in report.hosts},
        }

    # --- rollback triggers, observe, rollback ------------------------------------------------
    def _rollback_trigger(self, index: int, stage: Stage) -> str | None:
        progress = self._p()
        if self.rollback_request is not None:
            return self.rollback_request
        sp = progress.stage
        total = len(progress.plan.stages[index].hosts)
        if stage.any_errors_fatal and sp.failed:
            return f"any_errors_fatal: {sp.failed[0]} failed in stage {stage.name!r}"
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
                        held = f"rollback_when held in stage {stage.name!r}: {expression}"
                        return held + self._failures_said(index)
                except TemplateError as exc:
                    return f"rollback_when could not be evaluated ({exc}); rolling back to be safe"
        return None

    def _failures_said(self, index: int, most: int = 2) -> str:
        """The stage's failed hosts and why, so that the rollback reason explains itself."""
        failed = [h for h in self._p().reports[index].hosts if h.status == "failed"]
        if not failed:
            return ""
        said = "; ".join(
            f"{h.host}: {(h.failed_task + ': ') if h.failed_task else ''}{h.msg[:300]}" for h in failed[:most]
        )
        more = f" (and {len(failed) - most} more)" if len(failed) > most else ""
        return f" ({said}{more})"

    async def _observe(self, index: int, stage: Stage) -> str | None:
        """Watch the stage for `observe.duration`: run the checks every `interval`; a failing
        check, or an operator's rollback, is a rollback trigger."""
        progress = self._p()
        observe = stage.observe
        assert observe is not None
        interval = max(observe.interval, MIN_OBSERVE_INTERVAL_S)
        rounds = max(1, math.floor(observe.duration / interval + 1e-9))
        # A plan shows what the checks would say once; it does not wait out the window.
        check_mode = progress.plan.check_mode
        while progress.stage.observe_round < rounds:
            if not check_mode:
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(
                        lambda: self.rollback_request is not None or self.abort_reason is not None,
                        timeout=timedelta(seconds=interval),
                    )
            if self.abort_reason is not None or self.rollback_request is not None:
                return self.rollback_request
            n = progress.stage.observe_round
            progress.stage.observe_round += 1
            if observe.checks:
                result = await self._run_aux(stage, LOCALHOST, observe.checks, f"{stage.name}/observe/{n}")
                progress.reports[index].observations.append(result)
                if result.status == "failed":
                    return f"observe check failed in stage {stage.name!r}: {result.failed_task}: {result.msg}"
            if check_mode:
                break
        return None

    async def _rollback(self, index: int, reason: str) -> None:
        """Compensate in reverse order: this stage, then every earlier stage (a saga)."""
        progress = self._p()
        progress.rollback_reason = reason
        progress.statuses[index].rollback_reason = reason
        progress.reports[index].rollback_reason = reason
        self._set_status("rolling_back")
        self._say(f":rewind: Rolling back: {escape(reason)}", broadcast=True)
        failures: list[str] = []
        for i in range(index, -1, -1):
            if self.abort_reason is not None:
                break
            stage = progress.plan.runbook.stages[i]
            report = progress.reports[i]
            if stage.rollback:
                touched = (
                    list(progress.stage.started)
                    if i == index
                    else [h.host for h in report.hosts if h.status != "skipped"]
                )
                if stage.rollback_run_once:
                    targets = [LOCALHOST] if touched else []
                else:
                    targets = list(reversed(touched))
                for host in targets:
                    if self.abort_reason is not None:
                        break
                    result = await self._run_aux(stage, host, stage.rollback, f"{stage.name}/rollback/{host}")
                    report.rollback_hosts.append(result)
                    if result.status != "ok":
                        failures.append(f"{stage.name}/{host}")
                progress.statuses[i].status = "rolled_back"
                report.status = "rolled_back"
            else:
                # Nothing undoes this stage: say so rather than call it rolled back (a
                # reviewer must not read "rolled back" for a control plane left upgraded).
                if i == index:
                    progress.statuses[i].status = "failed"
                    report.status = "failed"
                else:
                    progress.statuses[i].rollback_reason = "no rollback tasks: left as it is"
                    report.rollback_reason = progress.statuses[i].rollback_reason
            self._details()
        self.msg = f"rolled back: {reason}"
        if failures:
            self.msg += f"; compensation failed on {', '.join(failures)}"

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
        gate = progress.gates.get(gate_id)
        if gate is None:
            rule = progress.plan.gates[gate_id]
            gate = gate_rules.open_gate(rule, workflow.now(), self._requester())
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
        gate = await self._wait_gate(gate_id, lambda: self.abort_reason or self.rollback_request)
        self._set_status("running")
        return gate

    async def _wait_gate(self, gate_id: str, interrupt: Callable[[], str | None]) -> GateState:
        """Wait for a gate to close by votes or timeout; `interrupt` giving a reason closes it."""
        progress = self._p()
        while True:
            gate = progress.gates[gate_id]
            if gate.status != "open":
                return gate
            why = interrupt()
            if why is not None:
                progress.gates[gate_id] = gate_rules.close_on_run_end(gate, workflow.now(), f"closed: {why}")
                self._details()
                return progress.gates[gate_id]
            remaining = (gate.deadline - workflow.now()).total_seconds() if gate.deadline else None
            try:
                await workflow.wait_condition(
                    lambda: progress.gates[gate_id].status != "open" or interrupt() is not None,
                    timeout=timedelta(seconds=max(remaining, 0.001)) if remaining is not None else None,
                )
            except TimeoutError:
                updated, escalated = gate_rules.apply_timeout(progress.gates[gate_id], workflow.now())
                progress.gates[gate_id] = updated
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
        await self._answer_host_gate(host, gate_id, approved, gate.closed_reason or gate.status)

    async def _answer_host_gate(self, host: str, gate_id: str, approved: bool, reason: str) -> None:
        await self._signal_host(
            host, "gate_closed", GateClosed(gate_id=gate_id, approved=approved, reason=reason)
        )

    def _judge(
        self, decision: Decision, check: gate_rules.VoteCheck | None
    ) -> tuple[str, GateState | None, str | None]:
        """The gate a vote is for, and why it may not count (None when it may)."""
        try:
            gate_id = self._gate_id_for(decision)
        except ValueError as exc:
            return "", None, str(exc)
        gates = self._gates()
        gate = gates.get(gate_id)
        now = workflow.now()
        if gate is not None and decision.proof is not None:
            clicks = gate_rules.seen_clicks(list(gates.values()))
            problem = gate_rules.proof_problem(decision, gate_id, workflow.info().workflow_id, now, clicks)
            if problem is not None:
                return gate_id, gate, problem
        reason = gate_rules.refusal_reason(gate, decision, self._requester(), now, gate_id, check)
        return gate_id, gate, reason

    def _proof_checkable(self, decision: Decision) -> bool:
        """A signed vote for a gate of this run whose proof passes the cheap checks."""
        try:
            gate_id = self._gate_id_for(decision)
        except ValueError:
            return False
        gates = self._gates()
        if gate_id not in gates or decision.proof is None:
            return False
        clicks = gate_rules.seen_clicks(list(gates.values()))
        now = workflow.now()
        return gate_rules.proof_problem(decision, gate_id, workflow.info().workflow_id, now, clicks) is None

    def _gate_id_for(self, decision: Decision) -> str:
        if decision.gate:
            return decision.gate
        open_ids = sorted(g.rule.gate_id for g in self._gates().values() if g.status == "open")
        if len(open_ids) == 1:
            return open_ids[0]
        if len(open_ids) > 1:
            raise ValueError(f"several gates are open ({', '.join(open_ids)}); name one with --gate")
        raise ValueError("no gate is open in this run; there is nothing to vote on")

    def _gates(self) -> dict[str, GateState]:
        return self.progress.gates if self.progress is not None else {}

    # --- children, status, report --------------------------------------------------------
    async def _signal(self, handle: Any, signal: str, *args: Any) -> None:
        # A child may finish between our decision to signal it and the signal's delivery;
        # that is news, not an error (an exception here would fail the whole run).
        try:
            await handle.signal(signal, *args)
        except Exception as exc:
            workflow.logger.info("signal %s to %s not delivered: %s", signal, handle.id, exc)

    async def _signal_host(self, host: str, signal: str, message: GateClosed | RunOnceReply) -> None:
        """Send a signed message to the host workflow this run runs for `host`, if it still runs."""
        # A host's message can be handled before its start is (same activation): wait for it.
        await workflow.wait_condition(
            lambda: host in self.children or host in self.aux_children or host not in self.host_ids
        )
        handle = self.children.get(host) or self.aux_children.get(host)
        if handle is not None:
            signed = await trust.sign_message(signal, message, handle.id, handle.first_execution_run_id or "")
            await self._signal(handle, signal, signed)

    async def _reply_run_once(self, hosts: list[str], reply: RunOnceReply) -> None:
        await asyncio.gather(*(self._signal_host(host, "run_once_reply", reply) for host in hosts))

    async def _command_hosts(
        self, command: Literal["pause", "resume", "abort"], reason: str = "", handles: list[Any] | None = None
    ) -> None:
        """Pause, resume or abort hosts (default: every host workflow in flight), signed together."""
        # One command at a time, in the order they were given: each host gets them in order.
        ticket = self.commands_given
        self.commands_given += 1
        await workflow.wait_condition(lambda: self.commands_sent == ticket)
        try:
            if handles is None:
                handles = [*self.children.values(), *self.aux_children.values()]
            if not handles:
                return
            to: list[tuple[HostCommand, str, str]] = []
            for handle in handles:
                seq = self.command_seq[handle.id] = self.command_seq.get(handle.id, 0) + 1
                command_for = HostCommand(command=command, reason=reason, seq=seq)
                to.append((command_for, handle.id, handle.first_execution_run_id or ""))
            signed = await trust.sign_messages(command, to)
            await asyncio.gather(*(self._signal(h, command, m) for h, m in zip(handles, signed, strict=True)))
        finally:
            self.commands_sent += 1

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

    def _shown_status(self) -> RunState:
        return "paused" if self.paused and self.run_status == "running" else self.run_status

    def _set_status(self, status: RunState) -> None:
        self.run_status = status
        self._upsert()
        self._details()

    def _upsert(self, stage: str | None = None) -> None:
        progress = self.progress
        wanted: dict[str, str] = {STATUS_KEY.name: self._shown_status()}
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
        lines = [f"**{progress.plan.runbook.name}**: {self._shown_status()}"]
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
        workflow.set_current_details("\n".join(lines))

    async def _finish(self) -> RunReport:
        progress = self._p()
        run_rollback: list[HostResult] = []
        final: RunState
        if progress.rollback_reason is not None:
            if self.abort_reason is None:
                run_rollback = await self._run_level_rollback()
            if self.abort_reason is not None:
                final = "aborted"
                self.msg = f"aborted during rollback ({progress.rollback_reason}): {self.abort_reason}"
            else:
                final = "rolled_back"
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
        if self.slack is not None:
            ending = f"Run ended: *{final}*" + (f": {escape(self.msg)}" if self.msg else "")
            self._say(ending, broadcast=final != "succeeded")
            # Closed gates' messages lose their buttons before the run's result is final.
            await self.slack.stop()
        return RunReport(
            run_id=workflow.info().workflow_id,
            runbook=progress.plan.runbook.name,
            requested_by=self.request.requested_by,
            requester=self._requester(),
            check_mode=progress.plan.check_mode,
            status=final,
            started_at=progress.started_at,
            ended_at=now,
            cluster=progress.plan.cluster.name if progress.plan.cluster else None,
            hashes=progress.plan.hashes,
            stages=progress.reports,
            gates=list(progress.gates.values()),
            rollback_reason=progress.rollback_reason,
            run_rollback=run_rollback,
            artifacts=list(progress.artifacts),
            msg=self.msg,
            notices=list(progress.notices),
        )
