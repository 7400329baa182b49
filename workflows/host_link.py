"""A host workflow's line to its run: signed messages both ways, commands (pause, resume,
abort) checked before they change anything, and the two things the run coordinates for its
hosts: per-host gates and `run_once` tasks.

Every message carries a signature over the signal's name (its handler method, see
`workflows/handles.py`), its content and both workflows (`workflows/trust.py`); one that
does not verify changes nothing and is reported to the run.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ValidationError
from temporalio import workflow

from workflows import trust
from workflows.handles import RunFromHosts, Signal, signal_name
from workflows.host_attempts import run_attempts
from workflows.host_state import Flow, HostControl, HostRun

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import HostCommand, HostGateRequest, HostNotice, RunOnceClaim, RunOnceReply
    from pitstop.runbook.models import Task
    from pitstop.runbook.scope import VarScope

# Refused messages a host reports to the run (more would only let a flood grow the history).
MAX_REPORTED_REFUSALS = 10
NOT_SIGNED = (
    "its signature does not verify: it was not sent by this host's run (or the workers of this "
    "task queue do not share one worker key, PITSTOP_WORKER_KEY)"
)


class ParentLink:
    """Signed messages between one host workflow and its run, and what they have changed."""

    def __init__(self, host: str) -> None:
        self.host = host
        # Whether the input's signature checked out (None until the host has checked it).
        self.input_ok: bool | None = None
        self.command_seq = 0
        # Commands still being checked: no new task starts meanwhile, so that a pause that
        # arrives with a task's result holds the next task, as an unchecked one would.
        self.checking = 0
        self.refusals = 0

    async def command(self, signal: Signal, raw: object) -> HostCommand | None:
        """The command `raw`, if the run signed it for `signal` and it is newer than the last."""
        kind = signal_name(signal)
        try:
            command = HostCommand.model_validate(raw)
        except ValidationError:
            await self.refuse(kind, "it is not a command signed by this host's run")
            return None
        if command.command != kind:
            await self.refuse(kind, f"it carries a {command.command!r} command")
            return None
        parent = workflow.info().parent
        self.checking += 1
        try:
            signed = parent is not None and await trust.verify_message(signal, command, parent.workflow_id)
        finally:
            self.checking -= 1
        if not signed:
            await self.refuse(kind, NOT_SIGNED)
            return None
        if command.seq <= self.command_seq:
            await self.refuse(kind, f"it is an old command (number {command.seq}) sent again")
            return None
        self.command_seq = command.seq
        return command

    async def from_parent(self, signal: Signal, message: BaseModel) -> bool:
        """Whether the run signed `message` for `signal` (a refusal is reported if not)."""
        parent = workflow.info().parent
        if parent is not None and await trust.verify_message(signal, message, parent.workflow_id):
            return True
        await self.refuse(signal_name(signal), NOT_SIGNED)
        return False

    async def refuse(self, kind: str, why: str) -> None:
        """A message changed nothing: log it, and tell the run (the first few times)."""
        self.refusals += 1
        workflow.logger.warning("refused a %s signal: %s", kind, why)
        await workflow.wait_condition(lambda: self.input_ok is not None)
        if not self.input_ok or self.refusals > MAX_REPORTED_REFUSALS:
            return
        text = f"host {self.host}: refused a {kind!r} signal: {why}; nothing changed"
        if self.refusals == MAX_REPORTED_REFUSALS:
            text += " (further refusals on this host are not reported)"
        try:
            await self.send(RunFromHosts.host_notice, HostNotice(host=self.host, text=text))
        except Exception as exc:  # the run may have ended: the host's own log keeps the refusal
            workflow.logger.info("could not tell the run about a refused %s signal: %s", kind, exc)

    async def send(self, signal: Signal, message: BaseModel) -> None:
        """Sign `message` for the run's `signal` handler and send it."""
        parent = workflow.info().parent
        assert parent is not None
        signed = await trust.sign_message(signal, message, parent.workflow_id, parent.run_id)
        await workflow.get_external_workflow_handle(parent.workflow_id).signal(signal_name(signal), signed)


# --- what the run coordinates -------------------------------------------------------------------
async def run_gate(host: HostControl, task: Task, state: HostRun, started: datetime) -> Flow:
    """A per-host gate: the run opens it, collects its votes and answers."""
    assert task.gate is not None
    template = task.gate.name or task.task_id
    gate_id = f"{template}@{host.inp.host}"
    if gate_id not in host.gate_results:
        await host.to_parent(
            RunFromHosts.host_gate, HostGateRequest(gate_id=gate_id, template=template, host=host.inp.host)
        )
    await workflow.wait_condition(lambda: gate_id in host.gate_results or host.abort_reason is not None)
    if host.abort_reason is not None:
        return Flow(aborted=True, msg=host.abort_reason)
    closed = host.gate_results[gate_id]
    if not closed.approved:
        return state.fail(task, f"gate {gate_id!r} {closed.reason}", started)
    state.record(task, "ok", closed.reason, started)
    return Flow()


async def run_once(host: HostControl, task: Task, state: HostRun, scope: VarScope, started: datetime) -> Flow:
    """A `run_once` task: the first host to claim it runs it; every host carries its result."""
    me = host.inp.host
    if task.task_id not in host.run_once:
        await host.to_parent(RunFromHosts.run_once_claim, RunOnceClaim(task_id=task.task_id, host=me))
    await workflow.wait_condition(lambda: task.task_id in host.run_once or host.abort_reason is not None)
    if host.abort_reason is not None:
        return Flow(aborted=True, msg=host.abort_reason)
    reply = host.run_once[task.task_id]
    if reply.owner == me and reply.result is None:
        result, attempts = await run_attempts(host, task, state, scope)
        await host.to_parent(
            RunFromHosts.run_once_done, RunOnceReply(task_id=task.task_id, owner=me, result=result)
        )
        return state.finish(task, result, attempts, started)
    # Wait for the owner's result; every host then carries it, as in Ansible.
    await workflow.wait_condition(
        lambda: host.run_once[task.task_id].result is not None or host.abort_reason is not None
    )
    if host.abort_reason is not None:
        return Flow(aborted=True, msg=host.abort_reason)
    shared = host.run_once[task.task_id].result
    assert shared is not None
    shared = shared.model_copy(update={"msg": shared.msg or f"ran once on {reply.owner}"})
    return state.finish(task, shared, 1, started)
