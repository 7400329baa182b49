"""The run's host workflows: starting them, hearing how they ended, and sending them signed
messages and commands.

Two kinds of children: a stage's hosts (in flight while the stage drives them) and one-off
children (observe checks, compensations). Both are reachable for their gates and `run_once`
tasks while they run. Workflow code (it starts children and signals them), no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

from workflows import trust

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import GateClosed, HostCommand, HostInput, HostResult, RunOnceReply
    from workflows.host import HostWorkflow

Command = Literal["pause", "resume", "abort"]
# The host workflow's Signal for each command.
COMMAND_SIGNALS: dict[Command, Callable[..., Any]] = {
    "pause": HostWorkflow.pause,
    "resume": HostWorkflow.resume,
    "abort": HostWorkflow.abort,
}


class HostChildren:
    def __init__(self) -> None:
        # Stage hosts in flight, and the one-off children (observe checks, rollbacks).
        self.stage: dict[str, Any] = {}
        self.aux: dict[str, Any] = {}
        # The workflow id of each host's child, set before it starts (its messages may be
        # handled before its start is), removed when it ends.
        self.ids: dict[str, str] = {}
        # Commands sent to each host workflow (see HostCommand.seq), and the order they go in.
        self.command_seq: dict[str, int] = {}
        self.commands_given = 0
        self.commands_sent = 0

    def all(self) -> list[Any]:
        return [*self.stage.values(), *self.aux.values()]

    async def start(self, inp: HostInput, child_id: str, aux: bool) -> Any:
        handle = await workflow.start_child_workflow(
            HostWorkflow.run, inp, id=child_id, task_queue=workflow.info().task_queue
        )
        (self.aux if aux else self.stage)[inp.host] = handle
        return handle

    def ended(self, host: str, aux: bool) -> None:
        (self.aux if aux else self.stage).pop(host, None)
        self.ids.pop(host, None)

    async def result(self, host: str, stage: str, handle: Any) -> HostResult:
        """How a child ended; a child workflow that failed is a failed host."""
        try:
            result: HostResult = await handle
            return result
        except ChildWorkflowError as err:
            return failed_host(host, stage, f"host workflow failed: {err.cause or err}")

    async def signal_host(
        self, host: str, signal: Callable[..., Any], message: GateClosed | RunOnceReply
    ) -> None:
        """Send a signed message to the host workflow this run runs for `host`, if it still runs."""
        # A host's message can be handled before its start is (same activation): wait for it.
        await workflow.wait_condition(lambda: host in self.stage or host in self.aux or host not in self.ids)
        handle = self.stage.get(host) or self.aux.get(host)
        if handle is not None:
            kind = signal.__name__
            signed = await trust.sign_message(kind, message, handle.id, handle.first_execution_run_id or "")
            await _signal(handle, signal, signed)

    async def answer_gate(self, host: str, gate_id: str, approved: bool, reason: str) -> None:
        closed = GateClosed(gate_id=gate_id, approved=approved, reason=reason)
        await self.signal_host(host, HostWorkflow.gate_closed, closed)

    async def reply_run_once(self, hosts: list[str], reply: RunOnceReply) -> None:
        await asyncio.gather(*(self.signal_host(host, HostWorkflow.run_once_reply, reply) for host in hosts))

    async def command(self, command: Command, reason: str = "", handles: list[Any] | None = None) -> None:
        """Pause, resume or abort hosts (default: every host workflow in flight), signed together."""
        # One command at a time, in the order they were given: each host gets them in order.
        ticket = self.commands_given
        self.commands_given += 1
        await workflow.wait_condition(lambda: self.commands_sent == ticket)
        try:
            if handles is None:
                handles = self.all()
            if not handles:
                return
            to: list[tuple[HostCommand, str, str]] = []
            for handle in handles:
                seq = self.command_seq[handle.id] = self.command_seq.get(handle.id, 0) + 1
                command_for = HostCommand(command=command, reason=reason, seq=seq)
                to.append((command_for, handle.id, handle.first_execution_run_id or ""))
            signed = await trust.sign_messages(command, to)
            signal = COMMAND_SIGNALS[command]
            await asyncio.gather(*(_signal(h, signal, m) for h, m in zip(handles, signed, strict=True)))
        finally:
            self.commands_sent += 1


async def _signal(handle: Any, signal: Callable[..., Any], *args: Any) -> None:
    # A child may finish between our decision to signal it and the signal's delivery;
    # that is news, not an error (an exception here would fail the whole run).
    try:
        await handle.signal(signal, *args)
    except Exception as exc:
        workflow.logger.info("signal %s to %s not delivered: %s", signal.__name__, handle.id, exc)


def failed_host(host: str, stage: str, msg: str) -> HostResult:
    """A host whose workflow failed or could not start: failed now, with why."""
    now = workflow.now()
    return HostResult(host=host, stage=stage, status="failed", msg=msg, started_at=now, ended_at=now)
