"""The Kubernetes Version Skew Policy as pure rules over component versions (no I/O).

`check_upgrade(current, target, policy)` judges the cluster as it is, every state the upgrade
passes through in the policy's order (kube-apiserver first, then the other control-plane
components, then kubelet and kube-proxy), and the target. Rule ids and texts come from
`runbooks/compat/kubernetes-skew.yaml` (`SkewPolicy`); the arithmetic lives here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pitstop.compat.versions import Version, parse_version

APISERVER_ONE_MINOR = "skew/apiserver-one-minor-at-a-time"
APISERVER_HA = "skew/apiserver-ha-within-one-minor"
KUBELET_NOT_NEWER = "skew/kubelet-not-newer-than-apiserver"
KUBELET_TOO_OLD = "skew/kubelet-at-most-three-minors-older"
PROXY_NOT_NEWER = "skew/kube-proxy-not-newer-than-apiserver"
PROXY_TOO_OLD = "skew/kube-proxy-at-most-three-minors-older"
PROXY_VS_KUBELET = "skew/kube-proxy-within-three-minors-of-kubelet"
KUBECTL_WITHIN = "skew/kubectl-within-one-minor"
CONTROL_PLANE_FIRST = "skew/control-plane-before-nodes"
# kube-controller-manager, kube-scheduler and cloud-controller-manager share one pair of rules.
CONTROL_PLANE_COMPONENTS = ("kube-controller-manager", "kube-scheduler", "cloud-controller-manager")


def _not_newer(component: str) -> str:
    return f"skew/{component}-not-newer-than-apiserver"


def _one_older(component: str) -> str:
    return f"skew/{component}-at-most-one-minor-older"


REQUIRED_RULES: tuple[str, ...] = (
    APISERVER_ONE_MINOR,
    APISERVER_HA,
    KUBELET_NOT_NEWER,
    KUBELET_TOO_OLD,
    PROXY_NOT_NEWER,
    PROXY_TOO_OLD,
    PROXY_VS_KUBELET,
    KUBECTL_WITHIN,
    CONTROL_PLANE_FIRST,
    *(
        rule
        for component in CONTROL_PLANE_COMPONENTS
        for rule in (_not_newer(component), _one_older(component))
    ),
)

# kubelet and kube-proxy older than 1.25 may only trail kube-apiserver by two minors.
_LEGACY_NODE_MINOR = 25
_LEGACY_NODE_LIMIT = 2
_NODES_NAMED = 5  # node names quoted per finding; the rest are counted

State = Literal["current", "control-plane", "before-nodes", "target"]


class SkewRule(BaseModel):
    """One rule of the policy: its id, what it says, and the minor versions it allows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    component: str
    text: str
    limit: int | None = Field(default=None, ge=0)


class SkewPolicy(BaseModel):
    """The policy as loaded from `kubernetes-skew.yaml`; every rule the code uses must be there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str
    source: str
    retrieved: str
    rules: list[SkewRule]

    @field_validator("retrieved", mode="before")
    @classmethod
    def _date_text(cls, value: object) -> object:
        return str(value) if value is not None and not isinstance(value, str) else value

    @model_validator(mode="after")
    def _complete(self) -> SkewPolicy:
        ids = [rule.id for rule in self.rules]
        duplicates = sorted({rule_id for rule_id in ids if ids.count(rule_id) > 1})
        if duplicates:
            raise ValueError(f"rule ids listed twice: {', '.join(duplicates)}")
        missing = [rule_id for rule_id in REQUIRED_RULES if rule_id not in ids]
        if missing:
            raise ValueError(f"rules the skew checks need are missing: {', '.join(missing)}")
        return self

    def rule(self, rule_id: str) -> SkewRule:
        return next(rule for rule in self.rules if rule.id == rule_id)

    def limit(self, rule_id: str, default: int) -> int:
        limit = self.rule(rule_id).limit
        return default if limit is None else limit

    def cite(self, rule_id: str) -> str:
        return f"rule {rule_id}, {self.source}"


class ClusterVersions(BaseModel):
    """Versions of the Kubernetes components at one moment (as they report them)."""

    model_config = ConfigDict(extra="forbid")

    apiservers: list[str] = Field(min_length=1, description="Every kube-apiserver instance (HA: several).")
    controller_managers: list[str] = Field(default_factory=list)
    schedulers: list[str] = Field(default_factory=list)
    cloud_controller_managers: list[str] = Field(default_factory=list)
    kubelets: dict[str, str] = Field(default_factory=dict, description="node -> kubelet version")
    kube_proxies: dict[str, str] = Field(default_factory=dict, description="node -> kube-proxy version")
    kubectl: str | None = None

    def control_plane(self, component: str) -> list[str]:
        return {
            "kube-controller-manager": self.controller_managers,
            "kube-scheduler": self.schedulers,
            "cloud-controller-manager": self.cloud_controller_managers,
        }[component]


class SkewFinding(BaseModel):
    """A violated rule, in the state of the upgrade where it is violated."""

    model_config = ConfigDict(frozen=True)

    rule: str
    component: str
    state: State
    message: str


class SkewReport(BaseModel):
    """Violations, and every rule evaluated with its outcome (`ok` or `violated`)."""

    violations: list[SkewFinding] = Field(default_factory=list)
    checked: dict[str, Literal["ok", "violated"]] = Field(default_factory=dict)

    def mark_checked(self, rule_id: str) -> None:
        self.checked.setdefault(rule_id, "ok")

    def add_violation(self, finding: SkewFinding) -> None:
        self.checked[finding.rule] = "violated"
        if finding not in self.violations:
            self.violations.append(finding)


def _index(version: Version) -> int:
    # Minor versions as one number so that skew arithmetic survives a major bump.
    return version.major * 1000 + version.minor


def _minors(newer: Version, older: Version) -> int:
    return _index(newer) - _index(older)


def _minor_text(index: int) -> str:
    return f"{index // 1000}.{index % 1000}"


def _plural(count: int) -> str:
    return "minor version" if count == 1 else "minor versions"


def _nodes(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:_NODES_NAMED])
    rest = len(names) - _NODES_NAMED
    return f"{shown} and {rest} more" if rest > 0 else shown


def _by_version(per_node: Mapping[str, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for node, version in per_node.items():
        grouped[version].append(node)
    return dict(grouped)


_WHEN: dict[State, str] = {
    "current": "now",
    "control-plane": "while the control plane is upgraded",
    "before-nodes": "after the control plane is upgraded, before the nodes",
    "target": "in the target state",
}


def check_state(versions: ClusterVersions, policy: SkewPolicy, state: State, report: SkewReport) -> None:
    """Judge one moment of the cluster against every skew rule whose inputs it has."""
    apiservers = [parse_version(text) for text in versions.apiservers]
    oldest, newest = min(apiservers, key=_index), max(apiservers, key=_index)
    when = _WHEN[state]
    if len(apiservers) > 1:
        _check_ha(oldest, newest, policy, state, report)
    _check_nodes(versions.kubelets, "kubelet", (oldest, newest), policy, state, report)
    _check_nodes(versions.kube_proxies, "kube-proxy", (oldest, newest), policy, state, report)
    _check_proxy_vs_kubelet(versions, policy, state, report)
    for component in CONTROL_PLANE_COMPONENTS:
        for text in sorted(set(versions.control_plane(component))):
            _check_control_plane(component, parse_version(text), oldest, newest, policy, state, report)
    if versions.kubectl is not None:
        report.mark_checked(KUBECTL_WITHIN)
        kubectl = parse_version(versions.kubectl)
        limit = policy.limit(KUBECTL_WITHIN, 1)
        far = max((api for api in apiservers), key=lambda api: abs(_minors(api, kubectl)))
        distance = abs(_minors(far, kubectl))
        if distance > limit:
            report.add_violation(
                SkewFinding(
                    rule=KUBECTL_WITHIN,
                    component="kubectl",
                    state=state,
                    message=(
                        f"{when}: kubectl {kubectl} is {distance} {_plural(distance)} away from "
                        f"kube-apiserver {far}; use a kubectl within {limit} minor version of it "
                        f"({policy.cite(KUBECTL_WITHIN)})"
                    ),
                )
            )


def _check_ha(oldest: Version, newest: Version, policy: SkewPolicy, state: State, report: SkewReport) -> None:
    report.mark_checked(APISERVER_HA)
    limit = policy.limit(APISERVER_HA, 1)
    spread = _minors(newest, oldest)
    if spread > limit:
        report.add_violation(
            SkewFinding(
                rule=APISERVER_HA,
                component="kubernetes",
                state=state,
                message=(
                    f"{_WHEN[state]}: kube-apiserver instances run {oldest} and {newest}, {spread} "
                    f"{_plural(spread)} apart; at most {limit} is supported ({policy.cite(APISERVER_HA)})"
                ),
            )
        )


def _check_nodes(
    per_node: Mapping[str, str],
    component: Literal["kubelet", "kube-proxy"],
    apiservers: tuple[Version, Version],
    policy: SkewPolicy,
    state: State,
    report: SkewReport,
) -> None:
    """A node component may not be newer than the oldest kube-apiserver, nor older than the
    newest one by more than the limit: with HA apiservers at 1.32 and 1.31 the policy allows
    kubelet 1.31, 1.30 and 1.29 (its own example), so both ends narrow the window."""
    if not per_node:
        return
    apiserver, newest = apiservers
    not_newer, too_old = (
        (KUBELET_NOT_NEWER, KUBELET_TOO_OLD) if component == "kubelet" else (PROXY_NOT_NEWER, PROXY_TOO_OLD)
    )
    # In the target state a node newer than kube-apiserver means the plan upgrades the nodes
    # past the control plane: the ordering rule names that mistake better.
    newer_rule = CONTROL_PLANE_FIRST if state == "target" and component == "kubelet" else not_newer
    report.mark_checked(newer_rule)
    report.mark_checked(too_old)
    when = _WHEN[state]
    verb = "is" if state == "current" else "would be"
    for text, nodes in sorted(_by_version(per_node).items()):
        version = parse_version(text)
        ahead = _minors(version, apiserver)
        if ahead > 0:
            fix = (
                "upgrade the control plane before the nodes"
                if newer_rule == CONTROL_PLANE_FIRST
                else f"keep {component} at {apiserver.minor_text} or older until kube-apiserver is upgraded"
            )
            report.add_violation(
                SkewFinding(
                    rule=newer_rule,
                    component=component,
                    state=state,
                    message=(
                        f"{when}: {component} {version} on {_nodes(nodes)} {verb} newer than "
                        f"kube-apiserver {apiserver}; {fix} ({policy.cite(newer_rule)})"
                    ),
                )
            )
            continue
        limit = policy.limit(too_old, 3)
        if version.minor_key() < (1, _LEGACY_NODE_MINOR):
            limit = min(limit, _LEGACY_NODE_LIMIT)
        behind = _minors(newest, version)
        if behind > limit:
            oldest_ok = _minor_text(_index(newest) - limit)
            report.add_violation(
                SkewFinding(
                    rule=too_old,
                    component=component,
                    state=state,
                    message=(
                        f"{when}: {component} {version} on {_nodes(nodes)} {verb} {behind} "
                        f"{_plural(behind)} older than kube-apiserver {newest} (at most {limit} "
                        f"supported); upgrade {component} on those nodes to {oldest_ok} or newer "
                        f"first ({policy.cite(too_old)})"
                    ),
                )
            )


def _check_proxy_vs_kubelet(
    versions: ClusterVersions, policy: SkewPolicy, state: State, report: SkewReport
) -> None:
    pairs = [
        (node, versions.kubelets[node], proxy)
        for node, proxy in versions.kube_proxies.items()
        if node in versions.kubelets
    ]
    if not pairs:
        return
    report.mark_checked(PROXY_VS_KUBELET)
    limit = policy.limit(PROXY_VS_KUBELET, 3)
    for node, kubelet_text, proxy_text in sorted(pairs):
        kubelet, proxy = parse_version(kubelet_text), parse_version(proxy_text)
        distance = abs(_minors(proxy, kubelet))
        if distance > limit:
            report.add_violation(
                SkewFinding(
                    rule=PROXY_VS_KUBELET,
                    component="kube-proxy",
                    state=state,
                    message=(
                        f"{_WHEN[state]}: kube-proxy {proxy} on {node} is {distance} {_plural(distance)} "
                        f"from its kubelet {kubelet} (at most {limit}) ({policy.cite(PROXY_VS_KUBELET)})"
                    ),
                )
            )


def _check_control_plane(
    component: str,
    version: Version,
    oldest: Version,
    newest: Version,
    policy: SkewPolicy,
    state: State,
    report: SkewReport,
) -> None:
    not_newer, one_older = _not_newer(component), _one_older(component)
    report.mark_checked(not_newer)
    report.mark_checked(one_older)
    when = _WHEN[state]
    if _minors(version, oldest) > 0:
        report.add_violation(
            SkewFinding(
                rule=not_newer,
                component=component,
                state=state,
                message=(
                    f"{when}: {component} {version} is newer than kube-apiserver {oldest}; upgrade "
                    f"kube-apiserver first ({policy.cite(not_newer)})"
                ),
            )
        )
        return
    limit = policy.limit(one_older, 1)
    behind = _minors(newest, version)
    if behind > limit:
        report.add_violation(
            SkewFinding(
                rule=one_older,
                component=component,
                state=state,
                message=(
                    f"{when}: {component} {version} is {behind} {_plural(behind)} older than "
                    f"kube-apiserver {newest} (at most {limit}); upgrade kube-apiserver one minor "
                    f"at a time and {component} right after it ({policy.cite(one_older)})"
                ),
            )
        )


def _check_apiserver_steps(
    current: Iterable[str], target: Iterable[str], policy: SkewPolicy, report: SkewReport
) -> None:
    report.mark_checked(APISERVER_ONE_MINOR)
    limit = policy.limit(APISERVER_ONE_MINOR, 1)
    for old_text in sorted(set(current)):
        old = parse_version(old_text)
        for new_text in sorted(set(target)):
            new = parse_version(new_text)
            step = _minors(new, old)
            if step <= limit:
                continue
            skipped = ", ".join(_minor_text(index) for index in range(_index(old) + 1, _index(new)))
            report.add_violation(
                SkewFinding(
                    rule=APISERVER_ONE_MINOR,
                    component="kubernetes",
                    state="control-plane",
                    message=(
                        f"kube-apiserver {old} → {new} skips {skipped}: upgrade one minor at a time "
                        f"({policy.cite(APISERVER_ONE_MINOR)})"
                    ),
                )
            )


def check_upgrade(current: ClusterVersions, target: ClusterVersions, policy: SkewPolicy) -> SkewReport:
    """Judge the cluster now, each state the policy's upgrade order passes through, and the target."""
    report = SkewReport()
    check_state(current, policy, "current", report)
    _check_apiserver_steps(current.apiservers, target.apiservers, policy, report)
    # kube-apiserver upgraded first; the other control-plane components still run their old version.
    # Nodes are judged once, in the next state, so one problem is reported once.
    mid = current.model_copy(
        update={"apiservers": target.apiservers, "kubelets": {}, "kube_proxies": {}, "kubectl": None}
    )
    check_state(mid, policy, "control-plane", report)
    # Control plane done, nodes not yet: the kubelets and kube-proxies are still the current ones.
    before_nodes = target.model_copy(
        update={"kubelets": current.kubelets, "kube_proxies": current.kube_proxies, "kubectl": None}
    )
    check_state(before_nodes, policy, "before-nodes", report)
    check_state(target, policy, "target", report)
    return report
