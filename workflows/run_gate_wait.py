"""Waiting for gates: a stage's `before`/`after` gate, and a host's `gate:` task.

A gate closes by votes (the `decide` Update), by its timeout (escalating first when its rule
says so), or when the run stops waiting: an abort, a rollback, or (for a stage host's gate) the
stage no longer launching. Workflow code (timers, conditions), no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import GateState
    from workflows import gates as gate_rules
    from workflows import run_gates
    from workflows.run_context import RunContext


class GateWaits:
    def __init__(self, run: RunContext) -> None:
        self.run = run

    async def stage_gate(
        self, gate_id: str, template: str | None = None, prompt: str | None = None
    ) -> GateState:
        """Open a stage's gate (once per run) and wait for it to close. A wave's gate is opened
        from its stage's rule (`template`) under its own id, with its own prompt."""
        run = self.run
        progress = run.p()
        if gate_id not in progress.gates:
            rule = progress.plan.gates[template or gate_id]
            if template is not None:
                rule = rule.model_copy(update={"gate_id": gate_id, "prompt": prompt or rule.prompt})
            progress.gates[gate_id] = run_gates.open_stage_gate(
                rule, workflow.now(), run.who(), progress.plan.check_mode
            )
        run.set_status("waiting_gate")
        gate = await self.wait(gate_id, lambda: run.abort_reason or run.rollback_request)
        run.set_status("running")
        return gate

    async def wait(self, gate_id: str, interrupt: Callable[[], str | None]) -> GateState:
        """Wait for a gate to close by votes or timeout; `interrupt` giving a reason closes it."""
        gates = self.run.p().gates
        while True:
            gate = gates[gate_id]
            if gate.status != "open":
                return gate
            why = interrupt()
            if why is not None:
                gates[gate_id] = gate_rules.close_on_run_end(gate, workflow.now(), f"closed: {why}")
                self.run.details()
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
            self.run.details()

    async def host_gate(self, host: str, gate_id: str, stage_host: bool) -> None:
        """Wait for a host's gate, then answer the host."""
        run = self.run

        def interrupt() -> str | None:
            if stage_host:
                return run.abort_reason or run.rollback_request or run.halt_reason
            return run.abort_reason

        gate = await self.wait(gate_id, interrupt)
        approved = gate.status == "approved"
        await run.children.answer_gate(host, gate_id, approved, gate.closed_reason or gate.status)
