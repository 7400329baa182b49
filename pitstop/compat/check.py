"""Is this upgrade plan a supported one? Skew rules and vendor matrices over current -> target.

Pure: the caller hands in the versions (as `inventory.versions` reports them), the loaded
skew policy and matrices; `evaluate` returns every violation with its rule id and source, and
every rule it checked. "Installable is not supported": a combination a vendor only lists as
installable is a violation like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pitstop.compat.matrix import ABSENT, NO_MATRIX_SOURCE, Matrix, matrix_rule, support_for
from pitstop.compat.skew import ClusterVersions, SkewPolicy, check_upgrade
from pitstop.compat.versions import try_parse_version

Status = Literal["ok", "violated", "not-checked"]
ALL_NODES = "(all nodes)"


class SkewFacts(BaseModel):
    """The `skew` block of `inventory.versions`: what each control-plane piece and node runs."""

    model_config = ConfigDict(extra="ignore")

    apiserver: str | list[str] | None = None
    controller_manager: str | list[str] | None = None
    scheduler: str | list[str] | None = None
    cloud_controller_manager: str | list[str] | None = None
    kubelets: dict[str, str] = Field(default_factory=dict)
    kube_proxies: dict[str, str] = Field(default_factory=dict)
    kubectl: str | None = None

    @field_validator("kubelets", "kube_proxies", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        return {} if value is None else value


class Violation(BaseModel):
    rule: str
    source: str
    component: str
    message: str


class Checked(BaseModel):
    rule: str
    source: str
    component: str
    status: Status


class SourceRef(BaseModel):
    component: str
    title: str
    source: str
    retrieved: str


class CompatVerdict(BaseModel):
    """What `compat.check` reports (its `data`)."""

    supported: bool
    violations: list[Violation] = Field(default_factory=list)
    # Unsupported combinations the cluster passes through between phases, when the caller
    # accepts them for the length of the upgrade (`in_between: warn`): the change record's risk.
    warnings: list[Violation] = Field(default_factory=list)
    checked: list[Checked] = Field(default_factory=list)
    sources: list[SourceRef] = Field(default_factory=list)


def _usable(text: str | None) -> bool:
    return text is not None and text.strip().lower() not in ABSENT and try_parse_version(text) is not None


def _as_list(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    values = [value] if isinstance(value, str) else value
    return [text for text in values if _usable(text)]


def _versions_now(
    current: Mapping[str, str], kubelets: Mapping[str, str], skew: SkewFacts | None
) -> ClusterVersions | None:
    facts = skew or SkewFacts()
    apiservers = _as_list(facts.apiserver) or _as_list(current.get("kubernetes"))
    if not apiservers:
        return None
    kubelets_now = dict(kubelets) or dict(facts.kubelets)
    if not kubelets_now and _usable(current.get("kubelet")):
        kubelets_now = {ALL_NODES: current["kubelet"]}
    kubectl = facts.kubectl or current.get("kubectl")
    return ClusterVersions(
        apiservers=apiservers,
        controller_managers=_as_list(facts.controller_manager)
        or _as_list(current.get("kube-controller-manager")),
        schedulers=_as_list(facts.scheduler) or _as_list(current.get("kube-scheduler")),
        cloud_controller_managers=_as_list(facts.cloud_controller_manager),
        kubelets={node: text for node, text in kubelets_now.items() if _usable(text)},
        kube_proxies={node: text for node, text in facts.kube_proxies.items() if _usable(text)},
        kubectl=kubectl if _usable(kubectl) else None,
    )


def _versions_target(
    now: ClusterVersions, current: Mapping[str, str], target: Mapping[str, str]
) -> ClusterVersions:
    def change(key: str) -> str | None:
        # Inventories repeat unchanged components in the target; only a different version moves.
        text = target.get(key)
        return text if _usable(text) and text != current.get(key) else None

    def moved(key: str, old: list[str]) -> list[str]:
        # kubeadm moves kube-controller-manager and kube-scheduler with kube-apiserver: unless
        # the target names them, they follow the `kubernetes` target.
        text = change(key) or (change("kubernetes") if old else None)
        return [text] if text else old

    apiserver, kubelet, kubectl = change("kubernetes"), change("kubelet"), change("kubectl")
    return ClusterVersions(
        apiservers=[apiserver] if apiserver else now.apiservers,
        controller_managers=moved("kube-controller-manager", now.controller_managers),
        schedulers=moved("kube-scheduler", now.schedulers),
        cloud_controller_managers=now.cloud_controller_managers,
        kubelets={node: kubelet for node in now.kubelets} if kubelet else now.kubelets,
        kube_proxies={node: kubelet for node in now.kube_proxies} if kubelet else now.kube_proxies,
        kubectl=kubectl or now.kubectl,
    )


def evaluate(
    *,
    current: Mapping[str, str],
    target: Mapping[str, str],
    kubelets: Mapping[str, str],
    skew: SkewFacts | None,
    policy: SkewPolicy,
    matrices: Mapping[str, Matrix],
    only: list[str] | None = None,
    phases: list[list[str]] | None = None,
    in_between: str = "fail",
) -> CompatVerdict:
    """Judge the move from `current` to `target` (target keys not given stay at current).

    Skew rules are judged in every state the policy's upgrade order passes through. Vendor
    matrices are judged on the target and, when `phases` lists the groups of components in the
    order the runbook upgrades them, after each group: a stack that runs unsupported in
    between is refused as well, once, at the first phase where it happens — or, with
    `in_between="warn"`, reported as a warning (the window is a known, accepted risk).
    """
    planned = {**current, **target}
    verdict = CompatVerdict(supported=True)
    _judge_skew(verdict, current, target, kubelets, skew, policy)
    chosen = {name: matrix for name, matrix in matrices.items() if only is None or name in only}
    seen: set[str] = set()
    moved: dict[str, str] = dict(current)
    before = len(verdict.violations)
    for number, group in enumerate(phases or [], start=1):
        moved.update({key: target[key] for key in group if key in target})
        if moved != planned:
            _judge_phase(verdict, moved, chosen, f"after phase {number} ({', '.join(group)})", seen)
    if in_between == "warn":
        verdict.warnings = verdict.violations[before:]
        del verdict.violations[before:]
        # The target is judged on its own: a window that is also the end state is a violation.
        seen = set()
    _judge_matrices(verdict, current, planned, chosen, seen)
    final = [v.message for v in verdict.violations]
    verdict.warnings = [w for w in verdict.warnings if not any(w.message.endswith(m) for m in final)]
    verdict.supported = not verdict.violations
    return verdict


def _judge_phase(
    verdict: CompatVerdict,
    state: Mapping[str, str],
    matrices: Mapping[str, Matrix],
    label: str,
    seen: set[str],
) -> None:
    for component, version in sorted(state.items()):
        if component not in matrices or not _usable(version):
            continue
        support = support_for(matrices, component, version, state)
        for finding in support.findings:
            if finding.status == "supported" or finding.message in seen:
                continue
            seen.add(finding.message)
            verdict.checked.append(
                Checked(rule=finding.rule, source=support.source, component=component, status="violated")
            )
            verdict.violations.append(
                Violation(
                    rule=finding.rule,
                    source=support.source,
                    component=component,
                    message=f"{label}: {finding.message}",
                )
            )


def _judge_skew(
    verdict: CompatVerdict,
    current: Mapping[str, str],
    target: Mapping[str, str],
    kubelets: Mapping[str, str],
    skew: SkewFacts | None,
    policy: SkewPolicy,
) -> None:
    verdict.sources.append(
        SourceRef(
            component="kubernetes", title=policy.title, source=policy.source, retrieved=policy.retrieved
        )
    )
    now = _versions_now(current, kubelets, skew)
    if now is None:
        verdict.checked.append(
            Checked(rule="skew", source=policy.source, component="kubernetes", status="not-checked")
        )
        return
    report = check_upgrade(now, _versions_target(now, current, target), policy)
    for finding in report.violations:
        verdict.violations.append(
            Violation(
                rule=finding.rule, source=policy.source, component=finding.component, message=finding.message
            )
        )
    for rule_id, status in report.checked.items():
        verdict.checked.append(
            Checked(
                rule=rule_id, source=policy.source, component=policy.rule(rule_id).component, status=status
            )
        )


def _judge_matrices(
    verdict: CompatVerdict,
    current: Mapping[str, str],
    planned: Mapping[str, str],
    matrices: Mapping[str, Matrix],
    seen: set[str],
) -> None:
    for component, version in sorted(planned.items()):
        if not _usable(version):
            continue
        matrix = matrices.get(component)
        if matrix is None:
            verdict.checked.append(
                Checked(
                    rule=matrix_rule(component, "none"),
                    source=NO_MATRIX_SOURCE,
                    component=component,
                    status="not-checked",
                )
            )
            continue
        verdict.sources.append(
            SourceRef(
                component=component, title=matrix.title, source=matrix.source, retrieved=matrix.retrieved
            )
        )
        before = current.get(component)
        start = before if _usable(before) and before != version else None
        support = support_for(matrices, component, version, planned, upgrade_from=start)
        for finding in support.findings:
            status: Status = "ok" if finding.status == "supported" else "violated"
            verdict.checked.append(
                Checked(rule=finding.rule, source=support.source, component=component, status=status)
            )
            if status == "violated" and finding.message not in seen:
                seen.add(finding.message)
                verdict.violations.append(
                    Violation(
                        rule=finding.rule, source=support.source, component=component, message=finding.message
                    )
                )


def summary(verdict: CompatVerdict, current: Mapping[str, str], target: Mapping[str, str]) -> str:
    """The one-paragraph `msg`: each violation (rule id and source inside), or what was checked."""
    warned = [f"- warning: {warning.message}" for warning in verdict.warnings]
    if verdict.violations:
        lines = [f"{len(verdict.violations)} compatibility violation(s):"]
        lines += [f"- {violation.message}" for violation in verdict.violations]
        return "\n".join([*lines, *warned])
    moves = [
        f"{key} {current.get(key, 'not deployed')} → {value}"
        for key, value in sorted(target.items())
        if current.get(key) != value
    ]
    checked = sum(1 for item in verdict.checked if item.status == "ok")
    plan = ", ".join(moves) if moves else "no version changes"
    head = f"supported: {plan} ({checked} rules checked, no violations)"
    if warned:
        head += f"; {len(warned)} unsupported combination(s) on the way there:"
    return "\n".join([head, *warned])
