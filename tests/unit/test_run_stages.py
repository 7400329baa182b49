"""StageRun and run_vars: a stage's records written in one place, and the run-level variables."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from activities.plan import build_plan
from pitstop.contracts import HostResult, RunProgress, RunRequest, RunVars
from pitstop.module_args.records import ChangeRecordArgs
from workflows import run_vars
from workflows.rollout import RolloutState
from workflows.run_fleet import FleetCache
from workflows.run_stages import StageRun, StageRuns, fresh_records

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUNBOOK = """\
name: two-stages
vars: {level: play, only_play: 1}
stages:
  - name: first
    hosts: gpu
    vars: {level: stage}
    tasks:
      - debug: {msg: "{{ groups.gpu }} {{ run.stages }} {{ stage.hosts }}"}
  - name: second
    hosts: gpu
    max_fail_percentage: 50
    rollback_when:
      - "stage.failed_hosts | length > 0 and run.stages[0].status == 'ok'"
    tasks:
      - debug: {msg: hi}
"""
INVENTORY = """\
all:
  children:
    gpu:
      hosts:
        h00: {level: inventory}
        h01: {}
        h02: {}
        h03: {}
"""


@pytest.fixture
def progress(tmp_path: Path) -> RunProgress:
    files = {"runbook.yaml": textwrap.dedent(RUNBOOK), "inventory.yaml": textwrap.dedent(INVENTORY)}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    plan = build_plan(RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files))
    reports, statuses = fresh_records(plan.stages)
    return RunProgress(plan=plan, started_at=NOW, reports=reports, statuses=statuses)


def result(host: str, status: str, msg: str = "") -> HostResult:
    return HostResult.model_validate(
        {"host": host, "stage": "first", "status": status, "msg": msg, "started_at": NOW, "ended_at": NOW}
    )


def test_stage_runs_hold_rule_plan_status_and_report_of_the_same_stage(progress: RunProgress) -> None:
    stages = StageRuns(progress)
    assert [(s.rule.name, s.plan.name, s.status.name, s.report.name) for s in stages] == [
        ("first",) * 4,
        ("second",) * 4,
    ]
    first, second = stages.all
    assert stages.current() is first and first.progress is progress.stage and second.progress is None
    stages.advance()
    assert progress.stage_index == 1 and stages.current() is second
    assert first.progress is None and second.progress is progress.stage


def test_a_running_state_shows_in_the_status_and_an_ending_in_the_report_too(progress: RunProgress) -> None:
    first = StageRuns(progress).all[0]
    first.set_status("running")
    assert (progress.statuses[0].status, progress.reports[0].status) == ("running", "pending")
    first.set_status("ok")
    assert (progress.statuses[0].status, progress.reports[0].status) == ("ok", "ok")


def test_a_host_s_ending_is_written_to_scheduler_progress_status_and_report(progress: RunProgress) -> None:
    first = StageRuns(progress).all[0]
    rollout = first.rollout_state()
    for host in ("h00", "h01", "h02"):
        first.host_started(host)
        rollout.in_flight.add(host)
    first.host_ended(result("h00", "ok"), rollout, skip_requested=False)
    first.host_ended(result("h01", "failed", "boom"), rollout, skip_requested=False)
    shown = first.host_ended(result("h02", "aborted"), rollout, skip_requested=True)
    assert shown.status == "skipped"
    assert (rollout.done, rollout.failed, rollout.skipped, rollout.in_flight) == (
        {"h00"},
        {"h01"},
        {"h02"},
        set(),
    )
    stage = progress.stage
    assert (stage.done, stage.failed, stage.skipped) == (["h00"], ["h01"], ["h02"])
    assert progress.statuses[0].hosts == {"h00": "ok", "h01": "failed", "h02": "skipped", "h03": "pending"}
    assert [h.status for h in progress.reports[0].hosts] == ["ok", "failed", "skipped"]
    first.stop("aborted")
    assert progress.statuses[0].hosts["h03"] == "skipped" and progress.reports[0].status == "aborted"


def test_stage_vars_come_from_progress_while_current_and_from_the_report_after(progress: RunProgress) -> None:
    stages = StageRuns(progress)
    first = stages.all[0]
    rollout = first.rollout_state()
    first.host_ended(result("h00", "ok"), rollout, skip_requested=False)
    first.host_ended(result("h01", "skipped"), rollout, skip_requested=False)
    # While current, a host whose result is `skipped` counts as done, as the stage's progress says.
    assert run_vars.stage_vars(first)["done_hosts"] == ["h00", "h01"]
    stages.advance()
    after = run_vars.stage_vars(first)
    assert (after["done_hosts"], after["skipped_hosts"]) == (["h00"], ["h01"])
    assert after["results"]["h00"] == {"status": "ok", "msg": ""}
    assert run_vars.stage_vars(None) == {}


def test_run_level_layers_override_lowest_first() -> None:
    merged = run_vars.run_scope(
        inventory={"a": "inventory", "b": "inventory", "c": "inventory", "d": "inventory", "e": "inventory"},
        play={"b": "play", "c": "play", "d": "play", "e": "play"},
        stage={"c": "stage", "d": "stage", "e": "stage"},
        facts={"d": "facts", "e": "facts"},
        extra={"e": "extra", "run": "extra"},
        groups={"all": ["h"]},
        magic={"run": "magic"},
    ).merged()
    assert merged == {
        "groups": {"all": ["h"]},
        "a": "inventory",
        "b": "play",
        "c": "stage",
        "d": "facts",
        "e": "extra",
        "run": "magic",
    }


def test_host_input_sees_the_layers_and_the_magic_variables(progress: RunProgress) -> None:
    stages = StageRuns(progress)
    run = RunVars(id="r1", runbook="two-stages", stages=[run_vars.stage_outcome(s) for s in stages])
    inp = run_vars.host_input(
        run_id="r1",
        plan=progress.plan,
        stage=stages.all[0],
        host="h00",
        tasks=stages.all[0].rule.tasks,
        host_facts={"h00": {"fact": 1}},
        run_var=run.as_template_var(),
        requested_by="alice",
        stage_handlers=True,
        fleet=FleetCache(progress.plan),
    )
    assert (inp.vars["level"], inp.vars["only_play"], inp.vars["fact"]) == ("stage", 1, 1)
    assert inp.vars["groups"]["gpu"] == ["h00", "h01", "h02", "h03"]
    assert inp.vars["run"]["stages"][0] == {
        "name": "first",
        "status": "pending",
        "rollback_reason": None,
        "done_hosts": [],
        "failed_hosts": [],
        "failures": [],
    }
    assert inp.vars["stage"]["hosts"] == ["h00", "h01", "h02", "h03"]


def _second_with_failures(progress: RunProgress, failed: int) -> StageRun:
    stages = StageRuns(progress)
    stages.all[0].set_status("ok")
    stages.advance()
    second = stages.all[1]
    rollout: RolloutState = second.rollout_state()
    for i in range(failed):
        second.host_ended(result(f"h0{i}", "failed", "boom"), rollout, skip_requested=False)
    return second


def _trigger(progress: RunProgress, stage: StageRun, request: str | None = None) -> str | None:
    run = RunVars(stages=[run_vars.stage_outcome(s) for s in StageRuns(progress)])
    plan = progress.plan
    return run_vars.rollback_trigger(
        stage=stage, rollback_request=request, play=plan.runbook.vars, extra=plan.extra_vars, run=lambda: run
    )


def test_rollback_trigger_budget_is_strictly_above_the_limit(progress: RunProgress) -> None:
    # No host failed: neither the budget nor `rollback_when` holds; an operator's request always does.
    second = _second_with_failures(progress, 0)
    assert _trigger(progress, second) is None
    assert _trigger(progress, second, "operator") == "operator"


def test_rollback_trigger_budget_exceeded_names_the_stage(progress: RunProgress) -> None:
    reason = _trigger(progress, _second_with_failures(progress, 3))
    assert reason == (
        "failure budget exceeded in stage 'second': 3 of 4 hosts failed (max_fail_percentage 50)"
    )


def test_rollback_when_reads_stage_and_run_and_says_which_hosts_failed(progress: RunProgress) -> None:
    reason = _trigger(progress, _second_with_failures(progress, 1))
    assert reason is not None and reason.startswith("rollback_when held in stage 'second': ")
    assert reason.endswith("(h00: boom)")


def test_the_run_variable_reaches_the_change_record_typed() -> None:
    run = RunVars(id="r1", runbook="rb", stages=[], gates=[])
    args = ChangeRecordArgs.model_validate(
        {"bucket": "records", "cluster": "c", "run": run.as_template_var()}
    )
    assert args.run == run
    assert (
        ChangeRecordArgs.model_validate({"bucket": "records", "cluster": "c", "run": None}).run == RunVars()
    )


def test_a_templated_observe_window_is_resolved_when_planned_and_a_bad_one_names_its_stage() -> None:
    runbook = (
        "name: r\nvars: {observe_window: 30m}\nstages:\n  - name: widen\n    hosts: all\n"
        "    tasks: [{debug: x}]\n    observe:\n      duration: '{{ observe_window }}'\n"
        "  - name: literal\n    hosts: all\n    tasks: [{debug: y}]\n    observe: {duration: 90s}\n"
    )
    files = {"runbook.yaml": runbook, "inventory.yaml": "all:\n  hosts:\n    a: {}\n"}
    planned = build_plan(RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files))
    assert [s.observe_seconds for s in planned.stages] == [1800.0, 90.0]
    overridden = build_plan(
        RunRequest(
            runbook="runbook.yaml", inventory="inventory.yaml", files=files, vars={"observe_window": "2h"}
        )
    )
    assert overridden.stages[0].observe_seconds == 7200.0
    # The hosts hash does not move with the window (a lab run still matches its production run).
    assert overridden.hashes.hosts == planned.hashes.hosts
    with pytest.raises(ValueError) as refused:
        build_plan(
            RunRequest(
                runbook="runbook.yaml",
                inventory="inventory.yaml",
                files=files,
                vars={"observe_window": "soon"},
            )
        )
    assert "observe.duration of stage 'widen' ({{ observe_window }}): invalid duration 'soon'" in str(
        refused.value
    )


def test_the_implicit_localhost_gets_the_all_groups_vars_as_in_ansible() -> None:
    # Ansible: implicit localhost "is not targetable with any group, however it will use vars
    # from host_vars and from the 'all' group" (docs: inventory/implicit_localhost).
    files = {
        "runbook.yaml": "name: r\nstages:\n  - name: s\n    hosts: localhost\n"
        "    tasks:\n      - debug: hi\n",
        "inventory.yaml": "all:\n  vars: {cluster_name: lab}\n  children:\n"
        "    gpu:\n      vars: {pool: training}\n      hosts:\n        n1: {}\n",
    }
    plan = build_plan(RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files))
    local = plan.hostvars["localhost"]
    assert local["cluster_name"] == "lab"
    assert "pool" not in local, "no other group's vars: localhost is in no group"
    assert local["group_names"] == []
