"""The change record of a platform upgrade (docs/upgrade-process.md "Change record"), built from
what the run registered.

Every upgrade leaves: goal and risk; version diff; compatibility sources; canary scope;
validation results; observation window; rollback triggers; what actually failed and the
follow-ups. `build_change_record` makes one field per item from the modules' results
(`inventory.versions`, `compat.check`, `kube.deprecations`, `kube.crd_webhook_check`,
`acceptance.check` per stage) and the engine's `run` variable (stages, gates, rollback
reason); `render_markdown` gives a reviewer one section per item.

Nothing is invented: an input the run never produced (a stage never reached, an observation
that did not happen) is shown as "not reached". "What actually failed" is derived from the
run — its rollback reason, failed stages and hosts, failing acceptance checks with their
deviation, compatibility violations — and each failure gets a follow-up.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

from pydantic import BaseModel, Field

from pitstop.contracts import RunVars

NOT_REACHED: Final = "not reached"
SectionState = Literal["recorded", "not reached"]
Outcome = Literal["succeeded", "rolled back", "failed", "refused in preflight", "incomplete"]

# (field, heading): the items of docs/upgrade-process.md "Change record", in its order.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("goal_and_risk", "Goal and risk"),
    ("version_diff", "Version diff"),
    ("compatibility_sources", "Compatibility sources"),
    ("canary_scope", "Canary scope"),
    ("validation_results", "Validation results"),
    ("observation_window", "Observation window"),
    ("rollback_triggers", "Rollback triggers"),
    ("failures_and_follow_ups", "What actually failed and follow-ups"),
)
_FAILED_STAGE = {"failed", "rolled_back", "aborted"}
DECISIONS: dict[bool | None, str | None] = {True: "approve", False: "reject", None: None}


class GoalAndRisk(BaseModel):
    state: SectionState
    goal: str | None = None
    risk: str | None = None


class VersionChange(BaseModel):
    component: str
    row: str = ""
    current: str
    target: str
    changed: bool
    after: str | None = Field(default=None, description="What the inventory found after the change.")
    validation: str | None = Field(default=None, description="The row's validation state after the change.")


class VersionDiff(BaseModel):
    state: SectionState
    changes: list[VersionChange] = Field(
        default_factory=list, description="Components whose version changes."
    )
    unchanged: int = 0


class Finding(BaseModel):
    check: str
    subject: str
    severity: str = ""
    message: str
    source: str = ""


class CompatibilitySources(BaseModel):
    state: SectionState
    supported: bool | None = None
    sources: list[dict[str, Any]] = Field(
        default_factory=list, description="component, title, source, retrieved."
    )
    violations: list[Finding] = Field(default_factory=list)
    # Unsupported combinations the cluster passes through on the way (accepted windows of risk).
    in_between: list[Finding] = Field(default_factory=list)
    deprecations: list[Finding] = Field(default_factory=list)
    deprecations_state: SectionState = NOT_REACHED
    crd_webhooks: list[Finding] = Field(default_factory=list)
    crd_webhooks_state: SectionState = NOT_REACHED


class CanaryScope(BaseModel):
    state: SectionState
    hosts: list[str] = Field(default_factory=list)
    scope: str | None = None


class StageValidation(BaseModel):
    stage: str
    state: SectionState
    passed: bool | None = None
    on_deviation: str | None = None
    layers: dict[str, str] = Field(default_factory=dict, description="layer -> status.")
    counts: dict[str, int] = Field(default_factory=dict)
    failures: list[str] = Field(default_factory=list)
    deviations: list[dict[str, Any]] = Field(default_factory=list)
    figures: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Checks with a figure: check, status, value, unit, baseline, change.",
    )
    measured: dict[str, float] = Field(default_factory=dict)


class ObservationWindow(BaseModel):
    state: SectionState
    window: str | None = None
    stage: str | None = Field(default=None, description="The stage whose observe phase this was.")
    result: Any = None


class FailuresAndFollowUps(BaseModel):
    failures: list[str] = Field(default_factory=list)
    follow_ups: list[str] = Field(default_factory=list)


class StageOutcome(BaseModel):
    name: str
    status: str
    rollback_reason: str | None = None
    done_hosts: list[str] = Field(default_factory=list)
    failed_hosts: list[str] = Field(default_factory=list)


class Approval(BaseModel):
    gate: str
    status: str
    approver: str | None = None
    approve: bool | None = None
    comment: str = ""
    at: str | None = None


class ChangeRecord(BaseModel):
    run_id: str
    cluster: str
    runbook: str | None = None
    requested_by: str | None = None
    started_at: str | None = None
    outcome: Outcome
    status: str = Field(description="One line: the outcome and why.")
    goal_and_risk: GoalAndRisk
    version_diff: VersionDiff
    compatibility_sources: CompatibilitySources
    canary_scope: CanaryScope
    validation_results: list[StageValidation]
    observation_window: ObservationWindow
    rollback_triggers: list[str]
    failures_and_follow_ups: FailuresAndFollowUps
    stages: list[StageOutcome] = Field(default_factory=list)
    approvals: list[Approval] = Field(default_factory=list)


class RecordInputs(BaseModel):
    """What the record is built from; every dict is a module's registered `data` ({} if not run)."""

    cluster: str
    goal: str | None = None
    risk: str | None = None
    inventory: dict[str, Any] = Field(default_factory=dict)
    inventory_after: dict[str, Any] = Field(default_factory=dict)
    compat: dict[str, Any] = Field(default_factory=dict)
    deprecations: dict[str, Any] = Field(default_factory=dict)
    crd_webhooks: dict[str, Any] = Field(default_factory=dict)
    canary: dict[str, Any] = Field(default_factory=dict)
    acceptance: dict[str, dict[str, Any]] = Field(default_factory=dict)
    observation: dict[str, Any] = Field(default_factory=dict)
    rollback_triggers: list[str] = Field(default_factory=list)
    run: RunVars = Field(default_factory=RunVars)
    follow_ups: list[str] = Field(default_factory=list)
    failure: str | None = Field(default=None, description="What failed, as a rescue saw it.")


# --- building -----------------------------------------------------------------------------------


def sanitize(run_id: str) -> str:
    """A run id as one S3 key segment."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", run_id).strip("-.")
    return cleaned or "run"


def _data(result: dict[str, Any]) -> dict[str, Any]:
    """A registered result (with `data`) or the data itself."""
    inner = result.get("data")
    return inner if isinstance(inner, dict) and ("msg" in result or "changed" in result) else result


def _version_diff(inventory: dict[str, Any], inventory_after: dict[str, Any] | None = None) -> VersionDiff:
    """The planned changes (current -> target) of the inventory taken before the change; with
    the inventory taken after it, what each component actually runs and its validation state."""
    data = _data(inventory)
    rows = [r for r in data.get("rows") or [] if isinstance(r, dict)]
    if not rows and not data.get("diff"):
        return VersionDiff(state=NOT_REACHED)
    if rows:
        changes = [
            VersionChange(
                component=str(r.get("component")),
                row=str(r.get("row") or ""),
                current=str(r.get("current")),
                target=str(r.get("target") or r.get("current")),
                changed=str(r.get("target") or r.get("current")) != str(r.get("current")),
            )
            for r in rows
        ]
    else:
        changes = [
            VersionChange(
                component=str(d.get("component")),
                current=str(d.get("current")),
                target=str(d.get("target")),
                changed=True,
            )
            for d in data.get("diff") or []
        ]
    changed = [c for c in changes if c.changed]
    after_rows = {
        str(r.get("component")): r
        for r in _data(inventory_after or {}).get("rows") or []
        if isinstance(r, dict)
    }
    for change in changed:
        row = after_rows.get(change.component)
        if row is not None:
            change.after = str(row.get("current"))
            change.validation = str(row.get("validation") or "") or None
    return VersionDiff(state="recorded", changes=changed, unchanged=len(changes) - len(changed))


def _findings(result: dict[str, Any], check: str) -> tuple[SectionState, list[Finding]]:
    data = _data(result)
    if not data:
        return NOT_REACHED, []
    out: list[Finding] = []
    for f in data.get("findings") or []:
        subject = "/".join(str(f[k]) for k in ("namespace", "name") if f.get(k)) or str(f.get("object", ""))
        if f.get("kind"):
            subject = f"{f['kind']} {subject}"
        message = str(f.get("message") or "")
        if not message and f.get("apiVersion"):
            message = f"{f['apiVersion']} is removed in {f.get('removed_in')}; use {f.get('replacement')}"
        out.append(
            Finding(
                check=str(f.get("check") or check),
                subject=subject,
                severity=str(f.get("severity") or ""),
                message=message,
                source=str(f.get("source") or f.get("origin") or ""),
            )
        )
    return "recorded", out


def _rule_findings(items: Any, severity: str) -> list[Finding]:
    """compat.check's violations or warnings, as findings of the record."""
    return [
        Finding(
            check=str(v.get("rule", "")),
            subject=str(v.get("component", "")),
            message=str(v.get("message", "")),
            source=str(v.get("source", "")),
            severity=severity,
        )
        for v in items or []
        if isinstance(v, dict)
    ]


def _rule_line(finding: Finding, kind: str = "") -> str:
    cited = "" if finding.source in finding.message else f" — {finding.source}"
    return f"- {kind}`{finding.check}` ({finding.subject}): {_item(finding.message)}{cited}"


def _compatibility(inputs: RecordInputs) -> CompatibilitySources:
    data = _data(inputs.compat)
    dep_state, deprecations = _findings(inputs.deprecations, "deprecations")
    crd_state, crd = _findings(inputs.crd_webhooks, "crd_webhook")
    violations = _rule_findings(data.get("violations"), "block")
    in_between = _rule_findings(data.get("warnings"), "warn")
    return CompatibilitySources(
        state="recorded" if data else NOT_REACHED,
        supported=data.get("supported") if data else None,
        sources=[dict(s) for s in data.get("sources") or []],
        violations=violations,
        in_between=in_between,
        deprecations=deprecations,
        deprecations_state=dep_state,
        crd_webhooks=crd,
        crd_webhooks_state=crd_state,
    )


def _validation(stage: str, result: dict[str, Any]) -> StageValidation:
    data = _data(result)
    if not data or "layers" not in data:
        return StageValidation(stage=stage, state=NOT_REACHED)
    return StageValidation(
        stage=stage,
        state="recorded",
        passed=data.get("passed"),
        on_deviation=data.get("on_deviation"),
        layers={layer: str(body.get("status")) for layer, body in (data.get("layers") or {}).items()},
        counts=dict(data.get("counts") or {}),
        failures=[str(f) for f in data.get("failures") or []],
        deviations=[dict(d) for d in data.get("deviations") or []],
        figures=[
            {
                "check": f"{layer}/{c.get('name')}",
                "status": c.get("status"),
                "value": c.get("value"),
                "unit": c.get("unit", ""),
                "baseline": c.get("baseline"),
                "deviation_pct": c.get("deviation_pct"),
            }
            for layer, body in (data.get("layers") or {}).items()
            for c in body.get("checks") or []
            if c.get("value") is not None
        ],
        measured=dict(data.get("measured") or {}),
    )


def _worst_nodes(result: dict[str, Any], check: str, direction: str) -> list[str]:
    """The node(s) with the worst figure of a check, from the acceptance data."""
    layer, _, name = check.partition("/")
    body = (_data(result).get("layers") or {}).get(layer) or {}
    for c in body.get("checks") or []:
        nodes = c.get("nodes") or {}
        if c.get("name") == name and nodes:
            pick = max if direction == "lower_is_better" else min
            worst = pick(nodes.values())
            return sorted(n for n, v in nodes.items() if v == worst)
    return []


def _stages(run: RunVars) -> list[StageOutcome]:
    return [
        StageOutcome(
            name=s.name,
            status=s.status,
            rollback_reason=s.rollback_reason,
            done_hosts=list(s.done_hosts),
            failed_hosts=list(s.failed_hosts),
        )
        for s in run.stages
    ]


def _approvals(run: RunVars) -> list[Approval]:
    out: list[Approval] = []
    for gate in run.gates:
        if not gate.votes:
            out.append(Approval(gate=gate.id, status=gate.status))
        for vote in gate.votes:
            out.append(
                Approval(
                    gate=gate.id,
                    status=gate.status,
                    approver=vote.approver,
                    approve=vote.approve,
                    comment=vote.comment,
                    at=vote.at,
                )
            )
    return out


def _observation(observation: dict[str, Any], stages: list[StageOutcome], run: RunVars) -> Any:
    """The observation's result: given, or the outcome of the stage it watched (None: not reached)."""
    given = observation.get("result")
    name = observation.get("stage")
    if given not in (None, {}, "") or not name:
        return given
    stage = next((s for s in stages if s.name == name), None)
    if stage is None or stage.status not in ("ok", *_FAILED_STAGE):
        return None  # never reached, or still being observed
    summary = next((s for s in run.stages if s.name == name), None)
    problems = [f"{f.host}: {f.msg}" for f in summary.failures] if summary is not None else []
    if stage.status == "ok":
        return {"failed": False, "msg": f"stage {name} was observed without a failing check"}
    why = stage.rollback_reason or "; ".join(problems) or stage.status.replace("_", " ")
    return {"failed": True, "msg": f"stage {name} {stage.status.replace('_', ' ')}: {why}"}


def _failures(
    inputs: RecordInputs,
    stages: list[StageOutcome],
    compat: CompatibilitySources,
    validations: list[StageValidation],
) -> FailuresAndFollowUps:
    failures: list[str] = [inputs.failure] if inputs.failure else []
    follow: list[str] = []
    reason = inputs.run.rollback_reason
    if reason:
        failures.append(f"the run rolled back: {reason}")
    for stage in stages:
        if stage.status not in _FAILED_STAGE:
            continue
        line = f"stage {stage.name} {stage.status.replace('_', ' ')}"
        if stage.rollback_reason and stage.rollback_reason != reason:
            line += f": {stage.rollback_reason}"
        if stage.failed_hosts:
            line += f" (failed hosts: {', '.join(stage.failed_hosts)})"
        failures.append(line)
        for host in stage.failed_hosts:
            follow.append(f"investigate {host} (failed in stage {stage.name}) before retrying")
    for v in compat.violations:
        cited = "" if v.source in v.message else f" [{v.source}]"
        failures.append(f"compatibility: {v.check} ({v.subject}): {v.message}{cited}")
        follow.append(f"resolve {v.check} for {v.subject} (see {v.source}) before retrying")
    for f in compat.crd_webhooks:
        if f.severity == "block":
            failures.append(f"CRD/webhook check: {f.subject}: {f.message}")
            follow.append(f"fix {f.subject} ({f.check}) before applying the new CRDs")
    for f in compat.deprecations:
        follow.append(f"migrate {f.subject}: {f.message}")
    for validation in validations:
        if validation.state != "recorded":
            continue
        for line in validation.failures:
            failures.append(f"acceptance after {validation.stage}: {line}")
            follow.append(
                f"fix {line.split(':', 1)[0]} (acceptance after {validation.stage}) before retrying"
            )
        for dev in validation.deviations:
            check = str(dev.get("check"))
            # In report mode a deviation does not fail the task: a gate asks for its explanation.
            kind = (
                "deviation reported for explanation" if validation.on_deviation == "report" else "deviation"
            )
            failures.append(f"acceptance after {validation.stage}: {kind} {dev.get('message', check)}")
            nodes = _worst_nodes(
                inputs.acceptance.get(validation.stage, {}), check, str(dev.get("direction", ""))
            )
            where = f" on {', '.join(nodes)}" if nodes else ""
            follow.append(
                f"explain or fix the {check} regression{where} before retrying ({dev.get('message', '')})"
            )
    follow += [f for f in inputs.follow_ups if f not in follow]
    return FailuresAndFollowUps(failures=failures, follow_ups=follow)


def _outcome(
    inputs: RecordInputs, stages: list[StageOutcome], compat: CompatibilitySources, failures: list[str]
) -> tuple[Outcome, str]:
    reason = inputs.run.rollback_reason
    rolled = [s for s in stages if s.status == "rolled_back"]
    if reason or rolled:
        because = reason or rolled[0].rollback_reason or "no reason recorded"
        where = f" (stage {rolled[0].name})" if rolled else ""
        return "rolled back", f"rolled back{where}: {because}"
    # Refused: preflight found a blocker (an unsupported combination, a rescued failure) and no
    # stage after the first one started.
    started_later = any(s.status not in ("pending", "skipped") for s in stages[1:])
    if (compat.supported is False or inputs.failure) and not started_later:
        why = [v.check for v in compat.violations] if compat.supported is False else []
        if not why and inputs.failure:
            why = [inputs.failure.splitlines()[0]]
        return "refused in preflight", "refused in preflight: " + "; ".join(why or ["compatibility"])
    failed = [s for s in stages if s.status in _FAILED_STAGE]
    if failed:
        return "failed", f"stage {failed[0].name} {failed[0].status}"
    if inputs.failure:
        return "failed", inputs.failure
    if not stages and failures:  # built outside the engine: the results are all there is
        return "failed", failures[0]
    pending = [s.name for s in stages if s.status in ("pending", "waiting_gate")]
    if pending:
        return "incomplete", f"not reached: {', '.join(pending)}"
    return "succeeded", "every stage passed"


def build_change_record(inputs: RecordInputs) -> ChangeRecord:
    run = inputs.run
    stages = _stages(run)
    compat = _compatibility(inputs)
    stage_names = [s.name for s in stages]
    order = [n for n in stage_names if n in inputs.acceptance] + [
        n for n in inputs.acceptance if n not in stage_names
    ]
    validations = [_validation(name, inputs.acceptance[name]) for name in order]
    failures = _failures(inputs, stages, compat, validations)
    outcome, status = _outcome(inputs, stages, compat, failures.failures)
    canary_hosts = [str(h) for h in inputs.canary.get("hosts") or []]
    observed = _observation(inputs.observation, stages, run)
    return ChangeRecord(
        run_id=run.id or "unknown run",
        cluster=inputs.cluster,
        runbook=run.runbook,
        requested_by=run.requested_by,
        started_at=run.started_at,
        outcome=outcome,
        status=status,
        goal_and_risk=GoalAndRisk(
            state="recorded" if inputs.goal or inputs.risk else NOT_REACHED,
            goal=inputs.goal,
            risk=inputs.risk,
        ),
        version_diff=_version_diff(inputs.inventory, inputs.inventory_after),
        compatibility_sources=compat,
        canary_scope=CanaryScope(
            state="recorded" if canary_hosts or inputs.canary.get("scope") else NOT_REACHED,
            hosts=canary_hosts,
            scope=inputs.canary.get("scope"),
        ),
        validation_results=validations,
        observation_window=ObservationWindow(
            state="recorded" if observed not in (None, {}, "") else NOT_REACHED,
            window=inputs.observation.get("window"),
            stage=inputs.observation.get("stage"),
            result=observed if observed not in (None, {}, "") else None,
        ),
        rollback_triggers=list(inputs.rollback_triggers),
        failures_and_follow_ups=failures,
        stages=stages,
        approvals=_approvals(run),
    )


# --- Markdown -----------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "—"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _item(text: str) -> str:
    """A list item's text: continuation lines indented so the list stays one item."""
    return text.strip().replace("\n", "\n  ")


def _stage_status(status: str) -> str:
    return NOT_REACHED if status == "pending" else status


def _figure(value: Any, unit: str) -> str:
    if value is None:
        return "—"
    return f"{value:g} {unit}".strip() if isinstance(value, int | float) else _cell(value)


def _change(pct: Any, baseline: Any) -> str:
    if baseline is None:
        return "no baseline"
    return "new" if pct is None else f"{pct:+.1f}%"


def _observed(result: Any) -> list[str]:
    if isinstance(result, dict):
        if "msg" in result or "failed" in result:
            verdict = "FAILED" if result.get("failed") else "ok"
            return [f"- {verdict}: {_cell(result.get('msg'))}"]
        return [f"- {k}: {_cell(v)}" for k, v in result.items()]
    return [f"- {_cell(result)}"]


def render_markdown(record: ChangeRecord) -> str:
    """The record for a reviewer: one section per item, in the order of SECTIONS."""
    r = record
    lines = [
        f"# Change record — {r.cluster}: {r.outcome.upper()}",
        "",
        f"{r.status}.",
        "",
        "| | |",
        "|---|---|",
        f"| Run | `{r.run_id}` |",
        f"| Runbook | {_cell(r.runbook)} |",
        f"| Requested by | {_cell(r.requested_by)} |",
        f"| Started | {_cell(r.started_at)} |",
    ]
    g = r.goal_and_risk
    lines += ["", "## Goal and risk", ""]
    lines += [f"- Goal: {_cell(g.goal or NOT_REACHED)}", f"- Risk: {_cell(g.risk or NOT_REACHED)}"]
    lines += _md_version_diff(r.version_diff)
    lines += _md_compatibility(r.compatibility_sources)
    lines += ["", "## Canary scope", ""]
    if r.canary_scope.state != "recorded":
        lines.append(f"_{NOT_REACHED}: no canary stage recorded its hosts._")
    else:
        lines += [
            f"- Hosts: {', '.join(r.canary_scope.hosts) or '—'}",
            f"- Scope: {_cell(r.canary_scope.scope)}",
        ]
    lines += _md_validation(r.validation_results)
    if lines[-1] != "":
        lines.append("")
    lines += _md_observation(r.observation_window)
    lines += ["", "## Rollback triggers", ""]
    lines += [f"- {t}" for t in r.rollback_triggers] or ["_none declared_"]
    failed = r.failures_and_follow_ups
    lines += ["", "## What actually failed and follow-ups", ""]
    lines += [f"- {_item(x)}" for x in failed.failures] or ["Nothing failed."]
    lines += ["", "Follow-ups:", ""]
    lines += [f"- [ ] {_item(x)}" for x in failed.follow_ups] or ["- none"]
    lines += _md_stages_and_approvals(r)
    return "\n".join(lines) + "\n"


def _md_version_diff(diff: VersionDiff) -> list[str]:
    lines = ["", "## Version diff", ""]
    if diff.state != "recorded":
        lines.append(f"_{NOT_REACHED}: no version inventory was taken._")
    elif not diff.changes:
        lines.append(f"No component changes version ({diff.unchanged} unchanged).")
    else:
        after = any(c.after is not None for c in diff.changes)
        if after:
            lines += [
                "| component | version inventory row | current | target | after | validation |",
                "|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {c.component} | {_cell(c.row)} | {_cell(c.current)} | {_cell(c.target)} "
                f"| {_cell(c.after or NOT_REACHED)} | {_cell(c.validation or NOT_REACHED)} |"
                for c in diff.changes
            ]
        else:
            lines += ["| component | version inventory row | current | target |", "|---|---|---|---|"]
            lines += [
                f"| {c.component} | {_cell(c.row)} | {_cell(c.current)} | {_cell(c.target)} |"
                for c in diff.changes
            ]
        lines += ["", f"{diff.unchanged} other components unchanged."]
    return lines


def _md_compatibility(c: CompatibilitySources) -> list[str]:
    lines = ["", "## Compatibility sources", ""]
    if c.state != "recorded":
        lines.append(f"_{NOT_REACHED}: the compatibility check did not run._")
    else:
        verdict = {True: "supported", False: "NOT supported", None: "unknown"}[c.supported]
        lines += [f"Combination: **{verdict}**.", ""]
        if c.sources:
            lines += ["| component | source | retrieved |", "|---|---|---|"]
            lines += [
                f"| {_cell(s.get('component'))} "
                f"| [{_cell(s.get('title') or s.get('source'))}]({s.get('source', '')}) "
                f"| {_cell(s.get('retrieved'))} |"
                for s in c.sources
            ]
        lines += [_rule_line(v, "violation ") for v in c.violations]
        if c.in_between:
            lines += ["", "Unsupported on the way (accepted for the length of the upgrade):"]
            lines += [_rule_line(v) for v in c.in_between]
    lines.append("")
    if c.deprecations_state != "recorded":
        lines.append(f"- Deprecated APIs: {NOT_REACHED}")
    else:
        lines.append(f"- Deprecated APIs: {len(c.deprecations)} in use")
        lines += [f"  - {f.subject}: {f.message}" for f in c.deprecations]
    if c.crd_webhooks_state != "recorded":
        lines.append(f"- CRDs and webhooks: {NOT_REACHED}")
    else:
        lines.append(f"- CRDs and webhooks: {len(c.crd_webhooks)} finding(s)")
        lines += [f"  - [{f.severity}] {f.subject}: {f.message}" for f in c.crd_webhooks]
    return lines


def _md_validation(results: list[StageValidation]) -> list[str]:
    lines = ["", "## Validation results", ""]
    if not results:
        lines.append(f"_{NOT_REACHED}: no acceptance check ran._")
    for val in results:
        if val.state != "recorded":
            lines += [f"### After {val.stage}: {NOT_REACHED}", ""]
            continue
        verdict = "passed" if val.passed else "deviations to explain" if not val.failures else "FAILED"
        if verdict == "deviations to explain" and val.on_deviation != "report":
            verdict = "FAILED"
        counts = ", ".join(f"{n} {s}" for s, n in val.counts.items() if n)
        lines += [f"### After {val.stage}: {verdict}", "", f"{counts}.", ""]
        lines += ["| layer | status |", "|---|---|"] + [
            f"| {layer} | {status} |" for layer, status in val.layers.items()
        ]
        if val.figures:
            lines += ["", "| check | status | value | baseline | change |", "|---|---|---|---|---|"]
            lines += [
                f"| {x['check']} | {x['status']} | {_figure(x['value'], x['unit'])} "
                f"| {_figure(x['baseline'], x['unit'])} | {_change(x['deviation_pct'], x['baseline'])} |"
                for x in val.figures
            ]
        if val.failures or val.deviations:
            lines.append("")
        lines += [f"- failed: {f}" for f in val.failures]
        lines += [f"- deviation: {d.get('message')}" for d in val.deviations]
        lines.append("")
    return lines


def _md_observation(o: ObservationWindow) -> list[str]:
    lines = ["## Observation window", ""]
    if o.state != "recorded":
        window = f" ({o.window})" if o.window else ""
        lines.append(f"_{NOT_REACHED}{window}: the observation window did not run._")
    else:
        watched = f" (stage {o.stage})" if o.stage else ""
        lines += [f"- Window: {_cell(o.window)}{watched}", *_observed(o.result)]
    return lines


def _md_stages_and_approvals(r: ChangeRecord) -> list[str]:
    lines = ["", "## Stages and approvals", ""]
    if r.stages:
        lines += ["| stage | status | done | failed | rollback reason |", "|---|---|---|---|---|"]
        lines += [
            f"| {s.name} | {_stage_status(s.status)} | {len(s.done_hosts)} "
            f"| {_cell(', '.join(s.failed_hosts))} | {_cell(s.rollback_reason)} |"
            for s in r.stages
        ]
    else:
        lines.append(f"_{NOT_REACHED}: the run recorded no stages._")
    if r.approvals:
        lines += ["", "| gate | status | approver | decision | comment | at |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {a.gate} | {a.status} | {_cell(a.approver)} | "
            f"{_cell(DECISIONS[a.approve])} | {_cell(a.comment)} | {_cell(a.at)} |"
            for a in r.approvals
        ]
    return lines
