"""Approval gates on a live run: votes through the `decide` Update and its Signal twin,
quorum, every refusal (returned to the voter and listed in the run's status), timeouts
with each `on_timeout` action, per-host gates, and a vote that arrives after the deadline."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities import ACTIVITIES
from pitstop.contracts import Decision, GateState, RunReport, RunRequest, RunStatus, VoteRecord
from pitstop.worker_app import build_worker
from tests import testmodules
from tests.integration.engine.conftest import StartFn, hosts_inventory, status_when, write_bundle
from tests.integration.engine.test_durability import wait_for
from tests.testmodules import CALLS
from workflows import WORKFLOWS

Handle = WorkflowHandle[Any, RunReport]


def gate(status: RunStatus, gate_id: str) -> GateState | None:
    return next((g for g in status.gates if g.rule.gate_id == gate_id), None)


def is_open(gate_id: str) -> Callable[[RunStatus], bool]:
    def check(status: RunStatus) -> bool:
        found = gate(status, gate_id)
        return found is not None and found.status == "open"

    return check


async def refused(handle: Handle, decision: Decision) -> str:
    """Cast a vote that must be refused; returns the reason the voter is told."""
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update("decide", decision)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "VoteRefused"
    return cause.message


GATED = """
name: gated
approvers:
  sre: [alice, bob, carol]
stages:
  - name: s
    hosts: gpu
    gate: {before: true, after: true, approvers: sre, quorum: 2, four_eyes: true, require_comment: true}
    tasks:
      - test.step: {value: "{{ inventory_hostname }}"}
"""


async def test_quorum_of_two_with_every_refusal_returned_and_listed(start_run: StartFn) -> None:
    handle = await start_run(GATED, hosts_inventory(1), requested_by="alice")
    await status_when(handle, is_open("s:before"))

    assert "'mallory' is not an approver for gate 's:before'" in await refused(
        handle, Decision(approver="mallory", approve=True, comment="let me")
    )
    assert "four-eyes: 'alice' requested this run" in await refused(
        handle, Decision(approver="alice", approve=True, comment="mine")
    )
    assert "gate 's:before' requires a comment" in await refused(
        handle, Decision(approver="bob", approve=True)
    )
    vote = await handle.execute_update(
        "decide", Decision(approver="bob", approve=True, comment="looks fine"), result_type=VoteRecord
    )
    assert vote.accepted and vote.approver == "bob"
    assert "'bob' already voted on gate 's:before'" in await refused(
        handle, Decision(approver="bob", approve=True, comment="again")
    )
    # The same refused vote again is rejected by the validator: not recorded twice.
    assert "not an approver" in await refused(handle, Decision(approver="mallory", approve=True, comment="x"))
    status = await handle.query("status", result_type=RunStatus)
    before = gate(status, "s:before")
    assert before is not None and before.status == "open"
    assert [(v.approver, v.reason is not None) for v in before.refused] == [
        ("mallory", True),
        ("alice", True),
        ("bob", True),
        ("bob", True),
    ]
    assert CALLS == []  # one approval of two: nothing ran

    # The Signal twin counts too: the second approval opens the stage.
    await handle.signal(
        "decide_signal", Decision(approver="carol", approve=True, comment="ok", source="slack")
    )
    status = await status_when(handle, is_open("s:after"))
    assert [h for h, _, _ in CALLS] == ["h00"]
    before = gate(status, "s:before")
    assert before is not None and before.status == "approved"
    # Unsigned votes count on this gate, as claims: the source a client names is never the
    # recorded source (see tests/security/test_verified_votes.py).
    assert [(v.approver, v.source, v.claimed_source) for v in before.votes] == [
        ("bob", "unverified", "cli"),
        ("carol", "unverified", "slack"),
    ]

    assert "gate 's:before' is closed (approved by bob, carol)" in await refused(
        handle, Decision(gate="s:before", approver="carol", approve=True, comment="late")
    )
    await handle.execute_update("decide", Decision(approver="bob", approve=True, comment="after ok"))
    await handle.execute_update("decide", Decision(approver="carol", approve=True, comment="after ok"))
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    closed = {g.rule.gate_id: g for g in report.gates}
    assert closed["s:after"].closed_reason == "approved by bob, carol"
    assert len(closed["s:before"].refused) == 5


TIMEOUTS = """
name: timeouts
approvers:
  sre: [bob]
  managers: [dave]
stages:
  - name: auto
    hosts: gpu
    gate: {before: true, approvers: sre, timeout: 0.5s, on_timeout: approve}
    tasks:
      - test.step: {value: auto}
  - name: escalated
    hosts: gpu
    gate: {before: true, approvers: sre, timeout: 0.5s, on_timeout: escalate, escalate_to: managers}
    tasks:
      - test.step: {value: escalated}
  - name: unanswered
    hosts: gpu
    gate: {before: true, approvers: sre, timeout: 0.5s, on_timeout: escalate, escalate_to: managers}
    tasks:
      - test.step: {value: unanswered}
"""


async def test_on_timeout_approve_escalate_then_approve_and_escalate_then_reject(start_run: StartFn) -> None:
    handle = await start_run(TIMEOUTS, hosts_inventory(1))
    status = await status_when(handle, is_open("escalated:before"))
    auto = gate(status, "auto:before")
    assert (
        auto is not None and auto.closed_reason == "approved automatically on timeout (on_timeout: approve)"
    )
    assert [a["value"] for _, _, a in CALLS] == ["auto"]

    # Before the timeout only the first group may vote; after it, the second group too.
    assert "'dave' is not an approver" in await refused(
        handle, Decision(approver="dave", approve=True, comment="too early")
    )
    await status_when(handle, lambda s: (g := gate(s, "escalated:before")) is not None and g.escalated)
    await handle.execute_update("decide", Decision(approver="dave", approve=True, comment="go"))

    report = await handle.result()
    assert [a["value"] for _, _, a in CALLS] == ["auto", "escalated"]
    gates = {g.rule.gate_id: g for g in report.gates}
    assert gates["escalated:before"].closed_reason == "approved by dave"
    assert gates["unanswered:before"].escalated
    assert gates["unanswered:before"].closed_reason == "rejected on timeout after escalation"
    # A rejected `before` gate stops the run without running the stage or rolling back.
    assert report.status == "failed"
    assert report.msg == "stopped before stage 'unanswered': rejected on timeout after escalation"
    assert [s.status for s in report.stages] == ["ok", "ok", "skipped"]
    assert report.rollback_reason is None


async def test_on_timeout_reject_stops_before_the_stage(start_run: StartFn) -> None:
    handle = await start_run(
        """
        name: reject
        stages:
          - name: one
            hosts: gpu
            tasks:
              - test.step: {value: one}
            rollback:
              - test.step: {value: undo}
          - name: two
            hosts: gpu
            gate: {before: true, approvers: [bob], timeout: 0.3s}
            tasks:
              - test.step: {value: two}
        """,
        hosts_inventory(1),
    )
    report = await handle.result()
    assert report.status == "failed"
    assert report.msg == "stopped before stage 'two': rejected on timeout (on_timeout: reject)"
    assert [a["value"] for _, _, a in CALLS] == ["one"]


async def test_per_host_gates_need_a_named_gate_when_several_are_open(start_run: StartFn) -> None:
    handle = await start_run(
        """
        name: hostgates
        hosts: gpu
        tasks:
          - test.step: {value: before}
          - name: confirm
            gate: {name: confirm, approvers: [bob], prompt: "Drain {{ inventory_hostname }}?"}
          - test.step: {value: after}
        """,
        hosts_inventory(3),
    )
    await status_when(handle, lambda s: sum(g.status == "open" for g in s.gates) == 3)
    # A host skipped while it waits no longer holds its gate open.
    await handle.signal("skip_host", "h02")
    status = await status_when(handle, lambda s: sum(g.status == "open" for g in s.gates) == 2)
    skipped_gate = gate(status, "confirm@h02")
    assert skipped_gate is not None and skipped_gate.closed_reason == "closed: host h02 ended (aborted)"
    message = await refused(handle, Decision(approver="bob", approve=True))
    assert message == "several gates are open (confirm@h00, confirm@h01); name one with --gate"
    # The Signal twin cannot answer the voter: the vote is dropped and the run goes on.
    await handle.signal("decide_signal", Decision(approver="bob", approve=True))

    await handle.execute_update("decide", Decision(gate="confirm@h00", approver="bob", approve=True))
    await handle.signal("decide_signal", Decision(gate="confirm@h01", approver="bob", approve=False))
    report = await handle.result()
    hosts = {h.host: h for h in report.stages[0].hosts}
    assert hosts["h00"].status == "ok"
    assert hosts["h01"].status == "failed"
    assert hosts["h01"].msg == "gate 'confirm@h01' rejected by bob"
    assert hosts["h02"].status == "skipped"
    assert sorted((h, a["value"]) for h, _, a in CALLS) == [
        ("h00", "after"),
        ("h00", "before"),
        ("h01", "before"),
        ("h02", "before"),
    ]
    assert report.status == "completed_with_failures"


async def test_a_vote_after_the_deadline_is_refused_as_expired(
    temporal_client: Client, task_queue: str, tmp_path: Path
) -> None:
    # The vote and the gate's timeout reach the workflow in the same task: the worker is
    # stopped while the deadline passes, then a new worker sees both at once.
    files = write_bundle(
        tmp_path,
        """
        name: expiry
        hosts: gpu
        gate: {before: true, approvers: [bob], timeout: 1s, on_timeout: approve}
        tasks:
          - test.step: {value: x}
        """,
        hosts_inventory(1),
    )
    request = RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files)

    def worker() -> Any:
        return build_worker(
            temporal_client,
            task_queue,
            workflows=WORKFLOWS,
            activities=[*ACTIVITIES, *testmodules.TEST_ACTIVITIES],
            grace_seconds=1,
        )

    async with worker():
        handle: Handle = await temporal_client.start_workflow(
            "RunbookWorkflow",
            request,
            id=f"run-{uuid.uuid4().hex[:10]}",
            task_queue=task_queue,
            result_type=RunReport,
        )
        status = await status_when(handle, is_open("expiry:before"))
    opened = gate(status, "expiry:before")
    assert opened is not None and opened.deadline is not None
    await asyncio.sleep(1.5)
    vote = asyncio.create_task(
        handle.execute_update("decide", Decision(approver="bob", approve=True), id="late-vote")
    )
    # The new worker must find the vote and the fired timer in one task: wait until the server
    # holds the vote before starting it (a worker that starts fast would see the timer alone).
    await until_admitted(temporal_client, handle.id, "late-vote")
    async with worker():
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await vote
        report = await handle.result()
    assert "gate 'expiry:before' expired at" in str(info.value.cause)
    final = next(g for g in report.gates if g.rule.gate_id == "expiry:before")
    assert final.closed_reason == "approved automatically on timeout (on_timeout: approve)"
    assert [v.approver for v in final.refused] == ["bob"]


async def until_admitted(client: Client, workflow_id: str, update_id: str) -> None:
    """Wait until the server has admitted update `update_id` (the SDK cannot wait for that stage)."""
    request = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace,
        update_ref=UpdateRef(
            workflow_execution=WorkflowExecution(workflow_id=workflow_id), update_id=update_id
        ),
        wait_policy=WaitPolicy(
            lifecycle_stage=UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
        ),
    )

    async def admitted() -> bool:
        try:
            await client.workflow_service.poll_workflow_execution_update(
                request, timeout=timedelta(seconds=2)
            )
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return False
        return True

    await wait_for(f"the server to admit update {update_id!r}", admitted, seconds=20)
