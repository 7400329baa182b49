"""HostWorkflow: one host's task list in one stage.

Reads like an Ansible play for a single host: tasks in order, `block/rescue/always`,
`when`, `loop`, `register`, `retries/until/delay` on durable timers, `failed_when`,
`changed_when`, `ignore_errors`, `notify` + handlers at the end. Pure modules (debug,
set_fact, assert, fail, pause) are evaluated here; every other module is an activity on
the cluster's task queue. Per-host gates and `run_once` are coordinated through the
parent RunbookWorkflow, which owns every gate and every run-once result of the run.

Only the run may start a host or talk to it: the input and every message in both directions
carry the sender's signature (worker key, `workflows/trust.py`). A host started by anyone
else refuses to run; a message without a valid signature changes nothing and is reported to
the run, which lists it in its notices.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError
from temporalio.workflow import HandlerUnfinishedPolicy

from workflows import trust

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import (
        FACTS_LIMIT_BYTES,
        Artifact,
        GateClosed,
        HostCommand,
        HostGateRequest,
        HostInput,
        HostNotice,
        HostResult,
        ModuleCall,
        ModuleExec,
        ModuleResult,
        RunOnceClaim,
        RunOnceReply,
        TaskOutcome,
        TaskStatus,
    )
    from pitstop.runbook.models import Task
    from pitstop.runbook.templating import TemplateError, evaluate_bool, render

# Ansible's defaults for `until` without `retries`/`delay`.
DEFAULT_UNTIL_RETRIES = 3
DEFAULT_DELAY_S = 5.0
# What Ansible registers for a task whose `when` was false.
SKIPPED_BY_CONDITION: dict[str, Any] = {
    "changed": False,
    "failed": False,
    "skipped": True,
    "msg": "condition false",
    "skip_reason": "Conditional result was False",
}
# Refused messages a host reports to the run (more would only let a flood grow the history).
MAX_REPORTED_REFUSALS = 10
NOT_SIGNED = (
    "its signature does not verify: it was not sent by this host's run (or the workers of this "
    "task queue do not share one worker key, PITSTOP_WORKER_KEY)"
)
INPUT_REFUSED = (
    "refused to run: this host workflow's input is not signed by a pitstop run for it (a host "
    "workflow is started only by its RunbookWorkflow; if it was, the workers of this task queue "
    "do not share one worker key, PITSTOP_WORKER_KEY); nothing ran"
)
_ABANDON = HandlerUnfinishedPolicy.ABANDON


@dataclass
class _Flow:
    """Outcome of running a list of tasks."""

    failed: bool = False
    aborted: bool = False
    msg: str = ""
    failed_task: str | None = None
    failed_task_id: str | None = None
    result: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Scope:
    """What a block hands down to every task inside it, as in Ansible: its tags, its
    `when` conditions (evaluated again for each task) and its vars."""

    tags: tuple[str, ...] = ()
    when: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)
    by_tags: bool = True


@dataclass
class _HostRun:
    vars: dict[str, Any]
    # `set_fact` results; above task and block vars, as Ansible's precedence puts them.
    facts: dict[str, Any] = field(default_factory=dict)
    # Facts set for other hosts (`delegate_facts`), carried to them by the parent.
    delegated: dict[str, dict[str, Any]] = field(default_factory=dict)
    registered: dict[str, Any] = field(default_factory=dict)
    outcomes: list[TaskOutcome] = field(default_factory=list)
    notified: list[str] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    changed: int = 0


def _status_of(result: ModuleResult) -> TaskStatus:
    if result.failed:
        return "failed"
    if result.skipped:
        return "skipped"
    return "changed" if result.changed else "ok"


@workflow.defn(name="HostWorkflow")
class HostWorkflow:
    @workflow.init
    def __init__(self, inp: HostInput) -> None:
        self.inp = inp
        self.paused = False
        self.abort_reason: str | None = None
        self.gate_results: dict[str, GateClosed] = {}
        self.run_once: dict[str, RunOnceReply] = {}
        self.current_task: str | None = None
        # Whether the input's signature checked out (None until run() has checked it).
        self.input_ok: bool | None = None
        self.command_seq = 0
        # Commands still being checked: no new task starts meanwhile, so that a pause that
        # arrives with a task's result holds the next task, as an unchecked one would.
        self.commands_checking = 0
        self.refusals = 0

    # --- messages from the parent (each verified before it changes anything) ----------------
    @workflow.signal(unfinished_policy=_ABANDON)
    async def pause(self, command: Any = None) -> None:
        if await self._command("pause", command) is not None:
            self.paused = True

    @workflow.signal(unfinished_policy=_ABANDON)
    async def resume(self, command: Any = None) -> None:
        if await self._command("resume", command) is not None:
            self.paused = False

    @workflow.signal(unfinished_policy=_ABANDON)
    async def abort(self, command: Any = None) -> None:
        accepted = await self._command("abort", command)
        if accepted is not None:
            self.abort_reason = accepted.reason or "aborted"

    @workflow.signal(unfinished_policy=_ABANDON)
    async def gate_closed(self, closed: GateClosed) -> None:
        if await self._from_parent("gate_closed", closed):
            # The first answer for a gate stands: an answer seen in history cannot be sent again.
            self.gate_results.setdefault(closed.gate_id, closed)

    @workflow.signal(unfinished_policy=_ABANDON)
    async def run_once_reply(self, reply: RunOnceReply) -> None:
        if not await self._from_parent("run_once_reply", reply):
            return
        known = self.run_once.get(reply.task_id)
        # Only forward: an owner first, then its result; an older reply never undoes a newer one.
        if known is None or (
            known.result is None and reply.result is not None and reply.owner == known.owner
        ):
            self.run_once[reply.task_id] = reply

    @workflow.query
    def current(self) -> str | None:
        return self.current_task

    async def _command(self, kind: str, raw: Any) -> HostCommand | None:
        try:
            command = HostCommand.model_validate(raw)
        except ValidationError:
            await self._refuse(kind, "it is not a command signed by this host's run")
            return None
        if command.command != kind:
            await self._refuse(kind, f"it carries a {command.command!r} command")
            return None
        parent = workflow.info().parent
        self.commands_checking += 1
        try:
            signed = parent is not None and await trust.verify_message(kind, command, parent.workflow_id)
        finally:
            self.commands_checking -= 1
        if not signed:
            await self._refuse(kind, NOT_SIGNED)
            return None
        if command.seq <= self.command_seq:
            await self._refuse(kind, f"it is an old command (number {command.seq}) sent again")
            return None
        self.command_seq = command.seq
        return command

    async def _from_parent(self, kind: str, message: BaseModel) -> bool:
        parent = workflow.info().parent
        if parent is not None and await trust.verify_message(kind, message, parent.workflow_id):
            return True
        await self._refuse(kind, NOT_SIGNED)
        return False

    async def _refuse(self, kind: str, why: str) -> None:
        """A message changed nothing: log it, and tell the run (the first few times)."""
        self.refusals += 1
        workflow.logger.warning("refused a %s signal: %s", kind, why)
        await workflow.wait_condition(lambda: self.input_ok is not None)
        if not self.input_ok or self.refusals > MAX_REPORTED_REFUSALS:
            return
        text = f"host {self.inp.host}: refused a {kind!r} signal: {why}; nothing changed"
        if self.refusals == MAX_REPORTED_REFUSALS:
            text += " (further refusals on this host are not reported)"
        try:
            await self._to_parent("host_notice", HostNotice(host=self.inp.host, text=text))
        except Exception as exc:  # the run may have ended: the host's own log keeps the refusal
            workflow.logger.info("could not tell the run about a refused %s signal: %s", kind, exc)

    async def _to_parent(self, kind: str, message: BaseModel) -> None:
        parent = workflow.info().parent
        assert parent is not None
        signed = await trust.sign_message(kind, message, parent.workflow_id, parent.run_id)
        await workflow.get_external_workflow_handle(parent.workflow_id).signal(kind, signed)

    # --- the play ---------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: HostInput) -> HostResult:
        started = workflow.now()
        self.input_ok = await trust.verify_host_input(inp)
        if not self.input_ok:
            return HostResult(
                host=inp.host,
                stage=inp.stage,
                status="failed",
                msg=INPUT_REFUSED,
                started_at=started,
                ended_at=workflow.now(),
            )
        state = _HostRun(vars=dict(inp.vars))
        flow = await self._run_list(inp.tasks, state, _Scope())
        if not flow.failed and not flow.aborted and state.notified:
            handler_flow = await self._run_handlers(state)
            if handler_flow.failed or handler_flow.aborted:
                flow = handler_flow
        status = "aborted" if flow.aborted else ("failed" if flow.failed else "ok")
        return HostResult(
            host=inp.host,
            stage=inp.stage,
            status=status,
            msg=flow.msg,
            failed_task=flow.failed_task,
            tasks=state.outcomes,
            registered=_bounded_registered(state.registered),
            facts=state.facts,
            delegated_facts=state.delegated,
            artifacts=state.artifacts,
            changed=state.changed,
            started_at=started,
            ended_at=workflow.now(),
        )

    async def _run_handlers(self, state: _HostRun) -> _Flow:
        # Handlers run once each, in the order they are defined, whatever the notify order.
        wanted = set(state.notified)
        handlers = [h for h in self.inp.handlers if h.name in wanted]
        return await self._run_list(handlers, state, _Scope(by_tags=False))

    async def _run_list(self, tasks: list[Task], state: _HostRun, scope: _Scope) -> _Flow:
        for task in tasks:
            # Pause holds the host between tasks; the task in progress finishes first.
            await workflow.wait_condition(
                lambda: (not self.paused and not self.commands_checking) or self.abort_reason is not None
            )
            if self.abort_reason is not None:
                return _Flow(aborted=True, msg=self.abort_reason)
            flow = await self._run_task(task, state, scope)
            if flow.failed and self.abort_reason is not None:
                return _Flow(aborted=True, msg=self.abort_reason)
            if flow.failed or flow.aborted:
                return flow
        return _Flow()

    def _selected(self, tags: list[str]) -> bool:
        wanted, skipped = set(self.inp.tags), set(self.inp.skip_tags)
        tagset = set(tags)
        if tagset & skipped and "always" not in tagset - skipped:
            return False
        if not wanted or "all" in wanted:
            return "never" not in tagset or bool(tagset & wanted)
        return bool(tagset & wanted) or "always" in tagset

    def _context(
        self, state: _HostRun, task_vars: Mapping[str, Any], extra: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        ctx = dict(state.vars)
        ctx.update(task_vars)
        ctx.update(state.facts)
        ctx.update(state.registered)
        if extra:
            ctx.update(extra)
        ctx["vars"] = dict(ctx)
        ctx["hostvars"] = self.inp.hostvars
        return ctx

    def _holds(self, conditions: list[str], ctx: dict[str, Any]) -> bool:
        return all(evaluate_bool(c, ctx) for c in conditions)

    async def _run_task(self, task: Task, state: _HostRun, scope: _Scope) -> _Flow:
        tags = (*scope.tags, *task.tags)
        conditions = [*scope.when, *task.when]
        started = workflow.now()
        # Tags choose tasks before anything about them is evaluated, as in Ansible: a task
        # left out by --tags must not fail on a variable only its siblings define.
        if task.block is None and scope.by_tags and not self._selected(list(tags)):
            return _Flow()
        try:
            task_vars = {**scope.vars, **render(task.vars, self._context(state, scope.vars))}
        except TemplateError as exc:
            return self._fail(state, task, f"vars: {exc}", started)
        if task.block is not None:
            return await self._run_block(
                task, state, _Scope(tags, tuple(conditions), task_vars, scope.by_tags)
            )
        self.current_task = task.name or task.task_id
        if task.loop is None:
            try:
                holds = self._holds(conditions, self._context(state, task_vars))
            except TemplateError as exc:
                return self._fail(state, task, f"when: {exc}", started)
            if not holds:
                if task.register:
                    state.registered[task.register] = dict(SKIPPED_BY_CONDITION)
                self._record(state, task, "skipped", "condition false", started)
                return _Flow()
        if task.gate is not None:
            return await self._run_gate(task, state, started)
        return await self._run_module_task(task, state, task_vars, conditions, started)

    async def _run_block(self, task: Task, state: _HostRun, scope: _Scope) -> _Flow:
        flow = await self._run_list(task.block or [], state, scope)
        if flow.failed and task.rescue:
            state.registered["ansible_failed_task"] = {"name": flow.failed_task, "id": flow.failed_task_id}
            state.registered["ansible_failed_result"] = flow.result or {"failed": True, "msg": flow.msg}
            self._mark_rescued(state, flow.failed_task_id)
            flow = await self._run_list(task.rescue, state, scope)
        if task.always:
            always = await self._run_list(task.always, state, scope)
            if always.failed or always.aborted:
                return always
        return flow

    def _mark_rescued(self, state: _HostRun, task_id: str | None) -> None:
        for outcome in reversed(state.outcomes):
            if outcome.status == "failed" and outcome.task_id == task_id:
                outcome.status = "rescued"
                return

    async def _run_gate(self, task: Task, state: _HostRun, started: datetime) -> _Flow:
        assert task.gate is not None
        template = task.gate.name or task.task_id
        gate_id = f"{template}@{self.inp.host}"
        if gate_id not in self.gate_results:
            await self._to_parent(
                "host_gate", HostGateRequest(gate_id=gate_id, template=template, host=self.inp.host)
            )
        await workflow.wait_condition(lambda: gate_id in self.gate_results or self.abort_reason is not None)
        if self.abort_reason is not None:
            return _Flow(aborted=True, msg=self.abort_reason)
        closed = self.gate_results[gate_id]
        if not closed.approved:
            return self._fail(state, task, f"gate {gate_id!r} {closed.reason}", started)
        self._record(state, task, "ok", closed.reason, started)
        return _Flow()

    async def _run_module_task(
        self, task: Task, state: _HostRun, task_vars: dict[str, Any], conditions: list[str], started: datetime
    ) -> _Flow:
        if task.loop is not None:
            return await self._run_loop(task, state, task_vars, conditions, started)
        if task.run_once:
            return await self._run_once(task, state, task_vars, started)
        result, attempts = await self._attempts(task, state, task_vars, None)
        return self._finish(task, state, result, attempts, started)

    async def _run_loop(
        self, task: Task, state: _HostRun, task_vars: dict[str, Any], conditions: list[str], started: datetime
    ) -> _Flow:
        try:
            items = render(task.loop, self._context(state, task_vars))
        except TemplateError as exc:
            return self._fail(state, task, f"loop: {exc}", started)
        if not isinstance(items, list):
            return self._fail(state, task, f"loop must give a list, got {type(items).__name__}", started)
        results: list[dict[str, Any]] = []
        calls = 0
        for item in items:
            loop_vars = {task.loop_var: item}
            # `when` is evaluated for every item, with the loop variable set (Ansible).
            try:
                holds = self._holds(conditions, self._context(state, task_vars, loop_vars))
            except TemplateError as exc:
                result: ModuleResult = ModuleResult(failed=True, msg=f"when: {exc}")
            else:
                if not holds:
                    results.append({**SKIPPED_BY_CONDITION, task.loop_var: item})
                    continue
                result, attempts = await self._attempts(task, state, task_vars, loop_vars)
                calls += attempts
            results.append({**result.as_var(), task.loop_var: item, "ansible_loop_var": task.loop_var})
        merged = ModuleResult(
            changed=any(r["changed"] for r in results),
            failed=any(r["failed"] for r in results),
            skipped=all(r["skipped"] for r in results),
            msg="; ".join(r["msg"] for r in results if r["failed"] and r["msg"]) or "",
            data={"results": results},
        )
        return self._finish(task, state, merged, max(calls, 1), started)

    async def _run_once(
        self, task: Task, state: _HostRun, task_vars: dict[str, Any], started: datetime
    ) -> _Flow:
        if task.task_id not in self.run_once:
            await self._to_parent("run_once_claim", RunOnceClaim(task_id=task.task_id, host=self.inp.host))
        await workflow.wait_condition(lambda: task.task_id in self.run_once or self.abort_reason is not None)
        if self.abort_reason is not None:
            return _Flow(aborted=True, msg=self.abort_reason)
        reply = self.run_once[task.task_id]
        if reply.owner == self.inp.host and reply.result is None:
            result, attempts = await self._attempts(task, state, task_vars, None)
            await self._to_parent(
                "run_once_done", RunOnceReply(task_id=task.task_id, owner=self.inp.host, result=result)
            )
            return self._finish(task, state, result, attempts, started)
        # Wait for the owner's result; every host then carries it, as in Ansible.
        await workflow.wait_condition(
            lambda: self.run_once[task.task_id].result is not None or self.abort_reason is not None
        )
        if self.abort_reason is not None:
            return _Flow(aborted=True, msg=self.abort_reason)
        shared = self.run_once[task.task_id].result
        assert shared is not None
        shared = shared.model_copy(update={"msg": shared.msg or f"ran once on {reply.owner}"})
        return self._finish(task, state, shared, 1, started)

    async def _attempts(
        self, task: Task, state: _HostRun, task_vars: dict[str, Any], loop_vars: dict[str, Any] | None
    ) -> tuple[ModuleResult, int]:
        """One call, or `retries/until/delay` on durable timers."""
        if task.until is not None:
            max_tries = (task.retries if task.retries is not None else DEFAULT_UNTIL_RETRIES) + 1
        elif task.retries is not None:
            max_tries = task.retries + 1
        else:
            max_tries = 1
        delay = task.delay if task.delay is not None else DEFAULT_DELAY_S
        attempt = 0
        while True:
            attempt += 1
            result = await self._call(task, state, task_vars, loop_vars)
            result = self._apply_conditions(task, state, task_vars, result, loop_vars)
            if task.until is not None:
                ctx = self._context(
                    state, task_vars, {**(loop_vars or {}), **self._result_vars(task, result)}
                )
                try:
                    done = not result.failed and evaluate_bool(task.until, ctx)
                except TemplateError as exc:
                    return ModuleResult(failed=True, msg=f"until: {exc}"), attempt
            else:
                done = not result.failed
            if done or attempt >= max_tries:
                if not done and task.until is not None and not result.failed:
                    result = result.model_copy(
                        update={"failed": True, "msg": f"until condition not met after {attempt} attempts"}
                    )
                return result, attempt
            await self._sleep(delay)
            if self.abort_reason is not None:
                return result, attempt

    async def _sleep(self, seconds: float) -> None:
        """A durable timer that an abort cuts short."""
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: self.abort_reason is not None, timeout=timedelta(seconds=seconds)
            )

    def _result_vars(self, task: Task, result: ModuleResult) -> dict[str, Any]:
        value = result.as_var()
        out = {"result": value}
        if task.register:
            out[task.register] = value
        return out

    def _apply_conditions(
        self,
        task: Task,
        state: _HostRun,
        task_vars: dict[str, Any],
        result: ModuleResult,
        loop_vars: dict[str, Any] | None,
    ) -> ModuleResult:
        if task.changed_when is None and task.failed_when is None:
            return result
        ctx = self._context(state, task_vars, {**(loop_vars or {}), **self._result_vars(task, result)})
        try:
            update: dict[str, Any] = {}
            if task.changed_when is not None:
                update["changed"] = self._holds(task.changed_when, ctx)
            if task.failed_when is not None:
                failed = self._holds(task.failed_when, ctx)
                update["failed"] = failed
                if failed and not result.failed:
                    # The module succeeded; the runbook's condition is why the task failed.
                    why = "failed_when condition met: " + " and ".join(task.failed_when)
                    update["msg"] = f"{why} ({result.msg})" if result.msg else why
        except TemplateError as exc:
            return result.model_copy(update={"failed": True, "msg": f"failed_when/changed_when: {exc}"})
        return result.model_copy(update=update)

    def _check_mode(self, task: Task) -> bool:
        return task.check_mode if task.check_mode is not None else self.inp.check_mode

    def _render_args(self, task: Task, ctx: dict[str, Any]) -> Any:
        if task.module == "assert":
            # `assert.that` holds expressions, evaluated once by the module, not rendered first.
            rest = render({k: v for k, v in task.args.items() if k != "that"}, ctx)
            return {**rest, "that": task.args.get("that")}
        return render(task.args, ctx)

    async def _call(
        self, task: Task, state: _HostRun, task_vars: dict[str, Any], loop_vars: dict[str, Any] | None
    ) -> ModuleResult:
        assert task.module is not None
        spec = self.inp.modules.get(task.module)
        if spec is None:
            return ModuleResult(failed=True, msg=f"module {task.module!r} is not in the plan")
        ctx = self._context(state, task_vars, loop_vars)
        try:
            args = self._render_args(task, ctx)
        except TemplateError as exc:
            return ModuleResult(failed=True, msg=f"arguments: {exc}")
        check = self._check_mode(task)
        if check and not spec.supports_check_mode:
            return ModuleResult(
                skipped=True,
                msg=(
                    f"{task.module} cannot run in check mode; skipped "
                    "(set `check_mode: false` on the task to run it for real)"
                ),
            )
        if spec.pure and task.delegate_facts and task.delegate_to:
            # Ansible's `delegate_facts`: the facts belong to the delegate, e.g. a canary's
            # figures set on localhost, where the change record reads run-wide results.
            try:
                owner = str(render(task.delegate_to, ctx))
            except TemplateError as exc:
                return ModuleResult(failed=True, msg=f"delegate_to: {exc}")
            return self._set_fact(state.delegated.setdefault(owner, {}), args, owner)
        if spec.pure:
            return await self._pure(task.module, args, state, ctx, check)
        target = self.inp.host
        if task.delegate_to:
            # The delegate is rendered with this host's variables (and the loop item).
            try:
                target = str(render(task.delegate_to, ctx))
            except TemplateError as exc:
                return ModuleResult(failed=True, msg=f"delegate_to: {exc}")
        return await self._activity(task, spec, args, check, target)

    async def _activity(
        self, task: Task, spec: ModuleExec, args: Any, check: bool, target: str
    ) -> ModuleResult:
        call = ModuleCall(
            module=spec.module,
            host=target,
            args=args if isinstance(args, dict) else {"_raw": args},
            check_mode=check,
            run_id=self.inp.run_id,
            task_path=task.task_id,
            # Connection settings are the target's: a delegated task runs *on* the delegate.
            host_vars=self.inp.hostvars.get(target, {"inventory_hostname": target}),
            cluster=self.inp.cluster,
        )
        retry = spec.retry
        try:
            result: ModuleResult = await workflow.execute_activity(
                spec.activity,
                call,
                result_type=ModuleResult,
                task_queue=self.inp.task_queue,
                start_to_close_timeout=timedelta(seconds=task.timeout or spec.start_to_close_s),
                heartbeat_timeout=timedelta(seconds=spec.heartbeat_s) if spec.heartbeat_s else None,
                retry_policy=RetryPolicy(
                    maximum_attempts=retry.maximum_attempts,
                    initial_interval=timedelta(seconds=retry.initial_interval_s),
                    backoff_coefficient=retry.backoff_coefficient,
                    maximum_interval=timedelta(seconds=retry.maximum_interval_s),
                    non_retryable_error_types=list(retry.non_retryable_error_types),
                ),
            )
            return result
        except ActivityError as err:
            # `str()` of an ApplicationError already carries its type; name it once.
            cause = err.cause
            message = cause.message if isinstance(cause, FailureError) else str(err)
            kind = cause.type if isinstance(cause, ApplicationError) and cause.type else None
            return ModuleResult(failed=True, msg=f"{kind}: {message}" if kind else message)

    async def _pure(
        self, module: str, args: Any, state: _HostRun, ctx: dict[str, Any], check: bool
    ) -> ModuleResult:
        if module == "debug":
            if isinstance(args, str):
                return ModuleResult(msg=args)
            if args.get("var"):
                name = str(args["var"])
                try:
                    value = render("{{ " + name + " }}", ctx)
                except TemplateError as exc:
                    return ModuleResult(failed=True, msg=str(exc))
                return ModuleResult(msg=f"{name}: {value!r}", data={name: value})
            return ModuleResult(msg=str(args.get("msg") or "Hello world!"))
        if module == "set_fact":
            return self._set_fact(state.facts, args, self.inp.host)
        if module == "assert":
            conditions = args.get("that")
            that = [conditions] if isinstance(conditions, str) else list(conditions or [])
            for condition in that:
                try:
                    holds = evaluate_bool(condition, ctx)
                except TemplateError as exc:
                    return ModuleResult(failed=True, msg=f"assert {condition!r}: {exc}")
                if not holds:
                    msg = args.get("fail_msg") or f"Assertion failed: {condition}"
                    return ModuleResult(failed=True, msg=str(msg), data={"assertion": condition})
            return ModuleResult(msg=str(args.get("success_msg") or "All assertions passed"))
        if module == "fail":
            msg = args if isinstance(args, str) else args.get("msg", "Failed as requested from the runbook.")
            return ModuleResult(failed=True, msg=str(msg))
        if module == "pause":
            try:
                seconds = float(args.get("seconds") or 0) + 60.0 * float(args.get("minutes") or 0)
            except (TypeError, ValueError):
                return ModuleResult(failed=True, msg="pause: 'seconds' and 'minutes' must be numbers")
            if check:
                return ModuleResult(msg=f"would pause {seconds:g}s")
            if seconds > 0:
                await self._sleep(seconds)
            return ModuleResult(msg=f"paused {seconds:g}s")
        return ModuleResult(failed=True, msg=f"pure module {module!r} is unknown to this engine")

    def _set_fact(self, facts: dict[str, Any], args: Any, owner: str) -> ModuleResult:
        # Facts carry to later stages through the run's history: bounded, and refused here
        # (where the runbook author can act) rather than dropped later.
        if not isinstance(args, dict):
            return ModuleResult(failed=True, msg="set_fact: give a mapping of facts")
        size = len(json.dumps({**facts, **args}, default=str))
        if size > FACTS_LIMIT_BYTES:
            whose = "this host's" if owner == self.inp.host else f"{owner}'s"
            return ModuleResult(
                failed=True,
                msg=(
                    f"set_fact: {whose} facts would be {size} bytes; facts carry to later stages "
                    f"and are limited to {FACTS_LIMIT_BYTES} bytes per host and stage: keep only what "
                    "later stages need (e.g. a summary of a result, not the whole result)"
                ),
            )
        facts.update(args)
        data: dict[str, Any] = {"ansible_facts": args}
        if owner != self.inp.host:
            data["delegated_to"] = owner
        return ModuleResult(data=data)

    def _finish(
        self, task: Task, state: _HostRun, result: ModuleResult, attempts: int, started: datetime
    ) -> _Flow:
        value = result.as_var()
        if task.register:
            state.registered[task.register] = value
        artifact = result.data.get("artifact")
        if isinstance(artifact, dict) and artifact.get("uri"):
            state.artifacts.append(
                Artifact(
                    name=str(artifact.get("name") or task.name or task.task_id),
                    uri=str(artifact["uri"]),
                    host=self.inp.host,
                    stage=self.inp.stage,
                    task=task.name or task.task_id,
                )
            )
        if result.changed:
            state.changed += 1
            for handler in task.notify:
                if handler not in state.notified:
                    state.notified.append(handler)
        status = _status_of(result)
        if result.failed and task.ignore_errors:
            status = "ignored"
        self._record(state, task, status, result.msg, started, attempts, result)
        if result.failed and not task.ignore_errors:
            return _Flow(
                failed=True,
                msg=result.msg,
                failed_task=task.name or task.task_id,
                failed_task_id=task.task_id,
                result=value,
            )
        return _Flow()

    def _fail(self, state: _HostRun, task: Task, msg: str, started: datetime) -> _Flow:
        self._record(state, task, "failed", msg, started)
        return _Flow(failed=True, msg=msg, failed_task=task.name or task.task_id, failed_task_id=task.task_id)

    def _record(
        self,
        state: _HostRun,
        task: Task,
        status: TaskStatus,
        msg: str,
        started: datetime,
        attempts: int = 1,
        result: ModuleResult | None = None,
    ) -> None:
        state.outcomes.append(
            TaskOutcome(
                task_id=task.task_id,
                name=task.name or task.module or task.task_id,
                module=task.module,
                status=status,
                msg=msg,
                attempts=attempts,
                started_at=started,
                ended_at=workflow.now(),
                data=_small(result.data) if result is not None else {},
            )
        )


def _small(data: dict[str, Any], limit: int = 4096) -> dict[str, Any]:
    """Keep task data in reports only while it is small; big outputs stay in the registered var."""
    text = json.dumps(data, default=str)
    return data if len(text) <= limit else {"truncated": True, "bytes": len(text)}


def _bounded_registered(registered: dict[str, Any]) -> dict[str, Any]:
    return {k: _small(v) if isinstance(v, dict) else v for k, v in registered.items()}
