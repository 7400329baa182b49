"""Signals between a run and its hosts are named by handler methods; the host's stubs of the
run's handlers (`workflows/handles.py`) are held to RunbookWorkflow here."""

from __future__ import annotations

import inspect

from temporalio import workflow

from workflows.handles import RunFromHosts, signal_name
from workflows.host import HostWorkflow
from workflows.runbook import RunbookWorkflow


def _signals(cls: type) -> dict[str, workflow._SignalDefinition]:
    found = {}
    for _, member in inspect.getmembers(cls):
        defn = workflow._SignalDefinition.from_fn(member)
        if defn is not None and defn.name:
            found[defn.name] = defn
    return found


def test_each_stub_is_a_signal_of_the_run_taking_the_same_message() -> None:
    stubs, run = _signals(RunFromHosts), _signals(RunbookWorkflow)
    assert set(stubs) == {"host_gate", "run_once_claim", "run_once_done", "host_notice"}
    for name, stub in stubs.items():
        assert name in run, name
        assert stub.arg_types == run[name].arg_types, name


def test_a_signal_is_named_as_temporal_names_its_handler() -> None:
    assert signal_name(RunFromHosts.run_once_claim) == "run_once_claim"
    assert signal_name(HostWorkflow.gate_closed) == "gate_closed"
    assert set(_signals(HostWorkflow)) == {"pause", "resume", "abort", "gate_closed", "run_once_reply"}
