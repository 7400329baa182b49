"""Operator signals on a live run (pause/resume, abort, skip_host, rollback) and what the
`status` query shows meanwhile: the stage, each host's state, why hosts wait."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle

from pitstop.contracts import RunReport, RunStatus
from tests.integration.engine.conftest import StartFn, hosts_inventory, status_when
from tests.integration.engine.test_durability import wait_for
from tests.testmodules import CALLS, hold, release

Handle = WorkflowHandle[Any, RunReport]

ROLLING = """
name: ops
hosts: gpu
rolling: {max_in_flight: 1}
tasks:
  - name: first
    test.step: {value: "first {{ inventory_hostname }}", sleep: 0.3}
  - name: second
    test.step: {value: "second {{ inventory_hostname }}"}
rollback:
  - test.step: {value: "run rollback: {{ run.rollback_reason }}"}
"""


def host_state(host: str, state: str) -> Callable[[RunStatus], bool]:
    return lambda s: bool(s.stages) and s.stages[0].hosts.get(host) == state


def values() -> list[str]:
    return [str(a["value"]) for _, _, a in CALLS]


# The pause travels operator -> run -> host; the first task lasts long enough for it to arrive
# while the task runs, even on a loaded machine (CI once saw the second task start first).
PAUSABLE = ROLLING.replace("sleep: 0.3", "sleep: 2.5")


async def test_pause_holds_new_tasks_and_hosts_until_resume(start_run: StartFn) -> None:
    handle = await start_run(PAUSABLE, hosts_inventory(2))
    await status_when(handle, lambda s: values() == ["first h00"])
    await handle.signal("pause")
    status = await status_when(handle, lambda s: s.stages[0].blocked_reason == "paused by operator")
    assert status.paused and status.status == "paused"
    assert status.current_stage == "ops"
    assert status.stages[0].hosts == {"h00": "running", "h01": "pending"}
    # The Temporal UI shows the same: search attributes and the run's current details.
    described = await handle.describe()
    attributes = {
        p.key.name: p.value for p in described.typed_search_attributes if p.key.name.startswith("Pitstop")
    }
    assert attributes == {"PitstopRunbook": "ops", "PitstopStage": "ops", "PitstopStatus": "paused"}
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert metadata.current_details.splitlines()[:2] == [
        "**ops**: paused",
        "- ops: running (pending 1, running 1) — paused by operator",
    ]
    # The task in progress finishes; the next task and the next host wait.
    await asyncio.sleep(0.8)
    assert values() == ["first h00"]

    await handle.signal("resume")
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert values() == ["first h00", "second h00", "first h01", "second h01"]


async def _signaled(client: Client, workflow_id: str, signal: str) -> bool:
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        signaled = event.workflow_execution_signaled_event_attributes
        if event.HasField("workflow_execution_signaled_event_attributes") and signaled.signal_name == signal:
            return True
    return False


async def test_skip_host_then_abort_end_the_run_aborted_with_the_reason(
    start_run: StartFn, temporal_client: Client
) -> None:
    hold("h02")  # h02's first task runs until the abort has reached h02's workflow
    try:
        handle = await start_run(ROLLING, hosts_inventory(3))
        await handle.signal("skip_host", "h01")
        await status_when(handle, host_state("h01", "skipped"))
        await status_when(handle, lambda s: "first h02" in values())
        await handle.signal("abort", "maintenance window closed")
        h02 = f"{handle.id}/ops/h02"
        await wait_for("the abort in h02's history", lambda: _signaled(temporal_client, h02, "abort"))
    finally:
        release("h02")
    report = await handle.result()

    assert report.status == "aborted"
    assert report.msg == "aborted: maintenance window closed"
    assert values() == ["first h00", "second h00", "first h02"]
    hosts = {h.host: h for h in report.stages[0].hosts}
    assert hosts["h01"].status == "skipped" and hosts["h01"].msg == "skipped by operator"
    assert hosts["h02"].status == "aborted" and hosts["h02"].msg == "maintenance window closed"
    assert report.rollback_reason is None


async def test_rollback_signal_stops_launching_and_rolls_back(start_run: StartFn) -> None:
    handle = await start_run(ROLLING, hosts_inventory(2))
    await status_when(handle, lambda s: values() == ["first h00"])
    await handle.signal("rollback", "canary looks wrong")
    report = await handle.result()
    assert report.status == "rolled_back"
    assert report.rollback_reason == "canary looks wrong"
    # h00 finished its tasks; h01 never started; the run-level rollback saw the reason.
    assert values() == ["first h00", "second h00", "run rollback: canary looks wrong"]
    assert {h.host for h in report.stages[0].hosts} == {"h00"}


async def test_abort_during_the_observe_window_stops_without_rolling_back(start_run: StartFn) -> None:
    handle = await start_run(
        """
        name: watched
        stages:
          - name: watched
            hosts: gpu
            tasks:
              - test.step: {value: work}
            observe: {duration: 1h, interval: 10m}
            rollback:
              - test.step: {value: undo}
        """,
        hosts_inventory(1),
    )
    await status_when(handle, lambda s: bool(s.stages) and s.stages[0].status == "observing")
    await handle.signal("abort", "seen enough")
    report = await handle.result()
    assert report.status == "aborted"
    assert report.msg == "aborted: seen enough"
    assert values() == ["work"]
    assert report.rollback_reason is None


async def test_rollback_signal_closes_a_waiting_host_gate_so_the_rollback_goes_ahead(
    start_run: StartFn,
) -> None:
    handle = await start_run(
        """
        name: held
        stages:
          - name: held
            hosts: gpu
            tasks:
              - test.step: {value: cordon}
              - name: confirm
                gate: {name: confirm, approvers: [bob]}
              - test.step: {value: drain}
            rollback:
              - test.step: {value: uncordon}
        """,
        hosts_inventory(1),
    )
    await status_when(handle, lambda s: any(g.status == "open" for g in s.gates))
    await handle.signal("rollback", "change freeze")
    report = await handle.result()
    assert report.status == "rolled_back"
    assert report.rollback_reason == "change freeze"
    assert values() == ["cordon", "uncordon"]
    confirm = next(g for g in report.gates if g.rule.gate_id == "confirm@h00")
    assert (confirm.status, confirm.closed_reason) == ("rejected", "closed: change freeze")
    assert report.stages[0].hosts[0].msg == "gate 'confirm@h00' closed: change freeze"
