"""Check mode (a plan): modules say what they would do, gates are not waited for, and a
plan's hashes let a later run refuse to apply when the runbook or hosts changed. Also: an
invalid runbook ends the run at once with the loader's message."""

from __future__ import annotations

from tests.integration.engine.conftest import RunFn, StartFn, hosts_inventory
from tests.testmodules import CALLS, RECORDS

PLANNED = """
name: plan-me
stages:
  - name: s
    hosts: gpu
    gate: {before: true, approvers: [bob]}
    tasks:
      - name: step
        test.step: {value: x}
      - name: reboot
        test.nocheck: {cmd: reboot}
      - name: probe
        test.nocheck: {cmd: probe}
        check_mode: false
      - name: confirm
        gate: {name: confirm, approvers: [bob]}
      - name: nap
        pause: {minutes: 30}
"""


async def test_check_mode_reports_what_would_happen_without_waiting_for_gates(run: RunFn) -> None:
    report = await run(PLANNED, hosts_inventory(1), check_mode=True)
    assert report.status == "succeeded", report.msg
    assert report.check_mode
    assert report.hashes is not None and len(report.hashes.content) == 64
    tasks = {t.name: t for t in report.stages[0].hosts[0].tasks}

    assert tasks["step"].msg == "would step x"
    assert [r.check_mode for r in RECORDS] == [True]
    assert tasks["reboot"].status == "skipped"
    assert "`check_mode: false`" in tasks["reboot"].msg
    # Only the task marked `check_mode: false` ran for real.
    assert [a["cmd"] for _, t, a in CALLS if t.startswith("s/") and "cmd" in a] == ["probe"]
    assert tasks["probe"].status == "changed"
    assert tasks["confirm"].status == "ok" and tasks["confirm"].msg == "skipped in check mode"
    assert tasks["nap"].msg == "would pause 1800s"
    stage_gate = next(g for g in report.gates if g.rule.gate_id == "s:before")
    assert stage_gate.status == "approved" and stage_gate.votes == []
    assert stage_gate.closed_reason == "check mode: would ask bob (quorum 1)"


STEP = """
name: guarded
hosts: gpu
tasks:
  - test.step: {value: "VALUE"}
"""


async def test_applying_a_plan_is_refused_when_the_runbook_or_hosts_changed(run: RunFn) -> None:
    plan = await run(STEP.replace("VALUE", "v1"), hosts_inventory(2), check_mode=True)
    assert plan.status == "succeeded" and plan.hashes is not None

    applied = await run(
        STEP.replace("VALUE", "v1"), hosts_inventory(2), expected_hashes=plan.hashes, plan_of=plan.run_id
    )
    assert applied.status == "succeeded", applied.msg
    assert applied.hashes == plan.hashes

    CALLS.clear()
    edited = await run(
        STEP.replace("VALUE", "v2"), hosts_inventory(2), expected_hashes=plan.hashes, plan_of=plan.run_id
    )
    assert edited.status == "failed"
    assert edited.msg == (
        f"refusing to apply plan {plan.run_id}: runbook changed since it was planned; "
        "run `pitstop plan` again and review the new plan"
    )
    grown = await run(
        STEP.replace("VALUE", "v1"), hosts_inventory(3), expected_hashes=plan.hashes, plan_of=plan.run_id
    )
    assert grown.status == "failed"
    assert f"refusing to apply plan {plan.run_id}: inventory, hosts changed" in grown.msg
    assert CALLS == []


async def test_an_invalid_runbook_fails_the_run_with_the_loader_message(start_run: StartFn) -> None:
    handle = await start_run(
        """
        name: typo
        hosts: gpu
        tasks:
          - name: step
            test.stepp: {value: x}
        """,
        hosts_inventory(1),
    )
    report = await handle.result()
    assert report.status == "failed"
    assert report.msg == (
        "plan failed: runbook.yaml:6:5: unknown task keyword or module 'test.stepp' "
        "(did you mean 'test.step'?)"
    )
    assert CALLS == []
    described = await handle.describe()
    assert described.typed_search_attributes is not None
    assert any(
        p.key.name == "PitstopStatus" and p.value == "failed" for p in described.typed_search_attributes
    )
