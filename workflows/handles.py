"""Signals between a run and its host workflows, named by their handler methods.

A signal's name is part of what its signature covers (`workflows/trust.py`), so both sides
must spell it alike: each side names a signal by the method that handles it, never by a
string. The host cannot import `workflows/runbook.py` (the run imports the host), so the
signals a run receives from its hosts are declared here, as a stub class;
`tests/unit/test_signal_names.py` holds these stubs to `RunbookWorkflow`'s handlers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import HostGateRequest, HostNotice, RunOnceClaim, RunOnceReply

# A signal: its handler method (or, while callers move over, its name).
Signal = Callable[..., Any] | str


def signal_name(signal: Signal) -> str:
    """The name a signal handler is registered under, as Temporal resolves it when the
    method is passed to `handle.signal`."""
    return workflow._SignalDefinition.must_name_from_fn_or_str(signal)


class RunFromHosts:
    """The signals a RunbookWorkflow receives from its hosts (stubs: the run implements them)."""

    @workflow.signal
    async def host_gate(self, request: HostGateRequest) -> None:
        """A host reached a per-host gate: open it (or answer from the decision already made)."""

    @workflow.signal
    async def run_once_claim(self, claim: RunOnceClaim) -> None:
        """A host reached a `run_once` task: the first claimant owns it."""

    @workflow.signal
    async def run_once_done(self, reply: RunOnceReply) -> None:
        """The owner of a `run_once` task reports its result, for every other host."""

    @workflow.signal
    async def host_notice(self, notice: HostNotice) -> None:
        """A host tells the run something for its notices (e.g. a refused message)."""
