"""The rehearsal scheduler's PodTopologySpread and InterPodAffinity filters
(`pitstop_sim.controllers.interpod`) on hand-made nodes and pods: the rules of kube-scheduler's
podtopologyspread/filtering.go + common.go and interpodaffinity/filtering.go."""

from __future__ import annotations

from typing import Any

import pytest

from pitstop_sim.controllers.interpod import (
    AFFINITY,
    ANTI_AFFINITY,
    EXISTING_ANTI_AFFINITY,
    SPREAD,
    SPREAD_MISSING_LABEL,
    Filter,
    Guard,
    NodeView,
    PodIndex,
    required_terms,
    resident_of,
)
from pitstop_sim.controllers.interpod import pod_filter as make_filter

Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def node(name: str, zone: str | None, *, taints: list[Obj] | None = None, **labels: str) -> Obj:
    all_labels = {HOST: name, **labels}
    if zone is not None:
        all_labels[ZONE] = zone
    return {"metadata": {"name": name, "labels": all_labels}, "spec": {"taints": taints or []}}


def pod(
    name: str, labels: dict[str, str], node_name: str = "", namespace: str = "default", **spec: Any
) -> Obj:
    out: Obj = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": labels,
        },
        "spec": {"nodeName": node_name, **spec} if node_name else dict(spec),
        "status": {"phase": "Running" if node_name else "Pending"},
    }
    return out


def spread(key: str = ZONE, max_skew: int = 1, **extra: Any) -> Obj:
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
        **extra,
    }


def term(selector: dict[str, str] | None, key: str, **extra: Any) -> Obj:
    out: Obj = {"topologyKey": key, **extra}
    if selector is not None:
        out["labelSelector"] = {"matchLabels": selector}
    return out


def affinity(kind: str, *terms: Obj) -> Obj:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


NAMESPACES = {"default": {"team": "a"}, "other": {"team": "b"}}


def run(incoming: Obj, nodes: list[Obj], pods: list[Obj]) -> dict[str, str | None]:
    """Each node's reason to refuse `incoming` (None: it passes)."""
    index = PodIndex()
    guards = []
    for p in pods:
        resident = resident_of(p)
        index.put(p["metadata"]["uid"], resident)
        terms = required_terms(p, "podAntiAffinity")
        if resident is not None and terms:
            guards.append(Guard(resident.node, resident.labels, terms))
    check: Filter | None = make_filter(
        incoming,
        NodeView(nodes, lambda name: next((n for n in nodes if n["metadata"]["name"] == name), None)),
        lambda: index,
        guards,
        lambda ns: NAMESPACES.get(ns, {}),
        lambda: list(NAMESPACES.items()),
    )
    return {n["metadata"]["name"]: (check(n["metadata"]["labels"]) if check else None) for n in nodes}


TWO_ZONES = [node("n1", "a"), node("n2", "a"), node("n3", "b"), node("n4", "b")]


def web(name: str, node_name: str = "", **spec: Any) -> Obj:
    return pod(name, {"app": "web"}, node_name, **spec)


def test_no_constraints_and_no_anti_affinity_around_is_no_filter() -> None:
    assert run(pod("x", {"app": "x"}), TWO_ZONES, [web("w1", "n1")]) == dict.fromkeys(
        ["n1", "n2", "n3", "n4"]
    )


def test_spread_skew_counts_matching_pods_per_domain_against_the_global_minimum() -> None:
    placed = [web("w1", "n1"), web("w2", "n2"), web("w3", "n3")]
    incoming = web("new", topologySpreadConstraints=[spread()])
    # zone a: 2, zone b: 1 -> min 1; a: 2+1-1 = 2 > 1.
    assert run(incoming, TWO_ZONES, placed) == {"n1": SPREAD, "n2": SPREAD, "n3": None, "n4": None}
    # A pod that does not match its own selector adds nothing: 2+0-1 = 1.
    other = pod("new", {"app": "other"}, topologySpreadConstraints=[spread()])
    assert run(other, TWO_ZONES, placed) == dict.fromkeys(["n1", "n2", "n3", "n4"])
    # maxSkew 2 allows it.
    loose = web("new", topologySpreadConstraints=[spread(max_skew=2)])
    assert run(loose, TWO_ZONES, placed) == dict.fromkeys(["n1", "n2", "n3", "n4"])


def test_spread_ignores_terminating_finished_and_other_namespace_pods() -> None:
    terminating = web("w2", "n2")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    finished = web("w3", "n1")
    finished["status"]["phase"] = "Succeeded"
    elsewhere = pod("w4", {"app": "web"}, "n1", namespace="other")
    placed = [web("w1", "n1"), terminating, finished, elsewhere, web("w5", "n3")]
    # zone a: 1, zone b: 1.
    incoming = web("new", topologySpreadConstraints=[spread()])
    assert run(incoming, TWO_ZONES, placed) == dict.fromkeys(["n1", "n2", "n3", "n4"])


def test_a_node_without_the_topology_key_fails_and_is_no_domain() -> None:
    # An empty n5 would hold the minimum at 0 if it were a domain; it is not: zones a and b
    # hold 1 each, so the minimum is 1 and a second replica fits in either.
    nodes = [*TWO_ZONES, node("n5", None)]
    placed = [web("w1", "n1"), web("w2", "n3")]
    incoming = web("new", topologySpreadConstraints=[spread()])
    assert run(incoming, nodes, placed) == {
        "n1": None,
        "n2": None,
        "n3": None,
        "n4": None,
        "n5": SPREAD_MISSING_LABEL,
    }


def test_min_domains_holds_the_global_minimum_at_zero_while_there_are_fewer_domains() -> None:
    placed = [web("w1", "n1"), web("w2", "n3")]
    assert run(web("new", topologySpreadConstraints=[spread()]), TWO_ZONES, placed) == dict.fromkeys(
        ["n1", "n2", "n3", "n4"]
    )
    incoming = web("new", topologySpreadConstraints=[spread(minDomains=3)])
    assert set(run(incoming, TWO_ZONES, placed).values()) == {SPREAD}


CORDONED = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def test_node_taints_policy_ignore_keeps_a_cordoned_empty_zone_as_a_domain_honor_drops_it() -> None:
    nodes = [node("n1", "a"), node("n2", "b"), node("n3", "c", taints=[CORDONED])]
    placed = [web("w1", "n1"), web("w2", "n2")]
    # Ignore (default): zone c counts 0, the minimum is 0, a and b are at 1 already.
    ignore = web("new", topologySpreadConstraints=[spread()])
    assert run(ignore, nodes, placed) == {"n1": SPREAD, "n2": SPREAD, "n3": None}
    honor = web("new", topologySpreadConstraints=[spread(nodeTaintsPolicy="Honor")])
    assert run(honor, nodes, placed) == dict.fromkeys(["n1", "n2", "n3"])


def test_node_affinity_policy_honor_counts_only_the_nodes_the_pod_may_use() -> None:
    nodes = [node("n1", "a", pool="gpu"), node("n2", "b", pool="gpu"), node("n3", "c", pool="cpu")]
    placed = [web("w1", "n1"), web("w2", "n2")]
    honor = web("new", nodeSelector={"pool": "gpu"}, topologySpreadConstraints=[spread()])
    assert run(honor, nodes, placed) == dict.fromkeys(["n1", "n2", "n3"])
    ignore = web(
        "new", nodeSelector={"pool": "gpu"}, topologySpreadConstraints=[spread(nodeAffinityPolicy="Ignore")]
    )
    assert run(ignore, nodes, placed) == {"n1": SPREAD, "n2": SPREAD, "n3": None}


def test_match_label_keys_count_only_pods_with_the_pods_own_values() -> None:
    old = [pod(f"o{i}", {"app": "web", "pod-template-hash": "old"}, n) for i, n in enumerate(["n1", "n2"])]
    incoming = pod(
        "new",
        {"app": "web", "pod-template-hash": "new"},
        topologySpreadConstraints=[spread(matchLabelKeys=["pod-template-hash"])],
    )
    assert run(incoming, TWO_ZONES, old) == dict.fromkeys(["n1", "n2", "n3", "n4"])
    without = pod("new", {"app": "web", "pod-template-hash": "new"}, topologySpreadConstraints=[spread()])
    assert run(without, TWO_ZONES, old)["n1"] == SPREAD


def test_an_empty_selector_counts_no_pod_and_schedule_anyway_does_not_filter() -> None:
    placed = [web("w1", "n1"), web("w2", "n2")]
    empty = web("new", topologySpreadConstraints=[{**spread(), "labelSelector": {}}])
    assert run(empty, TWO_ZONES, placed) == dict.fromkeys(["n1", "n2", "n3", "n4"])
    soft = web("new", topologySpreadConstraints=[{**spread(), "whenUnsatisfiable": "ScheduleAnyway"}])
    assert run(soft, TWO_ZONES, placed) == dict.fromkeys(["n1", "n2", "n3", "n4"])


def test_anti_affinity_keeps_the_pod_out_of_domains_with_a_matching_pod_terminating_or_not() -> None:
    terminating = web("w2", "n3")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    incoming = pod("new", {"app": "new"}, affinity=affinity("podAntiAffinity", term({"app": "web"}, ZONE)))
    assert run(incoming, TWO_ZONES, [web("w1", "n1")]) == {
        "n1": ANTI_AFFINITY,
        "n2": ANTI_AFFINITY,
        "n3": None,
        "n4": None,
    }
    assert set(run(incoming, TWO_ZONES, [web("w1", "n1"), terminating]).values()) == {ANTI_AFFINITY}


def test_anti_affinity_namespaces_and_namespace_selectors() -> None:
    elsewhere = [pod("w1", {"app": "web"}, "n1", namespace="other")]
    own_namespace = pod(
        "new", {"app": "new"}, affinity=affinity("podAntiAffinity", term({"app": "web"}, HOST))
    )
    assert run(own_namespace, TWO_ZONES, elsewhere)["n1"] is None
    listed = pod(
        "new",
        {"app": "new"},
        affinity=affinity("podAntiAffinity", term({"app": "web"}, HOST, namespaces=["other"])),
    )
    assert run(listed, TWO_ZONES, elsewhere)["n1"] == ANTI_AFFINITY
    every = pod(
        "new",
        {"app": "new"},
        affinity=affinity("podAntiAffinity", term({"app": "web"}, HOST, namespaceSelector={})),
    )
    assert run(every, TWO_ZONES, elsewhere)["n1"] == ANTI_AFFINITY
    by_label = {"matchLabels": {"team": "b"}}
    selected = pod(
        "new",
        {"app": "new"},
        affinity=affinity("podAntiAffinity", term({"app": "web"}, HOST, namespaceSelector=by_label)),
    )
    assert run(selected, TWO_ZONES, elsewhere)["n1"] == ANTI_AFFINITY
    wrong_team = {"matchLabels": {"team": "c"}}
    unselected = pod(
        "new",
        {"app": "new"},
        affinity=affinity("podAntiAffinity", term({"app": "web"}, HOST, namespaceSelector=wrong_team)),
    )
    assert run(unselected, TWO_ZONES, elsewhere)["n1"] is None


def test_existing_pods_anti_affinity_is_symmetric_and_reads_the_incoming_pods_namespace_labels() -> None:
    guard = pod("g", {"app": "db"}, "n1", affinity=affinity("podAntiAffinity", term({"noisy": "yes"}, ZONE)))
    noisy = pod("new", {"noisy": "yes"})
    assert run(noisy, TWO_ZONES, [guard]) == {
        "n1": EXISTING_ANTI_AFFINITY,
        "n2": EXISTING_ANTI_AFFINITY,
        "n3": None,
        "n4": None,
    }
    assert run(pod("new", {"noisy": "no"}), TWO_ZONES, [guard])["n1"] is None
    # The guard's term covers only its namespace unless it says otherwise.
    assert run(pod("new", {"noisy": "yes"}, namespace="other"), TWO_ZONES, [guard])["n1"] is None
    team_b = term({"noisy": "yes"}, ZONE, namespaceSelector={"matchLabels": {"team": "b"}})
    wide_guard = pod("g", {"app": "db"}, "n1", affinity=affinity("podAntiAffinity", team_b))
    assert run(pod("new", {"noisy": "yes"}, namespace="other"), TWO_ZONES, [wide_guard])["n1"] == (
        EXISTING_ANTI_AFFINITY
    )


def test_pod_affinity_needs_a_matching_pod_in_the_domain_and_the_key_on_the_node() -> None:
    nodes = [*TWO_ZONES, node("n5", None)]
    incoming = pod("new", {"app": "client"}, affinity=affinity("podAffinity", term({"app": "cache"}, ZONE)))
    cache = pod("c", {"app": "cache"}, "n3")
    assert run(incoming, nodes, [cache]) == {
        "n1": AFFINITY,
        "n2": AFFINITY,
        "n3": None,
        "n4": None,
        "n5": AFFINITY,
    }
    # No cache anywhere, and the pod is not one itself: nowhere.
    assert set(run(incoming, nodes, []).values()) == {AFFINITY}


def test_the_first_pod_of_a_group_with_affinity_to_itself_goes_anywhere_with_the_key() -> None:
    nodes = [*TWO_ZONES, node("n5", None)]
    first = pod("c1", {"app": "cache"}, affinity=affinity("podAffinity", term({"app": "cache"}, ZONE)))
    assert run(first, nodes, []) == {"n1": None, "n2": None, "n3": None, "n4": None, "n5": AFFINITY}
    # Once one runs, the others follow it.
    assert run(first, nodes, [pod("c0", {"app": "cache"}, "n4")]) == {
        "n1": AFFINITY,
        "n2": AFFINITY,
        "n3": None,
        "n4": None,
        "n5": AFFINITY,
    }


def test_pod_affinity_terms_must_all_match_one_pod() -> None:
    terms = [term({"app": "cache"}, ZONE), term({"tier": "hot"}, HOST)]
    incoming = pod("new", {"app": "client"}, affinity=affinity("podAffinity", *terms))
    split = [pod("c", {"app": "cache"}, "n1"), pod("h", {"tier": "hot"}, "n1")]
    assert set(run(incoming, TWO_ZONES, split).values()) == {AFFINITY}
    both = [pod("ch", {"app": "cache", "tier": "hot"}, "n1")]
    assert run(incoming, TWO_ZONES, both) == {"n1": None, "n2": AFFINITY, "n3": AFFINITY, "n4": AFFINITY}


def test_match_and_mismatch_label_keys_of_affinity_terms() -> None:
    mine = pod("a1", {"app": "web", "tenant": "t1"}, "n1")
    theirs = pod("b1", {"app": "web", "tenant": "t2"}, "n3")
    apart = term({"app": "web"}, HOST, mismatchLabelKeys=["tenant"])
    incoming = pod("new", {"app": "web", "tenant": "t1"}, affinity=affinity("podAntiAffinity", apart))
    assert run(incoming, TWO_ZONES, [mine, theirs]) == {
        "n1": None,
        "n2": None,
        "n3": ANTI_AFFINITY,
        "n4": None,
    }
    together = term({"app": "web"}, ZONE, matchLabelKeys=["tenant"])
    follower = pod("new", {"app": "web", "tenant": "t2"}, affinity=affinity("podAffinity", together))
    assert run(follower, TWO_ZONES, [mine, theirs]) == {
        "n1": AFFINITY,
        "n2": AFFINITY,
        "n3": None,
        "n4": None,
    }


@pytest.mark.parametrize("order", ["spread", "affinity", "anti", "existing"])
def test_a_node_failing_several_rules_is_counted_once_under_the_first(order: str) -> None:
    guard = pod("g", {"app": "db"}, "n1", affinity=affinity("podAntiAffinity", term({"app": "web"}, HOST)))
    placed = [guard, web("w1", "n1"), web("w2", "n2"), web("w3", "n3")]
    spec: Obj = {}
    if order == "spread":
        spec["topologySpreadConstraints"] = [spread(HOST)]
    if order in ("spread", "affinity"):
        spec["affinity"] = affinity("podAffinity", term({"app": "none"}, HOST))
    if order in ("spread", "affinity", "anti"):
        spec.setdefault("affinity", {}).update(affinity("podAntiAffinity", term({"app": "web"}, HOST)))
    reason = run(web("new", **spec), TWO_ZONES, placed)["n1"]
    assert (
        reason
        == {
            "spread": SPREAD,
            "affinity": AFFINITY,
            "anti": ANTI_AFFINITY,
            "existing": EXISTING_ANTI_AFFINITY,
        }[order]
    )


def test_the_index_finds_pods_by_their_narrowest_label_and_follows_changes() -> None:
    index = PodIndex()
    index.put("u1", resident_of(web("w1", "n1")))
    index.put("u2", resident_of(pod("x", {"app": "x"}, "n1")))
    requirements = required_terms(
        pod("q", {}, affinity=affinity("podAntiAffinity", term({"app": "web"}, HOST))), "podAntiAffinity"
    )[0].selector
    assert [r.node for r in index.select(requirements, None)] == ["n1"]
    assert index.put("u1", resident_of(web("w1", "n1"))) is False  # nothing changed
    assert index.put("u1", resident_of(pod("w1", {"app": "api"}, "n1"))) is True
    assert list(index.select(requirements, None)) == []
    assert index.put("u2", None) is True and len(index) == 1
    assert list(index.select(None, None)) == []
