"""Shared pieces of the end-to-end maintenance tests: the rehearsal cluster, the run request
for the maintenance runbook, a gate approver that keeps trying while no worker is alive, and
an independent reading of the simulator's availability timeline."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from activities import ACTIVITIES
from pitstop.bundle import collect
from pitstop.contracts import Decision, RunReport, RunRequest, RunStatus
from pitstop.demo import maintenance as dm
from pitstop.keys import load_key
from pitstop.proofs import signed_decision
from pitstop.runbook import load_runbook
from pitstop.worker_app import build_worker
from pitstop_sim import SimCluster
from pitstop_sim.models import TimelineEvent
from workflows import WORKFLOWS

APPROVER = "alice"  # in the runbook's `sre` approvers


@dataclass
class Rehearsal:
    sim: SimCluster
    workdir: Path
    inventory: Path

    def request(self, extra_vars: dict[str, Any] | None = None) -> RunRequest:
        files, runbook_name, inventory_name = collect(dm.RUNBOOK, self.inventory)
        return RunRequest(
            runbook=runbook_name,
            inventory=inventory_name,
            files=files,
            vars={**dm.REHEARSAL_VARS, **(extra_vars or {})},
            requested_by="e2e-requester",
        )


@contextmanager
def start_rehearsal(workdir: Path, scenario: Path) -> Iterator[Rehearsal]:
    sim = dm.start_cluster(workdir, scenario)
    try:
        yield Rehearsal(
            sim=sim, workdir=workdir, inventory=dm.write_inventory(sim, workdir / "inventory.yaml")
        )
    finally:
        sim.stop()


def runbook_limits() -> tuple[str, int]:
    """The firmware target and the per-domain unavailability the runbook allows."""
    runbook = load_runbook(dm.RUNBOOK)
    limits = [s.rolling.max_unavailable_per_domain for s in runbook.stages if s.rolling]
    allowed = [limit for limit in limits if limit is not None]
    assert allowed, "the maintenance runbook states no max_unavailable_per_domain"
    return str(runbook.vars["firmware_target"]), max(allowed)


@pytest.fixture
def limits() -> tuple[str, int]:
    return runbook_limits()


def e2e_vote(run_id: str, gate_id: str, approver: str) -> Decision:
    """A vote as the CLI casts it on a machine that holds the vote key (the tests' session key,
    as a developer's CLI holds the embedded stack's): signed, so gates with `require_verified`
    count it."""
    ring = load_key("vote")
    if ring is None:
        return Decision(gate=gate_id, approve=True, approver=approver, comment="e2e approval")
    return signed_decision(
        ring,
        run=run_id,
        gate=gate_id,
        approve=True,
        approver=approver,
        subject=f"cli:{approver}",
        click=f"e2e-{approver}-{gate_id}",
        comment="e2e approval",
    )


async def approve_gates(handle: WorkflowHandle[object, RunReport], approver: str = APPROVER) -> list[str]:
    """Approve every gate once through the `decide` Update, as a person would from the CLI.

    Runs until cancelled. Every call is bounded and retried: while the worker is dead, queries
    and Updates wait for a worker that is not there.
    """
    answered: list[str] = []
    while True:
        try:
            status = await asyncio.wait_for(handle.query("status", result_type=RunStatus), timeout=5)
        except asyncio.CancelledError:
            raise
        except Exception:  # no worker right now (killed): ask again shortly
            status = None
        for gate in status.gates if status is not None else []:
            gate_id = gate.rule.gate_id
            if gate.status != "open" or gate_id in answered or approver not in gate.allowed:
                continue
            try:
                await asyncio.wait_for(
                    handle.execute_update(
                        "decide",
                        e2e_vote(handle.id, gate_id, approver),
                        # One id per approver and gate: a retry after a worker kill is the same vote.
                        id=f"e2e-{approver}-{gate_id}",
                    ),
                    timeout=10,
                )
                answered.append(gate_id)
            except asyncio.CancelledError:
                raise
            except Exception:  # no worker right now, or refused (four-eyes): ask again shortly
                pass
        await asyncio.sleep(0.5)


def peak_unavailable_per_domain(timeline: list[TimelineEvent]) -> dict[str, int]:
    """Most nodes of each domain unavailable at once, beyond those unavailable from the start.

    Computed here from the raw timeline rather than trusting `sim.unavailability()` alone.
    """
    down: dict[str, set[str]] = {}
    at_start: dict[str, int] = {}
    peak: dict[str, int] = {}
    for event in timeline:
        nodes = down.setdefault(event.domain, set())
        if event.event == "registered" and event.unavailable:
            at_start[event.domain] = at_start.get(event.domain, 0) + 1
        if event.unavailable and event.event != "removed":
            nodes.add(event.node)
        else:
            nodes.discard(event.node)
        peak[event.domain] = max(peak.get(event.domain, 0), len(nodes))
    return {domain: count - at_start.get(domain, 0) for domain, count in peak.items()}


async def run_to_end(
    client: Client, queue: str, request: RunRequest, id_prefix: str, within: float = 240
) -> RunReport:
    """The run of `request` on an in-process worker, every gate approved, waited for to its end."""
    async with build_worker(client, queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        handle: WorkflowHandle[object, RunReport] = await client.start_workflow(
            "RunbookWorkflow",
            request,
            id=f"{id_prefix}-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            result_type=RunReport,
            execution_timeout=timedelta(seconds=within + 30),
        )
        approver = asyncio.ensure_future(approve_gates(handle))
        try:
            return await asyncio.wait_for(handle.result(), timeout=within)
        finally:
            approver.cancel()
