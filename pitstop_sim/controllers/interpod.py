"""The two filters of kube-scheduler that read the pods already on the nodes, for the simulator's
scheduler (pkg/scheduler/framework/plugins; written from upstream, apart from pitstop's own
pre-drain check, so that the two can disagree and tests see it):

PodTopologySpread (podtopologyspread/filtering.go `calPreFilterState`, `Filter`; common.go
`filterTopologySpreadConstraints`, `matchNodeInclusionPolicies`, `countPodsMatchSelector`).
Only `whenUnsatisfiable: DoNotSchedule` constraints filter. The domains of a constraint are the
values of its topologyKey on the nodes that carry the topologyKey of every such constraint of
the pod and pass the constraint's node inclusion policies: nodeAffinityPolicy (nil = Honor: the
pod's nodeSelector and required node affinity) and nodeTaintsPolicy (nil = Ignore; Honor leaves
out nodes with a NoSchedule/NoExecute taint the pod does not tolerate). So a cordoned node is
still a domain by default, counting 0 if its pods have gone (kubernetes/kubernetes#106127).
Counted in a domain: the pods bound to its nodes in the pod's namespace, not terminating, whose
labels match the labelSelector plus `matchLabelKeys` (the pod's own values of the keys it has);
an empty selector counts none, a nil one matches nothing. The global minimum is the smallest
count over the domains, or 0 when there are fewer domains than minDomains (nil = 1). A node
fails when it lacks the topologyKey ("... (missing required label)") or when `count in its
domain + (1 if the pod matches the selector) - global minimum > maxSkew`.

InterPodAffinity (interpodaffinity/filtering.go `PreFilter`, `satisfyPodAffinity`,
`satisfyPodAntiAffinity`, `satisfyExistingPodsAntiAffinity`, `Filter`; framework
`AffinityTerm.Matches`). Required terms only. A term selects the pods in its `namespaces` (the
owner's own when it names none and has no namespaceSelector) or in a namespace whose labels
match its `namespaceSelector` (`{}`: all), whose labels match its labelSelector plus
`matchLabelKeys` (In the owner's value) and `mismatchLabelKeys` (NotIn). Every pod bound to a
node counts, terminating or not. In order, a node fails: the pod's affinity when it lacks a
term's topologyKey, or when some term's domain of the node holds no pod matching all the terms
- unless no such pod runs anywhere and the pod matches all its terms itself (the first pod of
a group that keeps together); the pod's anti-affinity when a pod matching a term runs in the
node's domain of that term; the anti-affinity of existing pods when a pod whose term matches
the incoming pod runs in the node's domain of that term.

Cost: nothing for a pod without these constraints while no bound pod has required
anti-affinity; otherwise the pods its selectors match (a label index over bound pods, built the
first time one is needed) and the pods with anti-affinity, plus one pass over the nodes per
spread constraint shape and scheduling round.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pitstop.kube.objects import labels_of, meta, namespace_of, pod_is_finished, pod_node
from pitstop.kube.selectors import Requirement, labels_match, selector_requirements
from pitstop_sim.objects import node_affinity_matches, untolerated

Obj = dict[str, Any]
Labels = Mapping[str, str]

# The filters' reasons, as kube-scheduler words them.
SPREAD = "node(s) didn't match pod topology spread constraints"
SPREAD_MISSING_LABEL = SPREAD + " (missing required label)"
AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

# A node's labels -> why the pod may not go there, or None.
Filter = Callable[[Labels], str | None]


def _selector(selector: Any) -> list[Requirement] | None:
    """LabelSelectorAsSelector: None (nil) matches nothing, [] everything; an invalid selector
    (which the apiserver would have refused) is taken as matching nothing."""
    if selector is not None and not isinstance(selector, dict):
        return None
    try:
        return selector_requirements(selector)
    except ValueError:
        return None


def _with_keys(
    base: list[Requirement] | None, owner: Labels, match: Iterable[Any], mismatch: Iterable[Any] = ()
) -> list[Requirement] | None:
    """The selector with the owner's values of `matchLabelKeys` (In) and `mismatchLabelKeys`
    (NotIn) of the keys the owner has."""
    if base is None:
        return None
    extra = [Requirement(str(k), "in", frozenset({owner[k]})) for k in match if k in owner]
    extra += [Requirement(str(k), "notin", frozenset({owner[k]})) for k in mismatch if k in owner]
    return extra + base if extra else base


@dataclass(frozen=True)
class Term:
    """A required PodAffinityTerm of some pod (framework.AffinityTerm)."""

    key: str
    selector: list[Requirement] | None
    namespaces: frozenset[str]
    namespace_selector: list[Requirement] | None  # None: no namespace by labels; []: every one

    def matches(self, namespace: str, labels: Labels, namespace_labels: Labels) -> bool:
        if namespace in self.namespaces or labels_match(self.namespace_selector, namespace_labels):
            return labels_match(self.selector, labels)
        return False


def required_terms(pod: Mapping[str, Any], kind: str) -> list[Term]:
    """The pod's required `podAffinity` or `podAntiAffinity` terms."""
    block = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    raw = block.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not raw:
        return []
    owner = labels_of(pod)
    out: list[Term] = []
    for term in raw:
        if not isinstance(term, dict):
            continue
        names = term.get("namespaces") or []
        ns_selector = term.get("namespaceSelector")
        namespaces = frozenset(str(n) for n in names)
        if not names and ns_selector is None:
            namespaces = frozenset({namespace_of(pod)})
        out.append(
            Term(
                key=str(term.get("topologyKey") or ""),
                selector=_with_keys(
                    _selector(term.get("labelSelector")),
                    owner,
                    term.get("matchLabelKeys") or (),
                    term.get("mismatchLabelKeys") or (),
                ),
                namespaces=namespaces,
                namespace_selector=_selector(ns_selector),
            )
        )
    return out


def has_required_anti_affinity(pod: Mapping[str, Any]) -> bool:
    affinity = (pod.get("spec") or {}).get("affinity")
    if not affinity:
        return False
    anti = affinity.get("podAntiAffinity") or {}
    return bool(anti.get("requiredDuringSchedulingIgnoredDuringExecution"))


@dataclass(frozen=True)
class Spread:
    """A DoNotSchedule topology spread constraint of the pod to schedule."""

    key: str
    max_skew: int
    min_domains: int
    selector: list[Requirement] | None
    honor_affinity: bool
    honor_taints: bool


def hard_spreads(pod: Mapping[str, Any]) -> list[Spread]:
    out: list[Spread] = []
    constraints = (pod.get("spec") or {}).get("topologySpreadConstraints") or []
    if not constraints:
        return out
    owner = labels_of(pod)
    for c in constraints:
        if not isinstance(c, dict) or c.get("whenUnsatisfiable") != "DoNotSchedule":
            continue
        out.append(
            Spread(
                key=str(c.get("topologyKey") or ""),
                max_skew=_int(c.get("maxSkew"), 1),
                min_domains=_int(c.get("minDomains"), 1),
                selector=_with_keys(_selector(c.get("labelSelector")), owner, c.get("matchLabelKeys") or ()),
                honor_affinity=(c.get("nodeAffinityPolicy") or "Honor") == "Honor",
                honor_taints=(c.get("nodeTaintsPolicy") or "Ignore") == "Honor",
            )
        )
    return out


def _int(value: Any, default: int) -> int:
    """An integer field (the apiserver would have refused a malformed one: not a scheduler's fault)."""
    try:
        return default if value is None else int(value)
    except (TypeError, ValueError):
        return default


def has_own_constraints(pod: Mapping[str, Any]) -> bool:
    """Spread constraints or pod (anti-)affinity of its own (cheap: no parsing)."""
    spec = pod.get("spec") or {}
    if spec.get("topologySpreadConstraints"):
        return True
    affinity = spec.get("affinity") or {}
    return bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity"))


# --- the pods bound to nodes ---------------------------------------------------------------


class Resident:
    __slots__ = ("labels", "namespace", "node", "terminating")

    def __init__(self, namespace: str, labels: dict[str, str], node: str, terminating: bool) -> None:
        self.namespace = namespace
        self.labels = labels
        self.node = node
        self.terminating = terminating


def resident_of(pod: Mapping[str, Any]) -> Resident | None:
    """What the filters read of a pod, if it is bound and not finished (the scheduler's cache
    holds those, terminating ones too)."""
    node = pod_node(pod)
    if not node or pod_is_finished(pod):
        return None
    return Resident(namespace_of(pod), labels_of(pod), node, bool(meta(pod).get("deletionTimestamp")))


class PodIndex:
    """Bound pods by uid, by label pair and by namespace."""

    def __init__(self) -> None:
        self._pods: dict[str, Resident] = {}
        self._by_label: dict[tuple[str, str], set[str]] = {}
        self._by_namespace: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._pods)

    def put(self, uid: str, resident: Resident | None) -> bool:
        """Record the pod (None: it is gone or unbound); True if anything the filters read changed."""
        old = self._pods.get(uid)
        if resident is None:
            if old is None:
                return False
            self._remove(uid, old)
            return True
        if old is not None:
            if (
                old.node == resident.node
                and old.terminating == resident.terminating
                and old.labels == resident.labels
                and old.namespace == resident.namespace
            ):
                return False
            self._remove(uid, old)
        self._pods[uid] = resident
        self._by_namespace.setdefault(resident.namespace, set()).add(uid)
        for pair in resident.labels.items():
            self._by_label.setdefault(pair, set()).add(uid)
        return True

    def _remove(self, uid: str, old: Resident) -> None:
        del self._pods[uid]
        _discard(self._by_namespace, old.namespace, uid)
        for pair in old.labels.items():
            _discard(self._by_label, pair, uid)

    def select(
        self, selector: list[Requirement] | None, namespaces: frozenset[str] | None
    ) -> Iterator[Resident]:
        """The pods in `namespaces` (None: all) whose labels match `selector`, found through the
        narrowest label pair the selector requires (or the namespaces' pods)."""
        if selector is None:
            return
        candidates: Iterable[str] | None = None
        size = -1
        for r in selector:
            if r.op != "in":
                continue
            sets = [self._by_label.get((r.key, v), _EMPTY) for v in r.values]
            total = sum(len(s) for s in sets)
            if size < 0 or total < size:
                candidates = sets[0] if len(sets) == 1 else {uid for s in sets for uid in s}
                size = total
        if candidates is None:
            if namespaces is None:
                candidates = self._pods.keys()
            else:
                candidates = [uid for ns in namespaces for uid in self._by_namespace.get(ns, _EMPTY)]
        for uid in candidates:
            pod = self._pods[uid]
            if namespaces is not None and pod.namespace not in namespaces:
                continue
            if all(r.matches(pod.labels) for r in selector):
                yield pod


_EMPTY: frozenset[str] = frozenset()


def _discard(index: dict[Any, set[str]], key: Any, uid: str) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(uid)
        if not members:
            del index[key]


# --- one scheduling round's view of the nodes -----------------------------------------------


class NodeView:
    """The nodes of one scheduling round: the labels of the nodes pods run on (looked up as
    needed) and, per spread constraint shape, the nodes that are domains."""

    def __init__(self, nodes: list[Obj], lookup: Callable[[str], Obj | None]) -> None:
        self.nodes = nodes
        self._lookup = lookup
        self._labels: dict[str, Labels | None] = {}
        self._domains: dict[tuple[Any, ...], tuple[dict[str, str], int]] = {}

    def labels(self, name: str) -> Labels | None:
        """The labels of node `name`, or None if there is no such node."""
        if name in self._labels:
            return self._labels[name]
        node = self._lookup(name)
        labels = None if node is None else (meta(node).get("labels") or {})
        self._labels[name] = labels
        return labels

    def domains(self, pod: Obj, spreads: list[Spread], index: int) -> tuple[dict[str, str], int]:
        """Node name -> domain of the nodes counted for constraint `index`, and how many domains."""
        spread = spreads[index]
        keys = tuple(s.key for s in spreads)
        spec = pod.get("spec") or {}
        affinity = (
            _fingerprint(
                spec.get("nodeSelector"),
                ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ),
            )
            if spread.honor_affinity
            else None
        )
        taints = _fingerprint(spec.get("tolerations")) if spread.honor_taints else None
        cache_key = (keys, spread.key, spread.honor_affinity, affinity, spread.honor_taints, taints)
        cached = self._domains.get(cache_key)
        if cached is not None:
            return cached
        tolerations = spec.get("tolerations") or []
        out: dict[str, str] = {}
        for node in self.nodes:
            labels = meta(node).get("labels") or {}
            if any(k not in labels for k in keys):
                continue
            if spread.honor_affinity and not node_affinity_matches(pod, labels):
                continue
            if spread.honor_taints and untolerated(
                tolerations, (node.get("spec") or {}).get("taints") or [], ("NoSchedule", "NoExecute")
            ):
                continue
            out[str(meta(node).get("name") or "")] = labels[spread.key]
        result = (out, len(set(out.values())))
        self._domains[cache_key] = result
        return result


def _fingerprint(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, default=str)


# --- the filters for one pod ----------------------------------------------------------------


@dataclass
class Guard:
    """A bound pod with required anti-affinity: where it runs and its terms."""

    node: str
    labels: dict[str, str]  # its own, which its terms' matchLabelKeys read
    terms: list[Term]


def pod_filter(
    pod: Obj,
    view: NodeView,
    index: Callable[[], PodIndex],
    guards: Iterable[Guard],
    namespace_labels: Callable[[str], Labels],
    namespaces: Callable[[], list[tuple[str, Labels]]],
) -> Filter | None:
    """PreFilter of both plugins for `pod`: the Filter to run on each node, or None when neither
    has anything to check. `index` gives the bound pods (built on first use)."""
    spreads = hard_spreads(pod)
    affinity = required_terms(pod, "podAffinity")
    anti = required_terms(pod, "podAntiAffinity")
    namespace = namespace_of(pod)
    own = labels_of(pod)
    own_namespace_labels = namespace_labels(namespace)

    # Existing pods' anti-affinity (symmetry): the domains where a pod whose term matches this one runs.
    blocked: dict[str, set[str]] = {}
    for guard in guards:
        node_labels = view.labels(guard.node)
        if node_labels is None:
            continue
        for t in guard.terms:
            if t.key in node_labels and t.matches(namespace, own, own_namespace_labels):
                blocked.setdefault(t.key, set()).add(node_labels[t.key])
    if not spreads and not affinity and not anti and not blocked:
        return None

    affinity = [_merge_namespaces(t, namespaces) for t in affinity]
    anti = [_merge_namespaces(t, namespaces) for t in anti]
    checks: list[Filter] = []
    if spreads:
        checks.append(_spread_filter(pod, spreads, view, index(), own))
    if affinity:
        checks.append(_affinity_filter(affinity, view, index(), namespace, own))
    if anti:
        anti_check = _anti_affinity_filter(anti, view, index())
        if anti_check is not None:
            checks.append(anti_check)
    if blocked:
        checks.append(_existing_filter(blocked))
    if not checks:
        return None
    if len(checks) == 1:
        return checks[0]

    def check(labels: Labels) -> str | None:
        for c in checks:
            why = c(labels)
            if why is not None:
                return why
        return None

    return check


def _merge_namespaces(term: Term, namespaces: Callable[[], list[tuple[str, Labels]]]) -> Term:
    """The incoming pod's term with the namespaces its namespaceSelector selects added to its
    list (`mergeAffinityTermNamespacesIfNotEmpty`); an empty selector stays "every namespace"."""
    if not term.namespace_selector:
        return term
    chosen = {name for name, labels in namespaces() if labels_match(term.namespace_selector, labels)}
    return Term(term.key, term.selector, term.namespaces | chosen, None)


def _term_namespaces(term: Term) -> frozenset[str] | None:
    """The namespaces to look in for a (merged) term: None for every namespace."""
    return None if term.namespace_selector == [] else term.namespaces


def _spread_filter(pod: Obj, spreads: list[Spread], view: NodeView, index: PodIndex, own: Labels) -> Filter:
    counts: list[Counter[str]] = []
    minimums: list[int] = []
    selves: list[int] = []
    namespace = frozenset({namespace_of(pod)})
    for i, s in enumerate(spreads):
        domain_of, domains = view.domains(pod, spreads, i)
        count: Counter[str] = Counter()
        if s.selector:  # an empty selector counts no pod, a nil one matches none
            for resident in index.select(s.selector, namespace):
                if resident.terminating:
                    continue
                domain = domain_of.get(resident.node)
                if domain is not None:
                    count[domain] += 1
        counts.append(count)
        if domains < s.min_domains or len(count) < domains:
            minimums.append(0)
        else:
            minimums.append(min(count.values()))
        selves.append(1 if labels_match(s.selector, own) else 0)

    def check(labels: Labels) -> str | None:
        for i, s in enumerate(spreads):
            value = labels.get(s.key)
            if value is None:
                return SPREAD_MISSING_LABEL
            if counts[i].get(value, 0) + selves[i] - minimums[i] > s.max_skew:
                return SPREAD
        return None

    return check


def _affinity_filter(
    terms: list[Term], view: NodeView, index: PodIndex, namespace: str, own: Labels
) -> Filter:
    # Domains (key, value) holding a pod that matches every term. The terms are merged (their
    # namespaceSelector is none or every namespace), so no namespace labels are needed.
    present: set[tuple[str, str]] = set()
    first = terms[0]
    for resident in index.select(first.selector, _term_namespaces(first)):
        if not all(t.matches(resident.namespace, resident.labels, {}) for t in terms):
            continue
        node_labels = view.labels(resident.node)
        if node_labels is None:
            continue
        for t in terms:
            if t.key in node_labels:
                present.add((t.key, node_labels[t.key]))
    first_of_group = not present and all(t.matches(namespace, own, {}) for t in terms)

    def check(labels: Labels) -> str | None:
        pods_exist = True
        for t in terms:
            value = labels.get(t.key)
            if value is None:
                return AFFINITY
            if (t.key, value) not in present:
                pods_exist = False
        if pods_exist or first_of_group:
            return None
        return AFFINITY

    return check


def _anti_affinity_filter(terms: list[Term], view: NodeView, index: PodIndex) -> Filter | None:
    taken: set[tuple[str, str]] = set()
    for t in terms:
        for resident in index.select(t.selector, _term_namespaces(t)):
            if not t.matches(resident.namespace, resident.labels, {}):
                continue
            node_labels = view.labels(resident.node)
            if node_labels is not None and t.key in node_labels:
                taken.add((t.key, node_labels[t.key]))
    if not taken:
        return None

    def check(labels: Labels) -> str | None:
        for t in terms:
            value = labels.get(t.key)
            if value is not None and (t.key, value) in taken:
                return ANTI_AFFINITY
        return None

    return check


def _existing_filter(blocked: dict[str, set[str]]) -> Filter:
    def check(labels: Labels) -> str | None:
        for key, values in blocked.items():
            value = labels.get(key)
            if value is not None and value in values:
                return EXISTING_ANTI_AFFINITY
        return None

    return check
