"""Could the scheduler put this pod on that node, given the pods around it? The two filters of
kube-scheduler that read other pods (pkg/scheduler/framework/plugins), for a capacity check that
places the pods of drained nodes one after another:

PodTopologySpread (podtopologyspread/filtering.go `calPreFilterState`/`Filter`, common.go;
https://kubernetes.io/docs/concepts/scheduling-eviction/topology-spread-constraints/). Only
`whenUnsatisfiable: DoNotSchedule` filters (ScheduleAnyway only scores). A node passes a
constraint when `matching pods in its domain + (1 if the pod matches the selector itself) - the
global minimum <= maxSkew`. The domains are the topologyKey values of the nodes that carry the
topologyKey of every hard constraint of the pod and pass its node inclusion policies:
nodeAffinityPolicy (default Honor: the pod's nodeSelector and required node affinity) and
nodeTaintsPolicy (default Ignore; Honor drops nodes with a NoSchedule/NoExecute taint the pod does
not tolerate). The global minimum is the smallest count over those domains, or 0 when there are
fewer than minDomains (default 1). Counted: pods in the pod's namespace, not terminating, matching
the labelSelector plus `matchLabelKeys` (the pod's own values of those keys); a nil selector
matches nothing and an empty one counts no pod (`countPodsMatchSelector`). A node without the
topologyKey label never passes.

InterPodAffinity (interpodaffinity/filtering.go `satisfyPodAffinity`, `satisfyPodAntiAffinity`,
`satisfyExistingPodsAntiAffinity`; required terms only, preferred ones only score). A term matches
a pod in its namespaces (`namespaces`, else the owner's own; `namespaceSelector: {}` is every
namespace) whose labels match its labelSelector plus `matchLabelKeys` (`mismatchLabelKeys`: not
the owner's value). A node fails when a pod matching one of the pod's anti-affinity terms runs in
the node's domain of that term's topologyKey; when an existing pod's anti-affinity term matches the
pod and the node is in that pod's domain (symmetry); or when it lacks a topologyKey of the pod's
affinity terms or, for some term, no pod matching all of them runs in its domain, unless no pod
anywhere matches them and the pod matches them itself (the first of a group that keeps together).
A `namespaceSelector` with terms needs the namespaces' labels, which this does not read: it is
taken as every namespace for anti-affinity, as only the listed `namespaces` for affinity (and never
as the first of a group), so the answer can only be stricter than the scheduler's.

The drained nodes stay in the cluster, cordoned, while their pods are rescheduled: they are still
domains (with nodeTaintsPolicy Ignore a cordoned node is an empty domain that holds the global
minimum at 0, kubernetes/kubernetes#106127), holding what stays on them (DaemonSet and mirror
pods), not the pods being moved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pitstop.kube.annotations import UNSCHEDULABLE_TAINT
from pitstop.kube.objects import (
    Obj,
    is_terminating,
    key_of,
    labels_of,
    name_of,
    namespace_of,
    node_is_unschedulable,
    node_taints,
    pod_is_finished,
    pod_node,
)
from pitstop.kube.scheduling import affinity_allows, untolerated_taint
from pitstop.kube.selectors import Requirement, labels_match, selector_requirements

# A node's name -> why the pod may not go there, or None if it may.
Rule = Callable[[str], str | None]


def _free(_node: str) -> str | None:
    return None


def _requirement_text(r: Requirement) -> str:
    values = ",".join(sorted(r.values))
    if r.op == "exists":
        return r.key
    if r.op == "!exists":
        return f"!{r.key}"
    if len(r.values) == 1:
        return f"{r.key}{'=' if r.op == 'in' else '!='}{values}"
    return f"{r.key} {r.op} ({values})"


def _selector_text(requirements: list[Requirement] | None) -> str:
    if requirements is None:
        return "no pod"
    return ",".join(_requirement_text(r) for r in requirements) or "every pod"


def _requirements(
    selector: Mapping[str, Any] | None,
    owner: Mapping[str, str],
    match_keys: Iterable[str] = (),
    mismatch_keys: Iterable[str] = (),
) -> list[Requirement] | None:
    """The selector with the owner's values of `matchLabelKeys` (In) and `mismatchLabelKeys`
    (NotIn) added, as the apiserver merges them at creation (adding them again changes nothing).
    ValueError on an invalid selector."""
    base = selector_requirements(selector)
    if base is None:
        return None
    extra = [Requirement(k, "in", frozenset({owner[k]})) for k in match_keys if k in owner]
    extra += [Requirement(k, "notin", frozenset({owner[k]})) for k in mismatch_keys if k in owner]
    return extra + base


@dataclass(frozen=True)
class _Term:
    """A required PodAffinityTerm of `owner`."""

    key: str
    requirements: list[Requirement] | None
    namespaces: frozenset[str] | None  # None: every namespace
    guessed: bool  # a namespaceSelector with terms, read as described above

    @property
    def text(self) -> str:
        return _selector_text(self.requirements)

    def matches(self, pod: Mapping[str, Any]) -> bool:
        return self.selects(namespace_of(pod), labels_of(pod))

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return labels_match(self.requirements, labels)


def _terms(owner: Mapping[str, Any], kind: str) -> list[_Term]:
    """`podAffinity` or `podAntiAffinity` required terms; ValueError on an invalid selector."""
    affinity = ((owner.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    out: list[_Term] = []
    for term in affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []:
        if not isinstance(term, dict):
            continue
        requirements = _requirements(
            term.get("labelSelector"),
            labels_of(owner),
            term.get("matchLabelKeys") or (),
            term.get("mismatchLabelKeys") or (),
        )
        names = frozenset(str(n) for n in term.get("namespaces") or [])
        ns_selector = term.get("namespaceSelector")
        namespaces: frozenset[str] | None
        guessed = False
        if ns_selector is None:
            namespaces = names or frozenset({namespace_of(owner)})
        elif selector_requirements(ns_selector) == []:
            namespaces = None
        else:
            guessed = True
            namespaces = None if kind == "podAntiAffinity" else names
        out.append(_Term(str(term.get("topologyKey") or ""), requirements, namespaces, guessed))
    return out


@dataclass(frozen=True)
class _Spread:
    key: str
    max_skew: int
    min_domains: int
    requirements: list[Requirement] | None
    honour_affinity: bool
    honour_taints: bool


def _spreads(pod: Mapping[str, Any]) -> list[_Spread]:
    """The pod's DoNotSchedule constraints (`filterTopologySpreadConstraints`); ValueError on an
    invalid selector."""
    out: list[_Spread] = []
    for c in (pod.get("spec") or {}).get("topologySpreadConstraints") or []:
        if not isinstance(c, dict) or c.get("whenUnsatisfiable") != "DoNotSchedule":
            continue
        match_keys = c.get("matchLabelKeys") or ()
        out.append(
            _Spread(
                key=str(c.get("topologyKey") or ""),
                max_skew=int(c.get("maxSkew") or 1),
                min_domains=int(c.get("minDomains") or 1),
                requirements=_requirements(c.get("labelSelector"), labels_of(pod), match_keys),
                honour_affinity=(c.get("nodeAffinityPolicy") or "Honor") == "Honor",
                honour_taints=(c.get("nodeTaintsPolicy") or "Ignore") == "Honor",
            )
        )
    return out


@dataclass(frozen=True)
class _Resident:
    pod: Obj
    node: str
    namespace: str
    labels: dict[str, str]
    terminating: bool


def _cordoned(node: Obj) -> Obj:
    """The node as the scheduler sees it once cordoned: with the unschedulable taint the node
    lifecycle controller adds (TaintNodesByCondition)."""
    taints = node_taints(node)
    if any(t.get("key") == UNSCHEDULABLE_TAINT for t in taints):
        return node
    taint = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    return {**node, "spec": {**(node.get("spec") or {}), "taints": [*taints, taint]}}


class Placement:
    """The pods on the nodes while the drain runs: those that stay (not finished, not among the
    pods `gone` from the drained nodes) and those placed by the caller since."""

    def __init__(
        self, nodes: Iterable[Obj], pods: Iterable[Obj], gone: Iterable[str], cordoned: Iterable[str]
    ):
        cordoned_set = set(cordoned)
        gone_set = set(gone)
        self._nodes = {
            name_of(n): _cordoned(n) if name_of(n) in cordoned_set or node_is_unschedulable(n) else n
            for n in nodes
        }
        self._node_labels = {name: labels_of(node) for name, node in self._nodes.items()}
        self._residents: list[_Resident] = []
        self._by_namespace: dict[str, list[_Resident]] = {}
        # Residents with required anti-affinity terms, for the symmetric check.
        self._guards: list[tuple[Obj, str, list[_Term]]] = []
        for pod in pods:
            if pod_node(pod) in self._nodes and not pod_is_finished(pod) and key_of(pod) not in gone_set:
                self.place(pod, pod_node(pod))

    def place(self, pod: Obj, node: str) -> None:
        resident = _Resident(pod, node, namespace_of(pod), labels_of(pod), is_terminating(pod))
        self._residents.append(resident)
        self._by_namespace.setdefault(resident.namespace, []).append(resident)
        try:
            terms = _terms(pod, "podAntiAffinity")
        except ValueError:
            terms = []  # the apiserver validates selectors; an invalid one is left out
        if terms:
            self._guards.append((pod, node, terms))

    def _labels(self, node: str) -> dict[str, str]:
        return self._node_labels.get(node, {})

    def rule(self, pod: Obj) -> Rule:
        """Why `pod` may not go to a node, from the pods there now."""
        try:
            spreads = _spreads(pod)
            affinity = _terms(pod, "podAffinity")
            anti = _terms(pod, "podAntiAffinity")
        except ValueError as err:
            why = f"an invalid selector in its pod affinity or topology spread ({err})"
            return lambda _node: why
        checks = [
            check
            for check in (
                self._spread_rule(pod, spreads) if spreads else None,
                self._affinity_rule(pod, affinity) if affinity else None,
                self._anti_affinity_rule(anti) if anti else None,
                self._existing_anti_affinity_rule(pod),
            )
            if check is not None
        ]
        if not checks:
            return _free

        def rule(node: str) -> str | None:
            return next((why for check in checks if (why := check(node))), None)

        return rule

    def _spread_rule(self, pod: Obj, spreads: list[_Spread]) -> Rule:
        domain_of: list[dict[str, str]] = [{} for _ in spreads]  # eligible node -> its domain
        counts: list[dict[str, int]] = [{} for _ in spreads]
        for name, node in self._nodes.items():
            labels = self._labels(name)
            if any(s.key not in labels for s in spreads):
                continue
            allowed = not any(s.honour_affinity for s in spreads) or affinity_allows(pod, node)
            tolerated = not any(s.honour_taints for s in spreads) or untolerated_taint(pod, node) is None
            for i, s in enumerate(spreads):
                if (s.honour_affinity and not allowed) or (s.honour_taints and not tolerated):
                    continue
                domain_of[i][name] = labels[s.key]
                counts[i].setdefault(labels[s.key], 0)
        for resident in self._by_namespace.get(namespace_of(pod), []):
            if resident.terminating:
                continue
            for i, s in enumerate(spreads):
                domain = domain_of[i].get(resident.node)
                if domain is not None and s.requirements and labels_match(s.requirements, resident.labels):
                    counts[i][domain] += 1
        own = labels_of(pod)
        selves = [int(labels_match(s.requirements, own)) for s in spreads]
        minimums = [
            0 if len(counts[i]) < s.min_domains else min(counts[i].values(), default=0)
            for i, s in enumerate(spreads)
        ]

        def check(node: str) -> str | None:
            labels = self._labels(node)
            for i, s in enumerate(spreads):
                if s.key not in labels:
                    return f"topology spread on {s.key}: no {s.key} label"
                skew = counts[i].get(labels[s.key], 0) + selves[i] - minimums[i]
                if skew > s.max_skew:
                    return (
                        f"topology spread on {s.key} ({_selector_text(s.requirements)}): "
                        f"maxSkew {s.max_skew} would be exceeded"
                    )
            return None

        return check

    def _affinity_rule(self, pod: Obj, terms: list[_Term]) -> Rule:
        domains: list[set[str]] = [set() for _ in terms]
        seen = False
        for resident in self._residents:
            if not all(t.selects(resident.namespace, resident.labels) for t in terms):
                continue
            labels = self._labels(resident.node)
            for i, t in enumerate(terms):
                if t.key in labels:
                    domains[i].add(labels[t.key])
                    seen = True
        first_of_group = not seen and not any(t.guessed for t in terms) and all(t.matches(pod) for t in terms)

        def check(node: str) -> str | None:
            labels = self._labels(node)
            missing: _Term | None = None
            for i, t in enumerate(terms):
                if t.key not in labels:
                    return f"pod affinity with {t.text} on {t.key}: no {t.key} label"
                if missing is None and labels[t.key] not in domains[i]:
                    missing = t
            if missing is None or first_of_group:
                return None
            return f"pod affinity with {missing.text} on {missing.key}: no such pod there"

        return check

    def _anti_affinity_rule(self, terms: list[_Term]) -> Rule:
        domains: list[set[str]] = [set() for _ in terms]
        for resident in self._residents:
            labels = self._labels(resident.node)
            for i, t in enumerate(terms):
                if t.key in labels and t.selects(resident.namespace, resident.labels):
                    domains[i].add(labels[t.key])

        def check(node: str) -> str | None:
            labels = self._labels(node)
            for i, t in enumerate(terms):
                if t.key in labels and labels[t.key] in domains[i]:
                    return f"anti-affinity with {t.text} on {t.key}"
            return None

        return check

    def _existing_anti_affinity_rule(self, pod: Obj) -> Rule | None:
        blocked: dict[tuple[str, str], str] = {}
        namespace, own = namespace_of(pod), labels_of(pod)
        for guard, where, terms in self._guards:
            labels = self._labels(where)
            for t in terms:
                if t.key in labels and t.selects(namespace, own):
                    why = f"anti-affinity of {key_of(guard)} ({t.text}) on {t.key}"
                    blocked.setdefault((t.key, labels[t.key]), why)
        if not blocked:
            return None

        def check(node: str) -> str | None:
            labels = self._labels(node)
            return next((why for (k, v), why in blocked.items() if labels.get(k) == v), None)

        return check


def explain(rule: Rule, nodes: Iterable[str]) -> str:
    """Why the rule keeps a pod off these nodes: each reason once, with the nodes it holds for."""
    by_reason: dict[str, list[str]] = {}
    for node in nodes:
        why = rule(node)
        if why:
            by_reason.setdefault(why, []).append(node)
    parts = []
    for why, names in by_reason.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        parts.append(f"{why} (node{'s' if len(names) > 1 else ''} {shown})")
    return " and ".join(parts)
