# ruff: noqa: F811  (the engine's fixtures are imported by name, then asked for by name)
"""Messages between a run and its host workflows cannot be forged (issue #13).

Anyone who can reach the namespace can signal any workflow and start one with any input.
Each test sends, from a plain client, what an attacker would: a gate's answer straight to a
host, run-once results, claims and gate requests to the run, commands to a host, a start
request carrying `state` (directly, and through a workflow that continues as new into a
RunbookWorkflow), a host workflow started by hand. Each is refused, reported in the run's
notices, and changes nothing; the genuine message still works. Through the real dev server
and the engine's worker (tests/integration/engine/conftest.py).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

from activities.plan import build_plan
from pitstop.approvals import GateRule
from pitstop.contracts import (
    Decision,
    GateClosed,
    GateState,
    HostCommand,
    HostGateRequest,
    HostInput,
    HostNotice,
    HostResult,
    ModuleResult,
    RunOnceClaim,
    RunOnceReply,
    RunProgress,
    RunReport,
    RunRequest,
    RunStatus,
    StageStatus,
)
from tests.integration.engine.conftest import (  # noqa: F401 (fixtures)
    StartFn,
    engine_worker,
    hosts_inventory,
    start_run,
    status_when,
    write_bundle,
)
from tests.security.messages_support import (
    assert_no_key_in_history,
    event_types,
    family,
    history,
    history_when,
    idle_after_signals,
    notices_when,
    scheduled_activities,
    signal_when,
    signals_received,
)
from tests.testmodules import CALLS
from workflows.runbook import STATE_FROM_CLIENT, STATE_NOT_SIGNED

Handle = WorkflowHandle[Any, RunReport]

HOST_GATE = """
name: hostgate
approvers: {sre: [bob]}
hosts: gpu
tasks:
  - name: confirm
    gate: {name: go, approvers: sre}
  - name: after
    test.step: {value: "after {{ inventory_hostname }}"}
"""


def child(handle: Handle, stage: str, host: str) -> str:
    return f"{handle.id}/{stage}/{host}"


async def running(client: Client, workflow_id: str) -> bool:
    desc = await client.get_workflow_handle(workflow_id).describe()
    return desc.status == WorkflowExecutionStatus.RUNNING


def gate_of(status: RunStatus, gate_id: str) -> GateState | None:
    return next((g for g in status.gates if g.rule.gate_id == gate_id), None)


def open_gates(status: RunStatus) -> list[str]:
    return sorted(g.rule.gate_id for g in status.gates if g.status == "open")


async def test_gate_closed_sent_to_a_host_opens_nothing_and_only_a_vote_does(
    start_run: StartFn, temporal_client: Client, pitstop_keys: dict[str, str]
) -> None:
    handle = await start_run(HOST_GATE, hosts_inventory(2))
    await status_when(handle, lambda s: open_gates(s) == ["go@h00", "go@h01"])
    h00 = temporal_client.get_workflow_handle(child(handle, "hostgate", "h00"))

    # A client answers the host's gate itself: no signature at all.
    await h00.signal("gate_closed", GateClosed(gate_id="go@h00", approved=True, reason="approved by mallory"))
    # A real, signed answer read from another host's history, sent as it is and with its gate
    # changed: signed for another receiver, and for other content.
    await handle.execute_update("decide", Decision(gate="go@h01", approver="bob", approve=True))
    await status_when(
        handle, lambda s: any(h == "h01" and a["value"] == "after h01" for h, _, a in CALLS) or False
    )
    [genuine] = signals_received(
        await history(temporal_client, child(handle, "hostgate", "h01")), "gate_closed"
    )
    assert genuine["approved"] is True and len(genuine["signature"]) == 64
    await h00.signal("gate_closed", GateClosed.model_validate(genuine))
    await h00.signal("gate_closed", GateClosed.model_validate({**genuine, "gate_id": "go@h00"}))

    said = "host h00: refused a 'gate_closed' signal: its signature does not verify"
    status = await status_when(handle, lambda s: sum(n.startswith(said) for n in s.notices) == 3)
    assert len(status.notices) == 3, status.notices
    status = await handle.query("status", result_type=RunStatus)
    held = gate_of(status, "go@h00")
    assert held is not None and held.status == "open" and held.votes == []
    assert await running(temporal_client, h00.id)
    assert not any(h == "h00" for h, _, _ in CALLS)  # the host still waits at its gate

    # The vote, and only the vote, opens it.
    await handle.execute_update("decide", Decision(gate="go@h00", approver="bob", approve=True))
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert sorted(a["value"] for _, _, a in CALLS) == ["after h00", "after h01"]
    assert await assert_no_key_in_history(temporal_client, [handle.id], pitstop_keys) == 3


RUN_ONCE = """
name: once
hosts: gpu
tasks:
  - name: shared
    test.step: {value: "{{ inventory_hostname }}", sleep: 2}
    run_once: true
    register: shared
  - name: use
    test.step: {value: "saw {{ shared.value }}"}
"""


async def test_forged_run_once_replies_and_results_are_not_used(
    start_run: StartFn, temporal_client: Client
) -> None:
    handle = await start_run(RUN_ONCE, hosts_inventory(2))
    # The owner is in the middle of the run-once task; the other host waits for its result.
    await status_when(handle, lambda s: any(t == "once/0" for _, t, _ in CALLS))
    [(owner, task_path, _)] = [c for c in CALLS if c[1] == "once/0"]
    waiter = "h01" if owner == "h00" else "h00"
    forged = ModuleResult(msg="step forged", data={"value": "forged"})
    await temporal_client.get_workflow_handle(child(handle, "once", waiter)).signal(
        "run_once_reply", RunOnceReply(task_id="once/0", owner=owner, result=forged)
    )
    await handle.signal("run_once_done", RunOnceReply(task_id="once/0", owner=owner, result=forged))
    await notices_when(
        handle,
        f"host {waiter}: refused a 'run_once_reply' signal: its signature does not verify",
        "refused a 'run_once_done' signal: its signature does not verify",
    )

    report = await handle.result()
    assert report.status == "succeeded", report.msg
    # Every host carries the owner's real result; the forged one is nowhere.
    assert {h.host: h.registered["shared"]["value"] for h in report.stages[0].hosts} == {
        "h00": owner,
        "h01": owner,
    }
    assert sorted(a["value"] for _, t, a in CALLS if t == "once/1") == [f"saw {owner}", f"saw {owner}"]
    assert [c for c in CALLS if c[1] == task_path] == [(owner, task_path, {"value": owner, "sleep": 2})]


GATED_STAGE = """
name: claims
approvers: {sre: [bob]}
stages:
  - name: s
    hosts: gpu
    gate: {before: true, approvers: sre}
    tasks:
      - name: shared
        test.step: {value: "{{ inventory_hostname }}"}
        run_once: true
      - name: confirm
        gate: {name: go, approvers: sre}
"""


async def test_host_gate_claims_notices_and_commands_from_a_client_change_nothing(
    start_run: StartFn, temporal_client: Client
) -> None:
    handle = await start_run(GATED_STAGE, hosts_inventory(2))
    await status_when(handle, lambda s: open_gates(s) == ["s:before"])
    # Before any host runs: claim the run-once task for a host that does not exist (the real
    # hosts would wait for it forever), ask for a gate the plan has, make up a notice.
    await handle.signal("run_once_claim", RunOnceClaim(task_id="s/0", host="ghost"))
    await handle.signal("host_gate", HostGateRequest(gate_id="go@ghost", template="go", host="ghost"))
    await handle.signal("host_gate", HostGateRequest(gate_id="go@h00", template="go", host="h00"))
    await handle.signal("host_notice", HostNotice(host="h00", text="all good, nothing to see"))
    notices = await notices_when(
        handle,
        "refused a 'run_once_claim' signal: this run has no host workflow running for 'ghost'",
        "refused a 'host_gate' signal: this run has no host workflow running for 'ghost'",
        "refused a 'host_gate' signal: this run has no host workflow running for 'h00'",
        "refused a 'host_notice' signal",
    )
    assert "all good, nothing to see" not in " ".join(notices)
    assert open_gates(await handle.query("status", result_type=RunStatus)) == ["s:before"]

    await handle.execute_update("decide", Decision(approver="bob", approve=True))
    status = await status_when(handle, lambda s: open_gates(s) == ["go@h00", "go@h01"])
    # While the hosts run: the same requests, now for hosts that do run, still unsigned.
    await handle.signal("host_gate", HostGateRequest(gate_id="go@h00", template="go", host="h00"))
    await handle.signal("run_once_claim", RunOnceClaim(task_id="s/0", host="h00"))
    h00 = temporal_client.get_workflow_handle(child(handle, "s", "h00"))
    # Commands a client sends a host: as the run's CLI sends them to the run, a well-formed
    # command without a signature, and a signed one replayed from another host's history.
    await handle.signal("pause")
    [pause_h01] = await signal_when(temporal_client, child(handle, "s", "h01"), "pause")
    await handle.signal("resume")
    await h00.signal("abort", "stop it")
    await h00.signal("pause", HostCommand(command="pause", seq=99))
    await h00.signal("pause", HostCommand.model_validate(pause_h01))
    await notices_when(
        handle,
        "host h00: refused a 'abort' signal: it is not a command signed by this host's run",
        "host h00: refused a 'pause' signal: its signature does not verify",
    )
    notices = (await handle.query("status", result_type=RunStatus)).notices
    assert sum("refused a 'pause' signal: its signature" in n for n in notices) == 2, notices
    status = await handle.query("status", result_type=RunStatus)
    assert open_gates(status) == ["go@h00", "go@h01"] and not status.paused
    # Nothing changed: one run-once call by a real host, both hosts still waiting and not paused.
    assert [h for h, t, _ in CALLS if t == "s/0"] in (["h00"], ["h01"])
    assert await running(temporal_client, h00.id)

    for host in ("h00", "h01"):
        await handle.execute_update("decide", Decision(gate=f"go@{host}", approver="bob", approve=True))
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert [h.status for h in report.stages[0].hosts] == ["ok", "ok"]


def fake_state(tmp_path: Path, runbook: str, inventory: str, queue: str) -> RunProgress:
    """What an attacker would carry: a real plan, its gate already approved by nobody."""
    files = write_bundle(tmp_path, runbook, inventory)
    plan = build_plan(RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files), queue)
    rule: GateRule = plan.gates["s:before"]
    approved = GateState(
        rule=rule,
        status="approved",
        opened_at=plan_time(),
        closed_at=plan_time(),
        closed_reason="approved by bob",
    )
    return RunProgress(
        plan=plan,
        started_at=plan_time(),
        statuses=[StageStatus(name="s", hosts={"h00": "pending"})],
        gates={"s:before": approved},
    )


def plan_time() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 1, 1, tzinfo=UTC)


GATED = """
name: stateful
approvers: {sre: [bob]}
stages:
  - name: s
    hosts: gpu
    gate: {before: true, approvers: sre}
    tasks:
      - test.step: {value: "{{ inventory_hostname }}"}
"""


async def assert_nothing_ran(client: Client, run_id: str) -> None:
    hist = await history(client, run_id)
    assert scheduled_activities(hist) == []
    types = event_types(hist)
    assert not any("CHILD_WORKFLOW" in t or "SIGNAL_EXTERNAL" in t for t in types), types
    assert CALLS == []


async def test_a_start_request_carrying_state_ends_at_once_and_nothing_runs(
    temporal_client: Client, engine_worker: str, tmp_path: Path, pitstop_keys: dict[str, str]
) -> None:
    state = fake_state(tmp_path, GATED, hosts_inventory(1), engine_worker)
    for extra in ({}, {"state_signature": "0" * 64}):
        run_id = f"forged-state-{uuid.uuid4().hex[:8]}"
        request = RunRequest(runbook="runbook.yaml", requested_by="mallory", state=state, **extra)
        handle = await temporal_client.start_workflow(
            "RunbookWorkflow", request, id=run_id, task_queue=engine_worker, result_type=RunReport
        )
        report = await handle.result()
        assert (report.status, report.msg) == ("failed", STATE_FROM_CLIENT)
        assert report.gates == [] and report.stages == [] and report.hashes is None
        # Not even the state's signature was checked: no local activity either (the only
        # marker is the engine's patch, recorded in the first workflow task of every run).
        hist = await history(temporal_client, run_id)
        markers = [
            e.marker_recorded_event_attributes.marker_name
            for e in hist.events
            if e.HasField("marker_recorded_event_attributes")
        ]
        assert markers == ["core_patch"], markers
        await assert_nothing_ran(temporal_client, run_id)
        # The run's status, for the UI and the CLI, shows none of the state it was given.
        status = await handle.query("status", result_type=RunStatus)
        assert (status.status, status.gates, status.stages, status.plan_hash) == ("failed", [], [], None)
        vote = Decision(gate="s:before", approver="bob", approve=True)
        with pytest.raises(Exception, match=r"no gate named 's:before'|completed"):
            await handle.execute_update("decide", vote)
        assert await assert_no_key_in_history(temporal_client, [run_id], pitstop_keys) == 1


@workflow.defn(name="ForgeStateByContinuingAsNew", sandboxed=False)
class ForgeStateByContinuingAsNew:
    """An attacker's own workflow, on their own worker: it continues as new *into* a
    RunbookWorkflow on pitstop's task queue, so that Temporal sets `continued_run_id`."""

    @workflow.run
    async def run(self, target: dict[str, Any]) -> None:
        workflow.continue_as_new(target["request"], workflow="RunbookWorkflow", task_queue=target["queue"])


async def test_continuing_as_new_into_a_run_from_another_workflow_is_refused(
    temporal_client: Client, engine_worker: str, tmp_path: Path
) -> None:
    state = fake_state(tmp_path, GATED, hosts_inventory(1), engine_worker)
    request = RunRequest(
        runbook="runbook.yaml", requested_by="mallory", state=state, state_signature="ab" * 32
    )
    attacker_queue = f"{engine_worker}-attacker"
    run_id = f"forged-continue-{uuid.uuid4().hex[:8]}"
    async with Worker(temporal_client, task_queue=attacker_queue, workflows=[ForgeStateByContinuingAsNew]):
        handle = await temporal_client.start_workflow(
            "ForgeStateByContinuingAsNew",
            {"request": request.model_dump(mode="json"), "queue": engine_worker},
            id=run_id,
            task_queue=attacker_queue,
        )
        report = await temporal_client.get_workflow_handle(run_id, result_type=RunReport).result()
    assert isinstance(report, RunReport)
    assert (report.status, report.msg) == ("failed", STATE_NOT_SIGNED)
    desc = await temporal_client.get_workflow_handle(run_id).describe()
    assert desc.workflow_type == "RunbookWorkflow" and desc.run_id != handle.result_run_id
    assert report.gates == [] and report.stages == []
    await assert_nothing_ran(temporal_client, run_id)


async def test_a_host_workflow_started_by_a_client_refuses_to_run(
    temporal_client: Client, engine_worker: str, tmp_path: Path
) -> None:
    # The input a real run would give a host, planned by the worker's own planner: only the
    # signature is missing (an attacker cannot make one without the worker key).
    files = write_bundle(
        tmp_path, GATED.replace("gate: {before: true, approvers: sre}", ""), hosts_inventory(1)
    )
    plan = build_plan(
        RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files), engine_worker
    )
    stage = plan.runbook.stages[0]
    crafted = HostInput(
        run_workflow_id="somebody",
        run_id="somebody",
        stage="s",
        host="h00",
        tasks=stage.tasks,
        vars={"inventory_hostname": "h00"},
        hostvars=plan.hostvars,
        modules=plan.modules,
        task_queue=engine_worker,
        signature="cd" * 32,
    )
    host_id = f"forged-host-{uuid.uuid4().hex[:8]}"
    result = await temporal_client.execute_workflow(
        "HostWorkflow",
        crafted,
        id=host_id,
        task_queue=engine_worker,
        result_type=HostResult,
        execution_timeout=timedelta(seconds=60),
    )
    assert result.status == "failed" and result.tasks == []
    assert result.msg.startswith("refused to run: this host workflow's input is not signed by a pitstop run")
    hist = await history(temporal_client, host_id)
    assert scheduled_activities(hist) == [] and CALLS == []
    assert await family(temporal_client, host_id) == [host_id]


@workflow.defn(name="AskForASignature", sandboxed=False)
class AskForASignature:
    """An attacker's workflow that calls the signer as an ordinary activity on pitstop's queue."""

    @workflow.run
    async def run(self, queue: str) -> Any:
        return await workflow.execute_activity(
            "trust.sign",
            {"purpose": "message", "values": [{"kind": "gate_closed"}]},
            task_queue=queue,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )


async def test_the_signer_answers_only_local_calls_from_the_runs_own_workflows(
    temporal_client: Client, engine_worker: str
) -> None:
    queue = f"{engine_worker}-asker"
    async with Worker(temporal_client, task_queue=queue, workflows=[AskForASignature]):
        with pytest.raises(WorkflowFailureError) as info:
            await temporal_client.execute_workflow(
                "AskForASignature", engine_worker, id=f"ask-{uuid.uuid4().hex[:8]}", task_queue=queue
            )
    cause: BaseException | None = info.value
    messages = []
    while cause is not None:
        messages.append(str(cause))
        cause = getattr(cause, "cause", None)
    assert any("available only to pitstop's workflows on their worker" in m for m in messages), messages


async def test_signed_commands_from_the_run_still_hold_and_release_its_hosts(
    start_run: StartFn, temporal_client: Client
) -> None:
    # The genuine path: the run's own pause, resume, pause reach the host signed and in order,
    # while the host waits at a gate; when the gate opens, the host holds before its next task.
    handle = await start_run(
        """
        name: paused
        approvers: {sre: [bob]}
        hosts: gpu
        tasks:
          - gate: {name: go, approvers: sre}
          - test.step: {value: "after {{ inventory_hostname }}"}
        """,
        hosts_inventory(1),
    )
    await status_when(handle, lambda s: open_gates(s) == ["go@h00"])
    for command in ("pause", "resume", "pause"):
        await handle.signal(command)
    host_id = child(handle, "paused", "h00")
    await history_when(temporal_client, host_id, idle_after_signals(3))
    await handle.execute_update("decide", Decision(gate="go@h00", approver="bob", approve=True))
    hist = await history_when(temporal_client, host_id, idle_after_signals(4))
    assert [s["approved"] for s in signals_received(hist, "gate_closed")] == [True]
    assert scheduled_activities(hist) == [] and CALLS == []
    status = await handle.query("status", result_type=RunStatus)
    assert status.paused and status.notices == []
    await handle.signal("resume")
    report = await handle.result()
    assert report.status == "succeeded" and [a["value"] for _, _, a in CALLS] == ["after h00"]
