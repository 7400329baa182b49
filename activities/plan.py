"""`plan.load`: runbook + inventory -> a validated, resolved Plan with content hashes.

Everything the run does afterwards is driven by this Plan as recorded in history, so the
run is deterministic on replay and auditable: which hosts, in which stages, with which
variables, gates and module settings.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

from temporalio import activity

from activities.kube.inventory import ClusterUnreachable, resolve_dynamic_groups
from activities.plan_waves import HostRenderer, plan_waves
from pitstop.approvals import GateRule
from pitstop.contracts import ModuleExec, Plan, PlanHashes, PlannedStage, RetryExec, RunRequest
from pitstop.errors import ErrorType, make_error
from pitstop.modules import get_module
from pitstop.policy.errors import policy_violation
from pitstop.policy.load import current_policy
from pitstop.runbook import (
    Inventory,
    PatternError,
    Runbook,
    RunbookError,
    TemplateError,
    load_inventory,
    load_runbook,
    render,
)
from pitstop.runbook.durations import parse_duration
from pitstop.runbook.eviction import bypass_notes
from pitstop.runbook.models import Observe, Stage
from pitstop.slack.config import run_default_channel
from workflows.waves import gate_template

LOCALHOST = "localhost"
# PlannedStage fields that follow from the runbook and vars (hashed as such), not from the hosts.
_DERIVED_FROM_RUNBOOK = {"warnings", "observe_seconds", "wave_observe_seconds", "coverage"}


def runbook_dir() -> Path:
    return Path(os.environ.get("PITSTOP_RUNBOOK_DIR", "runbooks"))


def _source(base: Path, name: str, what: str) -> Path:
    """`name` under `base` (the runbook directory or the run's bundle), refused when it leads
    outside (absolute, `..`, a symlink): a request names runbooks, it does not read worker files."""
    root = Path(os.path.realpath(base))
    path = Path(os.path.realpath(root / name))
    if not (path == root or root in path.parents):
        where = "the run's bundle" if base != runbook_dir() else f"the runbook directory {root}"
        raise policy_violation(
            f"plan.load: {what} {name!r} is outside {where}; name it relative to that directory", fix=None
        )
    return base / name  # as given: error messages show the path the way the request named it


def _check_runbook_source(request: RunRequest) -> None:
    """A worker whose policy runs only its own runbooks refuses a request that carries one."""
    if not request.files:
        return
    policy = current_policy()
    if not policy.runbooks_from_requests:
        raise policy_violation(
            f"plan.load: this worker runs only runbooks from its runbook directory "
            f"{policy.runbook_dir.path} (policy runbooks.from_requests: false, "
            f"{policy.runbooks_origin}); the request carried its own ({', '.join(sorted(request.files))}). "
            "Start the run by naming a runbook in that directory (Temporal UI, or `pitstop run "
            "--on-worker NAME`)",
            fix=None,
        )


@activity.defn(name="plan.load")
async def load_plan(request: RunRequest) -> Plan:
    queue = activity.info().task_queue
    try:
        # In a thread: dynamic inventory groups list the cluster's nodes with a blocking client.
        plan = await asyncio.to_thread(build_plan, request, queue)
    except ClusterUnreachable as exc:
        raise make_error(ErrorType.PRECONDITION_FAILED, str(exc)) from None
    except (RunbookError, PatternError, TemplateError, ValueError) as exc:
        raise make_error(ErrorType.INVALID_ARGS, str(exc)) from None
    # Read here, once, so that the run's Slack channel is in history, not in a replay's env.
    return plan.model_copy(update={"slack_channel": run_default_channel()})


def build_plan(
    request: RunRequest, default_queue: str = "pitstop", inventory_override: Inventory | None = None
) -> Plan:
    _check_runbook_source(request)
    with _sources(request) as (base, shown):
        try:
            inventory = resolve_dynamic_groups(inventory_override or _inventory(request, base))
            runbook = load_runbook(
                _source(base, request.runbook, "runbook"),
                inventory,
                confine_to=Path(os.path.realpath(base)),
            )
            if shown:
                runbook = Runbook.model_validate(_strip_prefix(runbook.model_dump(), shown))
        except RunbookError as exc:
            raise RunbookError(
                exc.message,
                path=exc.path.replace(shown, ""),
                line=exc.line,
                column=exc.column,
                key=exc.key,
                suggestion=exc.suggestion,
            ) from None
    return plan_from(runbook, inventory, request, default_queue)


def plan_from(runbook: Runbook, inventory: Inventory, request: RunRequest, default_queue: str) -> Plan:
    limit = set(inventory.resolve(request.limit)) if request.limit else None
    hostvars: dict[str, dict[str, Any]] = {}
    stages: list[PlannedStage] = []
    notes = bypass_notes(runbook)
    for stage in runbook.stages:
        hosts = [h for h in inventory.stage_hosts(stage.hosts) if limit is None or h in limit]
        domains: dict[str, str] = {}
        for host in hosts:
            hv = hostvars.setdefault(host, _hostvars(inventory, host))
            domains[host] = _domain(stage.rolling.domain if stage.rolling else None, hv, runbook, stage.vars)
        warnings = [f"stage '{stage.name}': {notes[stage.name]}"] if stage.name in notes else []
        planned = PlannedStage(
            name=stage.name,
            hosts=hosts,
            domains=domains,
            warnings=warnings,
            observe_seconds=_observe_seconds(stage.observe, stage, runbook, request.vars),
        )
        if stage.waves is not None:
            render_host = _host_renderer(inventory, hostvars, runbook)
            wave_window = _observe_seconds(stage.waves.observe, stage, runbook, request.vars)
            planned = plan_waves(
                planned, stage, stages, render_host, request.vars, wave_window, limited=bool(request.limit)
            )
        stages.append(planned)
    hostvars.setdefault(LOCALHOST, _hostvars(inventory, LOCALHOST))
    cluster = inventory.cluster
    plan_body = {
        "runbook": _canonical(runbook.model_dump(mode="json")),
        # Warnings and the observe window derive from the runbook and vars (hashed): not hosts.
        "stages": [_hosts_part(s) for s in stages],
    }
    hashes = PlanHashes(
        runbook=_sha(plan_body["runbook"]),
        inventory=_sha({h: hostvars[h] for h in sorted(hostvars)} | {"cluster": _dump(cluster)}),
        hosts=_sha(plan_body["stages"]),
        content=_sha(
            {
                **plan_body,
                "hostvars": hostvars,
                "vars": request.vars,
                "limit": request.limit,
                "tags": request.tags,
                "skip_tags": request.skip_tags,
            }
        ),
    )
    # Module activities go to the cluster's own queue when the inventory names one (a worker
    # next to that cluster), otherwise to the queue this run is served on.
    task_queue = cluster.task_queue if cluster and cluster.task_queue else default_queue
    return Plan(
        runbook=runbook,
        stages=stages,
        hostvars=hostvars,
        gates=_gates(runbook),
        # A local activity runs in the worker running the workflow: only when that worker
        # also serves the run's activities. Decided here and recorded with the plan, so a
        # replay (on whatever queue) makes the same choice.
        modules=_modules(runbook, local=task_queue == default_queue),
        cluster=cluster,
        task_queue=task_queue,
        extra_vars=request.vars,
        check_mode=request.check_mode,
        tags=request.tags,
        skip_tags=request.skip_tags,
        hashes=hashes,
    )


def _hosts_part(stage: PlannedStage) -> dict[str, Any]:
    """What of a planned stage follows from the hosts (hashed as `hosts`); a stage without
    waves hashes as it did before waves existed."""
    exclude = set(_DERIVED_FROM_RUNBOOK) | (set() if stage.waves else {"waves", "wave_of"})
    return stage.model_dump(mode="json", exclude=exclude)


def _hostvars(inventory: Inventory, host: str) -> dict[str, Any]:
    if host in inventory.hosts:
        return inventory.hostvars(host)
    # Ansible's implicit localhost is in no group, "however it will use vars from host_vars and
    # from the 'all' group" (docs: inventory/implicit_localhost).
    shared = dict(inventory.groups["all"].vars) if "all" in inventory.groups else {}
    return {**shared, "inventory_hostname": host, "group_names": []}


def _domain(
    expression: str | None, hostvars: dict[str, Any], runbook: Runbook, stage_vars: dict[str, Any]
) -> str:
    if expression is None:
        return str(hostvars.get("failure_domain", ""))
    try:
        value = render(expression, {**hostvars, **runbook.vars, **stage_vars})
    except TemplateError as exc:
        raise ValueError(f"rolling.domain for host {hostvars.get('inventory_hostname')}: {exc}") from None
    return str(value)


def _host_renderer(
    inventory: Inventory, hostvars: dict[str, dict[str, Any]], runbook: Runbook
) -> HostRenderer:
    def render_host(expression: str, host: str, stage: Stage, extra: dict[str, Any]) -> str:
        hv = hostvars.setdefault(host, _hostvars(inventory, host))
        return str(render(expression, {**hv, **runbook.vars, **stage.vars, **extra}))

    return render_host


def _observe_seconds(
    observe: Observe | None, stage: Stage, runbook: Runbook, extra_vars: dict[str, Any]
) -> float | None:
    """An observe window in seconds; a templated one rendered with the play's vars (the
    runbook's, the stage's, then `-e`), refused with the stage named when it is not a duration."""
    if observe is None:
        return None
    value = observe.duration
    if isinstance(value, float | int):
        return float(value)
    try:
        rendered = render(value, {**runbook.vars, **stage.vars, **extra_vars})
        return parse_duration(rendered)
    except (TemplateError, ValueError) as exc:
        raise ValueError(f"observe.duration of stage {stage.name!r} ({value}): {exc}") from None


def _gates(runbook: Runbook) -> dict[str, GateRule]:
    gates: dict[str, GateRule] = {}

    def rule(gate_id: str, gate: Any) -> GateRule:
        return GateRule(
            gate_id=gate_id,
            prompt=gate.prompt or "",
            approvers=sorted(runbook.expand_approvers(gate.approvers)),
            quorum=gate.quorum,
            four_eyes=gate.four_eyes,
            require_verified=gate.require_verified,
            require_comment=gate.require_comment,
            timeout_seconds=gate.timeout,
            on_timeout=gate.on_timeout,
            escalate_to=sorted(runbook.expand_approvers(gate.escalate_to)),
            slack_channel=gate.slack_channel,
        )

    for stage in runbook.stages:
        wave_gate = stage.waves.gate if stage.waves else None
        if wave_gate is not None:
            gates[gate_template(stage.name)] = rule(gate_template(stage.name), wave_gate)
        if stage.gate is not None:
            if stage.gate.before:
                gates[f"{stage.name}:before"] = rule(f"{stage.name}:before", stage.gate)
            if stage.gate.after:
                gates[f"{stage.name}:after"] = rule(f"{stage.name}:after", stage.gate)
    for task in runbook.all_tasks():
        if task.gate is not None:
            template = task.gate.name or task.task_id
            if template in gates:
                raise ValueError(
                    f"gate name {template!r} ({task.source.path}:{task.source.line}) is already the id of "
                    "another gate of this runbook; name it differently"
                )
            gates[template] = rule(template, task.gate)
    return gates


def _modules(runbook: Runbook, local: bool = True) -> dict[str, ModuleExec]:
    out: dict[str, ModuleExec] = {}
    for task in runbook.all_tasks():
        if task.module is None or task.module in out:
            continue
        spec = get_module(task.module)
        if spec is None:  # the loader already refuses unknown modules
            raise ValueError(f"unknown module {task.module!r}")
        out[task.module] = ModuleExec(
            module=spec.name,
            activity=spec.activity_name,
            pure=spec.pure,
            supports_check_mode=spec.supports_check_mode,
            start_to_close_s=spec.start_to_close.total_seconds(),
            heartbeat_s=spec.heartbeat_timeout.total_seconds() if spec.heartbeat_timeout else None,
            retry=RetryExec(
                maximum_attempts=spec.retry.maximum_attempts,
                initial_interval_s=spec.retry.initial_interval.total_seconds(),
                backoff_coefficient=spec.retry.backoff_coefficient,
                maximum_interval_s=spec.retry.maximum_interval.total_seconds(),
                non_retryable_error_types=list(spec.retry.non_retryable_error_types),
            ),
            local=spec.local if local else "never",
        )
    return out


def _inventory(request: RunRequest, base: Path) -> Inventory:
    if request.inventory is None:
        return Inventory(hosts={}, groups={})
    return load_inventory(_source(base, request.inventory, "inventory"))


@contextmanager
def _sources(request: RunRequest) -> Iterator[tuple[Path, str]]:
    """The directory the request's paths are relative to: a bundle written to a scratch
    directory, or the worker's runbook directory."""
    if not request.files:
        yield runbook_dir(), ""
        return
    with tempfile.TemporaryDirectory(prefix="pitstop-plan-") as tmp:
        root = Path(tmp)
        for name, text in request.files.items():
            rel = PurePosixPath(name)
            if rel.is_absolute() or ".." in rel.parts:
                raise ValueError(f"bundle path {name!r} must be relative and stay inside the bundle")
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        yield root, f"{root}/"


def _canonical(value: Any) -> Any:
    """The runbook without source positions: moving a comment does not change the plan."""
    if isinstance(value, dict):
        # A stage without waves hashes as it did before waves existed.
        return {
            k: _canonical(v)
            for k, v in value.items()
            if k not in ("source", "path") and not (k == "waves" and v is None)
        }
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _strip_prefix(value: Any, prefix: str) -> Any:
    """Show bundle paths as the operator wrote them, not as the scratch directory holds them."""
    if isinstance(value, dict):
        return {k: _strip_prefix(v, prefix) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_prefix(v, prefix) for v in value]
    if isinstance(value, str) and value.startswith(prefix):
        return value[len(prefix) :]
    return value


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json") if value is not None else None


def _sha(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
