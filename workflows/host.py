"""HostWorkflow: one host's task list in one stage.

Reads like an Ansible play for a single host: tasks in order, `block/rescue/always`,
`when`, `loop`, `register`, `retries/until/delay` on durable timers, `failed_when`,
`changed_when`, `ignore_errors`, `notify` + handlers at the end. Pure modules (debug,
set_fact, assert, fail, pause: `pitstop.core_modules`) run inside the workflow; every other
module is an activity on the cluster's task queue. Per-host gates and `run_once` are coordinated through the
parent RunbookWorkflow, which owns every gate and every run-once result of the run.

Only the run may start a host or talk to it: the input and every message in both directions
carry the sender's signature (worker key, `workflows/trust.py`). A host started by anyone
else refuses to run; a message without a valid signature changes nothing and is reported to
the run, which lists it in its notices.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.workflow import HandlerUnfinishedPolicy

from workflows import trust
from workflows.handles import Signal
from workflows.host_attempts import holds, run_attempts, run_loop
from workflows.host_link import ParentLink, run_gate, run_once
from workflows.host_state import SKIPPED_BY_CONDITION, BlockScope, Flow, HostRun, bounded_registered

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import GateClosed, HostInput, HostResult, RunOnceReply
    from pitstop.runbook.models import Task
    from pitstop.runbook.templating import TemplateError, render

INPUT_REFUSED = (
    "refused to run: this host workflow's input is not signed by a pitstop run for it (a host "
    "workflow is started only by its RunbookWorkflow; if it was, the workers of this task queue "
    "do not share one worker key, PITSTOP_WORKER_KEY); nothing ran"
)
_ABANDON = HandlerUnfinishedPolicy.ABANDON


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
        self.link = ParentLink(inp.host)

    # --- messages from the parent (each verified before it changes anything) ----------------
    @workflow.signal(unfinished_policy=_ABANDON)
    async def pause(self, command: Any = None) -> None:
        if await self.link.command(HostWorkflow.pause, command) is not None:
            self.paused = True

    @workflow.signal(unfinished_policy=_ABANDON)
    async def resume(self, command: Any = None) -> None:
        if await self.link.command(HostWorkflow.resume, command) is not None:
            self.paused = False

    @workflow.signal(unfinished_policy=_ABANDON)
    async def abort(self, command: Any = None) -> None:
        accepted = await self.link.command(HostWorkflow.abort, command)
        if accepted is not None:
            self.abort_reason = accepted.reason or "aborted"

    @workflow.signal(unfinished_policy=_ABANDON)
    async def gate_closed(self, closed: GateClosed) -> None:
        if await self.link.from_parent(HostWorkflow.gate_closed, closed):
            # The first answer for a gate stands: an answer seen in history cannot be sent again.
            self.gate_results.setdefault(closed.gate_id, closed)

    @workflow.signal(unfinished_policy=_ABANDON)
    async def run_once_reply(self, reply: RunOnceReply) -> None:
        if not await self.link.from_parent(HostWorkflow.run_once_reply, reply):
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

    # --- what the task modules use (HostControl) ---------------------------------------------
    async def to_parent(self, signal: Signal, message: BaseModel) -> None:
        await self.link.send(signal, message)

    async def sleep(self, seconds: float) -> None:
        """A durable timer that an abort cuts short."""
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: self.abort_reason is not None, timeout=timedelta(seconds=seconds)
            )

    # --- the play ---------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: HostInput) -> HostResult:
        started = workflow.now()
        self.link.input_ok = await trust.verify_host_input(inp)
        if not self.link.input_ok:
            return HostResult(
                host=inp.host,
                stage=inp.stage,
                status="failed",
                msg=INPUT_REFUSED,
                started_at=started,
                ended_at=workflow.now(),
            )
        state = HostRun(inp)
        flow = await self._run_list(inp.tasks, state, BlockScope())
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
            registered=bounded_registered(state.registered),
            facts=state.facts,
            delegated_facts=state.delegated,
            artifacts=state.artifacts,
            changed=state.changed,
            started_at=started,
            ended_at=workflow.now(),
        )

    async def _run_handlers(self, state: HostRun) -> Flow:
        # Handlers run once each, in the order they are defined, whatever the notify order.
        wanted = set(state.notified)
        handlers = [h for h in self.inp.handlers if h.name in wanted]
        return await self._run_list(handlers, state, BlockScope(by_tags=False))

    async def _run_list(self, tasks: list[Task], state: HostRun, block: BlockScope) -> Flow:
        for task in tasks:
            # Pause holds the host between tasks; the task in progress finishes first.
            await workflow.wait_condition(
                lambda: (not self.paused and not self.link.checking) or self.abort_reason is not None
            )
            if self.abort_reason is not None:
                return Flow(aborted=True, msg=self.abort_reason)
            flow = await self._run_task(task, state, block)
            if flow.failed and self.abort_reason is not None:
                return Flow(aborted=True, msg=self.abort_reason)
            if flow.failed or flow.aborted:
                return flow
        return Flow()

    def _selected(self, tags: list[str]) -> bool:
        wanted, skipped = set(self.inp.tags), set(self.inp.skip_tags)
        tagset = set(tags)
        if tagset & skipped and "always" not in tagset - skipped:
            return False
        if not wanted or "all" in wanted:
            return "never" not in tagset or bool(tagset & wanted)
        return bool(tagset & wanted) or "always" in tagset

    async def _run_task(self, task: Task, state: HostRun, block: BlockScope) -> Flow:
        tags = (*block.tags, *task.tags)
        conditions = [*block.when, *task.when]
        started = workflow.now()
        # Tags choose tasks before anything about them is evaluated, as in Ansible: a task
        # left out by --tags must not fail on a variable only its siblings define.
        if task.block is None and block.by_tags and not self._selected(list(tags)):
            return Flow()
        try:
            task_vars = {**block.vars, **render(task.vars, state.scope(block.vars).variables())}
        except TemplateError as exc:
            return state.fail(task, f"vars: {exc}", started)
        if task.block is not None:
            return await self._run_block(
                task, state, BlockScope(tags, tuple(conditions), task_vars, block.by_tags)
            )
        self.current_task = task.name or task.task_id
        # The task's variables, built once for this attempt (see pitstop.runbook.scope).
        scope = state.scope(task_vars)
        if task.loop is None:
            try:
                wanted = holds(conditions, scope)
            except TemplateError as exc:
                return state.fail(task, f"when: {exc}", started)
            if not wanted:
                if task.register:
                    state.registered[task.register] = dict(SKIPPED_BY_CONDITION)
                state.record(task, "skipped", "condition false", started)
                return Flow()
        if task.gate is not None:
            return await run_gate(self, task, state, started)
        if task.loop is not None:
            return await run_loop(self, task, state, scope, conditions, started)
        if task.run_once:
            return await run_once(self, task, state, scope, started)
        result, attempts = await run_attempts(self, task, state, scope)
        return state.finish(task, result, attempts, started)

    async def _run_block(self, task: Task, state: HostRun, block: BlockScope) -> Flow:
        """`block`, then `rescue` if it failed, then `always` whatever happened."""
        flow = await self._run_list(task.block or [], state, block)
        if flow.failed and task.rescue:
            state.rescue(flow)
            flow = await self._run_list(task.rescue, state, block)
        if task.always:
            always = await self._run_list(task.always, state, block)
            if always.failed or always.aborted:
                return always
        return flow
