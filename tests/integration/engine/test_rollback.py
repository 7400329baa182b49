"""Rollback as a saga: triggers (`rollback_when`, the failure budget, a rejected `after`
gate, a failing `observe` check) and compensations in reverse order, stage by stage, then
the run-level `rollback`, each seeing `run.rollback_reason`."""

from __future__ import annotations

import asyncio

from pitstop.contracts import Decision, RunStatus
from tests.integration.engine.conftest import RunFn, StartFn, hosts_inventory
from tests.testmodules import CALLS


def rollback_calls() -> list[tuple[str, str]]:
    return [(h, str(a["value"])) for h, t, a in CALLS if "rollback" in t]


async def test_rollback_when_compensates_stages_in_reverse_then_the_run(run: RunFn) -> None:
    report = await run(
        """
        name: saga
        rollback:
          - name: tell
            test.step: {value: "run: {{ run.rollback_reason }}"}
        stages:
          - name: first
            hosts: gpu
            rolling: {max_in_flight: 1}
            tasks:
              - test.step: {value: "first {{ inventory_hostname }}"}
            rollback:
              - name: undo first a
                test.step: {value: "undo-a first {{ inventory_hostname }}"}
              - name: undo first b
                test.step: {value: "undo-b first {{ inventory_hostname }}"}
              - name: announce once
                test.step: {value: "once for {{ stage.name }}"}
                run_once: true
          - name: second
            hosts: gpu
            rolling: {max_in_flight: 1}
            tasks:
              - test.step: {value: "second {{ inventory_hostname }}", fail_hosts: [h00]}
            rollback_when:
              - "{{ stage.failed_hosts | length > 0 }}"
            rollback:
              - name: undo second
                test.step: {value: "undo second {{ inventory_hostname }} ({{ run.rollback_reason }})"}
        """,
        hosts_inventory(2),
    )
    reason = (
        "rollback_when held in stage 'second': {{ stage.failed_hosts | length > 0 }}"
        " (h00: second/0: step failed on h00)"
    )
    assert report.status == "rolled_back"
    assert report.rollback_reason == reason
    assert report.msg == f"rolled back: {reason}"
    # h01 never started in the failing stage.
    assert [h for h, t, _ in CALLS if t.startswith("second/") and "rollback" not in t] == ["h00"]
    first_order = [h.host for h in report.stages[0].hosts]
    last, before_last = first_order[1], first_order[0]
    # Per host in reverse order; the run_once compensation runs on the first host only.
    assert rollback_calls() == [
        ("h00", f"undo second h00 ({reason})"),
        (last, f"undo-a first {last}"),
        (last, f"undo-b first {last}"),
        (last, "once for first"),
        (before_last, f"undo-a first {before_last}"),
        (before_last, f"undo-b first {before_last}"),
        ("localhost", f"run: {reason}"),
    ]
    assert [s.status for s in report.stages] == ["rolled_back", "rolled_back"]
    assert [h.host for h in report.stages[1].rollback_hosts] == ["h00"]
    assert [r.status for r in report.run_rollback] == ["ok"]


async def test_failure_budget_triggers_a_rollback_run_once(run: RunFn) -> None:
    report = await run(
        """
        name: budget
        stages:
          - name: budget
            hosts: gpu
            serial: 1
            max_fail_percentage: 25
            rollback_run_once: true
            tasks:
              - test.step: {value: x, fail_hosts: [h00, h01]}
            rollback:
              - name: undo once
                test.step: {value: "undo {{ stage.failed_hosts | join(',') }}"}
        """,
        hosts_inventory(4),
    )
    assert report.status == "rolled_back"
    assert report.rollback_reason is not None and "failure budget exceeded" in report.rollback_reason
    assert [h for h, t, _ in CALLS if "rollback" not in t] == ["h00", "h01"]
    assert rollback_calls() == [("localhost", "undo h00,h01")]


async def test_rejected_after_gate_rolls_the_stage_back(start_run: StartFn) -> None:
    handle = await start_run(
        """
        name: after
        stages:
          - name: after
            hosts: gpu
            gate: {after: true, approvers: [bob]}
            tasks:
              - test.step: {value: "do {{ inventory_hostname }}"}
            rollback:
              - test.step: {value: "undo {{ inventory_hostname }}"}
        """,
        hosts_inventory(2),
    )
    while True:
        status = await handle.query("status", result_type=RunStatus)
        if any(g.rule.gate_id == "after:after" and g.status == "open" for g in status.gates):
            break
        await asyncio.sleep(0.05)
    await handle.execute_update("decide", Decision(approver="bob", approve=False, comment="metrics look bad"))
    report = await handle.result()
    assert report.status == "rolled_back"
    assert report.rollback_reason == "gate after:after rejected by bob"
    assert sorted(rollback_calls()) == [("h00", "undo h00"), ("h01", "undo h01")]


async def test_observe_window_passes_then_a_failing_check_rolls_back(run: RunFn) -> None:
    report = await run(
        """
        name: observed
        stages:
          - name: calm
            hosts: gpu
            vars: {healthy: true}
            tasks:
              - test.step: {value: calm}
            observe:
              duration: 0.4s
              interval: 0.2s
              checks:
                - assert: {that: healthy, fail_msg: "calm is unhealthy"}
            rollback:
              - test.step: {value: "undo calm"}
          - name: stormy
            hosts: gpu
            vars: {healthy: false}
            tasks:
              - test.step: {value: stormy}
            observe:
              duration: 1s
              interval: 0.2s
              checks:
                - name: healthy
                  assert: {that: healthy, fail_msg: "stormy is unhealthy"}
            rollback:
              - test.step: {value: "undo stormy"}
        """,
        hosts_inventory(1),
    )
    calm, stormy = report.stages
    assert [o.status for o in calm.observations] == ["ok", "ok"]
    assert [o.host for o in calm.observations] == ["localhost", "localhost"]
    # The failing check stops the window at once and triggers the rollback.
    assert [o.status for o in stormy.observations] == ["failed"]
    assert report.status == "rolled_back"
    assert report.rollback_reason == "observe check failed in stage 'stormy': healthy: stormy is unhealthy"
    assert rollback_calls() == [("h00", "undo stormy"), ("h00", "undo calm")]


async def test_a_templated_observe_window_lasts_what_the_runs_vars_say(run: RunFn) -> None:
    """`observe.duration: "{{ observe_window }}"` is resolved with the run's vars when it is
    planned: -e observe_window=0.6s gives three rounds of a 0.2s interval, the runbook's own
    0.2s gives one."""
    runbook = """
        name: templated
        vars: {observe_window: 0.2s}
        stages:
          - name: watched
            hosts: gpu
            tasks:
              - test.step: {value: watched}
            observe:
              duration: "{{ observe_window }}"
              interval: 0.2s
              checks:
                - assert: {that: "1 == 1"}
        """
    longer = await run(runbook, hosts_inventory(1), vars={"observe_window": "0.6s"})
    assert [o.status for o in longer.stages[0].observations] == ["ok", "ok", "ok"]
    default = await run(runbook, hosts_inventory(1))
    assert [o.status for o in default.stages[0].observations] == ["ok"]
