"""The variables a run gives its hosts: host input, `hostvars`, `groups`, `run`, `stage`, and the
context `rollback_when` is evaluated in.

Run-level precedence is `pitstop.runbook.scope`'s (the same `VarScope` the host workflow
stacks its task layers on, so that the order is written once): `groups` (unless a layer sets
it) < the host's inventory variables < the runbook's `vars` < the stage's `vars` < facts the
host set in earlier stages < the request's extra vars < the engine's `run` and `stage`.

Pure: no Temporal calls (the run's id is passed in), no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from pitstop.contracts import (
    FailureVars,
    GateState,
    GateVars,
    HostInput,
    Plan,
    Requester,
    RunProgress,
    RunVars,
    StageVars,
    VoteVars,
)
from pitstop.runbook.models import Stage, Task
from pitstop.runbook.scope import VarScope
from pitstop.runbook.templating import TemplateError, evaluate_bool
from workflows import run_fleet
from workflows.rollout import failure_budget_exceeded
from workflows.run_fleet import LOCALHOST, FleetCache
from workflows.run_stages import StageRun


def run_scope(
    *,
    inventory: Mapping[str, Any],
    play: Mapping[str, Any],
    stage: Mapping[str, Any],
    facts: Mapping[str, Any],
    extra: Mapping[str, Any],
    groups: Mapping[str, Any] | None = None,
    magic: Mapping[str, Any] | None = None,
) -> VarScope:
    """The run-level layers as one `VarScope` (named arguments, placed by their precedence)."""
    layers: dict[str, Mapping[str, Any]] = {
        "inventory": inventory,
        "play": play,
        "stage": stage,
        "stage_facts": facts,
        "extra_vars": extra,
    }
    if groups is not None:
        layers["groups"] = {"groups": groups}
    if magic is not None:
        layers["run_magic"] = magic
    return VarScope(layers)


def run_vars(
    *,
    run_id: str,
    runbook: str,
    requested_by: str,
    requester: Requester,
    check_mode: bool,
    progress: RunProgress | None,
    stages: Sequence[StageRun],
) -> RunVars:
    """The `run` variable: who asked, and (once planned) every stage's outcome and gate's votes."""
    return RunVars(
        id=run_id,
        runbook=progress.plan.runbook.name if progress else runbook,
        cluster=progress.plan.cluster.name if progress and progress.plan.cluster else None,
        requested_by=requested_by,
        requester_verified=requester.verified,
        requester_source=requester.subject,
        check_mode=check_mode,
        started_at=progress.started_at.isoformat() if progress else None,
        rollback_reason=progress.rollback_reason if progress else None,
        stages=[stage_outcome(s) for s in stages],
        gates=[gate_outcome(gate_id, g) for gate_id, g in progress.gates.items()] if progress else [],
    )


def stage_outcome(stage: StageRun) -> StageVars:
    status = stage.status
    return StageVars(
        name=status.name,
        status=status.status,
        rollback_reason=status.rollback_reason,
        done_hosts=[h for h, st in status.hosts.items() if st == "ok"],
        failed_hosts=[h for h, st in status.hosts.items() if st == "failed"],
        failures=[
            FailureVars(host=h.host, task=h.failed_task, msg=h.msg[:500]) for h in stage.failed_results()
        ],
    )


def gate_outcome(gate_id: str, gate: GateState) -> GateVars:
    return GateVars(
        id=gate_id,
        status=gate.status,
        closed_reason=gate.closed_reason,
        votes=[
            VoteVars(
                approver=v.approver,
                approve=v.approve,
                comment=v.comment,
                source=v.source,
                verified=v.verified,
                at=v.at.isoformat(),
            )
            for v in gate.votes
        ],
    )


def stage_vars(stage: StageRun | None, fleet_keys: Collection[str] | None = None) -> dict[str, Any]:
    """The `stage` variable: the stage's hosts and how they fared so far ({} outside a stage).
    `fleet_keys`: which of the keys that grow with the fleet to build (None: all)."""
    if stage is None:
        return {}
    progress = stage.progress
    heavy: dict[str, Callable[[], Any]] = {
        "hosts": lambda: list(stage.plan.hosts),
        "done_hosts": lambda: list(progress.done) if progress else stage.hosts_with("ok"),
        "failed_hosts": lambda: list(progress.failed) if progress else stage.hosts_with("failed"),
        "skipped_hosts": lambda: list(progress.skipped) if progress else stage.hosts_with("skipped"),
        "results": lambda: {h.host: {"status": h.status, "msg": h.msg} for h in stage.report.hosts},
        "wave_hosts": lambda: stage.plan.wave_hosts(wave) if wave else [],
    }
    out: dict[str, Any] = {"name": stage.name}
    waves = stage.plan.waves
    wave = waves[progress.wave_index] if progress and progress.wave_index < len(waves) else None
    if wave is not None and progress is not None:
        # The wave in progress (a stage with `waves`): its name, number and how many there are.
        out["wave"] = {"name": wave, "number": progress.wave_index + 1, "count": len(waves)}
    for key, build in heavy.items():
        if fleet_keys is None or key in fleet_keys:
            out[key] = build()
    return out


def host_input(
    *,
    run_id: str,
    plan: Plan,
    stage: StageRun | None,
    host: str,
    tasks: list[Task],
    host_facts: Mapping[str, Mapping[str, Any]],
    run_var: Mapping[str, Any],
    requested_by: str,
    stage_handlers: bool,
    fleet: FleetCache,
    select_tags: bool = True,
) -> HostInput:
    """The input of one host workflow: `tasks` on `host`, within `stage` (None: run-level).

    `run_var` is `run.as_template_var()`, built once per launch batch. Of the fleet the input
    carries only what the tasks can name (`workflows/run_fleet.py`)."""
    rule: Stage | None = stage.rule if stage is not None else None
    handlers = [*(rule.handlers if rule is not None and stage_handlers else []), *plan.runbook.handlers]
    inventory = plan.hostvars.get(host, {"inventory_hostname": host, "group_names": []})
    facts = host_facts.get(host, {})
    stage_layer = rule.vars if rule is not None else {}
    scope_name = rule.name if rule is not None else "run"
    refs = fleet.refs(scope_name, tasks, handlers, stage_layer)
    magic = {
        "run": run_fleet.trimmed(run_var, refs, "run", run_fleet.RUN_FLEET_KEYS),
        "stage": stage_vars(stage, run_fleet.fleet_keys_read(refs, "stage", run_fleet.STAGE_FLEET_KEYS)),
    }
    merged = dict(
        run_scope(
            inventory=inventory,
            play=plan.runbook.vars,
            stage=stage_layer,
            facts=facts,
            extra=plan.extra_vars,
            groups=run_fleet.groups_view(fleet.groups(), refs),
            magic=magic,
        ).merged()
    )
    if rule is not None and rule.tags:
        # A stage's tags apply to every task in it, as a play's do in Ansible.
        tasks = [t.model_copy(update={"tags": [*rule.tags, *t.tags]}) for t in tasks]
    return HostInput(
        run_workflow_id=run_id,
        run_id=run_id,
        stage=rule.name if rule is not None else "run",
        host=host,
        tasks=tasks,
        handlers=handlers,
        vars=merged,
        hostvars=run_fleet.hostvars_view(fleet, host, refs, host_facts.get(LOCALHOST)),
        modules=plan.modules,
        task_queue=plan.task_queue,
        cluster=plan.cluster,
        check_mode=plan.check_mode,
        # Compensations and observe checks run whole, whatever --tags chose.
        tags=plan.tags if select_tags else [],
        skip_tags=plan.skip_tags if select_tags else [],
        approvers=plan.runbook.approvers,
        requested_by=requested_by,
    )


def rollback_trigger(
    *,
    stage: StageRun,
    rollback_request: str | None,
    play: Mapping[str, Any],
    extra: Mapping[str, Any],
    run: Callable[[], RunVars],
) -> str | None:
    """Why the stage must roll back now (an operator's request, its failure budget, a
    `rollback_when` expression that holds), or None. `run` builds the `run` variable, which
    costs O(stages + gates): asked on every turn of the stage loop, it is built only for a
    stage that has `rollback_when` expressions to evaluate."""
    if rollback_request is not None:
        return rollback_request
    rule = stage.rule
    failed = stage.current().failed
    total = len(stage.plan.hosts)
    if rule.any_errors_fatal and failed:
        return f"any_errors_fatal: {failed[0]} failed in stage {rule.name!r}"
    if failure_budget_exceeded(len(failed), total, rule.max_fail_percentage):
        return (
            f"failure budget exceeded in stage {rule.name!r}: {len(failed)} of {total} hosts failed "
            f"(max_fail_percentage {rule.max_fail_percentage:g})"
        )
    if not rule.rollback_when:
        return None
    # No host's inventory or facts here: the expressions speak of the stage and the run.
    ctx = run_scope(
        inventory={},
        play=play,
        stage=rule.vars,
        facts={},
        extra=extra,
        magic={"stage": stage_vars(stage), "run": run().as_template_var()},
    ).merged()
    for expression in rule.rollback_when:
        try:
            if evaluate_bool(expression, ctx):
                return f"rollback_when held in stage {rule.name!r}: {expression}" + stage.failures_said()
        except TemplateError as exc:
            return f"rollback_when could not be evaluated ({exc}); rolling back to be safe"
    return None
