"""The capacity check places drained pods only where their topology spread constraints and
required pod (anti-)affinity allow (`pitstop.kube.pod_placement`, kube-scheduler's
PodTopologySpread and InterPodAffinity filters)."""

from __future__ import annotations

from typing import Any

from pitstop.kube.capacity import assess, assess_gpus
from pitstop.kube.pod_placement import Placement

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
RS = {"kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}


def node(name: str, gpus: int = 8, zone: str | None = None, **labels: str) -> Obj:
    all_labels = {HOST: name, **labels}
    if zone:
        all_labels[ZONE] = zone
    return {
        "metadata": {"name": name, "labels": all_labels},
        "spec": {},
        "status": {
            "allocatable": {GPU: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str, where: str, gpus: int = 0, *, app: str = "web", namespace: str = "serving", **spec: Any
) -> Obj:
    container: Obj = {"name": "c"}
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}, "ownerReferences": [RS]},
        "spec": {"nodeName": where, "containers": [container], **spec},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def spread(key: str = ZONE, max_skew: int = 1, app: str = "web", **extra: Any) -> list[Obj]:
    return [
        {
            "maxSkew": max_skew,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
            **extra,
        }
    ]


def anti(app: str, key: str = HOST, **extra: Any) -> Obj:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key, **extra}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def together(app: str, key: str = ZONE) -> Obj:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


# --- topology spread -------------------------------------------------------------------------


def zone_cluster(moving: Obj) -> tuple[list[Obj], list[Obj]]:
    """Zone z1: a (leaving) and b (full of db); zone z2: c, with one web pod and room for 4."""
    nodes = [node("a", zone="z1"), node("b", zone="z1"), node("c", zone="z2")]
    pods = [moving, pod("db", "b", 8, app="db"), pod("w2", "c", 4)]
    return nodes, pods


def test_spread_refuses_a_drain_that_the_free_gpus_alone_would_allow() -> None:
    # Without the constraint w1 fits on c; with it, z2 would hold 2 web pods and z1 none.
    nodes, pods = zone_cluster(pod("w1", "a", 4))
    assert assess_gpus(nodes, pods, ["a"], resource=GPU).ok
    nodes, pods = zone_cluster(pod("w1", "a", 4, topologySpreadConstraints=spread()))
    result = assess_gpus(nodes, pods, ["a"], resource=GPU)
    assert not result.ok and result.unplaced == (("serving/w1", 4),) and result.constrained == ()
    assert result.blocked == (
        ("serving/w1", f"topology spread on {ZONE} (app=web): maxSkew 1 would be exceeded (node c)"),
    )
    report = assess(nodes, pods, [], ["a"], resource=GPU, check_pdbs=False)
    assert (
        "no node has room for serving/w1 (4) (largest free block: 4); serving/w1 may not go where there "
        f"is room: topology spread on {ZONE} (app=web): maxSkew 1 would be exceeded (node c)"
    ) in report.describe()


def test_spread_fits_within_max_skew_and_schedule_anyway_is_only_a_preference() -> None:
    for constraints in (
        spread(max_skew=2),
        [{**spread()[0], "whenUnsatisfiable": "ScheduleAnyway"}],
        spread(app="other"),  # w1 does not match its own selector: z2 would hold 0 + 0 - 0
    ):
        nodes, pods = zone_cluster(pod("w1", "a", 4, topologySpreadConstraints=constraints))
        assert assess_gpus(nodes, pods, ["a"], resource=GPU).ok, constraints
    # Room in its own zone: it goes there.
    nodes, pods = zone_cluster(pod("w1", "a", 4, topologySpreadConstraints=spread()))
    pods[1] = pod("db", "b", 4, app="db")
    assert assess_gpus(nodes, pods, ["a"], resource=GPU).ok


def test_a_drained_node_stays_a_spread_domain_while_cordoned_unless_taints_are_honoured() -> None:
    # One web replica per host, maxSkew 1 per host. While a is drained it is an empty host
    # domain (nodeTaintsPolicy Ignore), so a second replica on b or c would be 2 - 0.
    nodes = [node("a"), node("b"), node("c")]
    pods = [pod("w1", "a", 4, topologySpreadConstraints=spread(HOST)), pod("w2", "b", 4), pod("w3", "c", 4)]
    result = assess_gpus(nodes, pods, ["a"], resource=GPU)
    assert result.blocked == (
        ("serving/w1", f"topology spread on {HOST} (app=web): maxSkew 1 would be exceeded (nodes b, c)"),
    )
    # Honouring taints leaves the cordoned node out of the domains.
    pods[0] = pod("w1", "a", 4, topologySpreadConstraints=spread(HOST, nodeTaintsPolicy="Honor"))
    assert assess_gpus(nodes, pods, ["a"], resource=GPU).ok
    # An empty host takes it.
    pods[0] = pod("w1", "a", 4, topologySpreadConstraints=spread(HOST))
    assert assess_gpus([*nodes, node("d")], pods, ["a"], resource=GPU).ok


def test_nodes_without_the_topology_key_are_not_domains_nor_candidates() -> None:
    # Zones z1 (b, one web pod) and z2 (c, one web pod, room); d has room but no zone label and
    # no web pod: it does not pull the minimum to 0, and w1 may not go there.
    nodes = [node("a", zone="z2"), node("b", 0, zone="z1"), node("c", zone="z2"), node("d")]
    pods = [pod("w1", "a", 4, topologySpreadConstraints=spread()), pod("w2", "b"), pod("w3", "c")]
    assert assess_gpus(nodes, pods, ["a"], resource=GPU).ok  # on c: 1 + 1 - 1
    nodes[2] = node("c", 0, zone="z2")
    result = assess_gpus(nodes, pods, ["a"], resource=GPU)
    assert result.blocked == (("serving/w1", f"topology spread on {ZONE}: no {ZONE} label (node d)"),)


def test_spread_domains_follow_node_affinity_and_min_domains() -> None:
    # z1: b (one web pod); z2: a (leaving) and c (one web pod, room); z3: e, a CPU pool w1's
    # nodeSelector rules out, with no web pod.
    def cluster(**extra: Any) -> tuple[list[Obj], list[Obj]]:
        nodes = [
            node("a", zone="z2", pool="gpu"),
            node("b", 0, zone="z1", pool="gpu"),
            node("c", zone="z2", pool="gpu"),
            node("e", zone="z3", pool="cpu"),
        ]
        w1 = pod("w1", "a", 4, topologySpreadConstraints=spread(**extra), nodeSelector={"pool": "gpu"})
        return nodes, [w1, pod("w2", "b"), pod("w3", "c")]

    # nodeAffinityPolicy Honor (the default): z3 is not a domain, the minimum is 1.
    assert assess_gpus(*cluster(), ["a"], resource=GPU).ok
    # Ignore: z3 counts with 0 pods, c would be 1 + 1 - 0.
    assert not assess_gpus(*cluster(nodeAffinityPolicy="Ignore"), ["a"], resource=GPU).ok
    # Fewer domains (2) than minDomains: the global minimum is 0.
    assert not assess_gpus(*cluster(minDomains=3), ["a"], resource=GPU).ok


def test_match_label_keys_count_only_the_pods_of_the_same_revision() -> None:
    nodes, pods = zone_cluster(pod("w1", "a", 4))
    constraints = spread(matchLabelKeys=["pod-template-hash"])
    pods[0]["spec"]["topologySpreadConstraints"] = constraints
    pods[0]["metadata"]["labels"]["pod-template-hash"] = "new"
    pods[2]["metadata"]["labels"]["pod-template-hash"] = "old"
    assert assess_gpus(nodes, pods, ["a"], resource=GPU).ok
    pods[2]["metadata"]["labels"]["pod-template-hash"] = "new"
    assert not assess_gpus(nodes, pods, ["a"], resource=GPU).ok


def test_pods_placed_earlier_count_for_the_next() -> None:
    # z1: b with room for both; z2: c, full. One web pod alone fits on b (1 - 0); the second
    # would make z1 2 against an empty z2.
    nodes = [node("a", zone="z1"), node("b", zone="z1"), node("c", 0, zone="z2")]
    w1 = pod("w1", "a", 4, topologySpreadConstraints=spread())
    w2 = pod("w2", "a", 4, topologySpreadConstraints=spread())
    assert assess_gpus(nodes, [w1], ["a"], resource=GPU).ok
    result = assess_gpus(nodes, [w1, w2], ["a"], resource=GPU)
    assert result.unplaced == (("serving/w2", 4),)
    assert "maxSkew 1 would be exceeded (node b)" in result.blocked[0][1]


# --- anti-affinity ---------------------------------------------------------------------------


def test_anti_affinity_forces_a_pod_onto_the_node_without_its_peer() -> None:
    # b and c have room; vllm-2 runs on b, so vllm-1 may only go to c.
    nodes = [node("a"), node("b"), node("c", 4)]
    vllm1 = pod("vllm-1", "a", 4, app="vllm", affinity=anti("vllm"))
    big = pod("big", "a", 8, app="batch")
    pods = [vllm1, big, pod("vllm-2", "b", 0, app="vllm")]
    placement = Placement(nodes, pods, {"serving/vllm-1", "serving/big"}, {"a"})
    rule = placement.rule(vllm1)
    assert (rule("b"), rule("c")) == (f"anti-affinity with app=vllm on {HOST}", None)
    # vllm-1 first (one node allowed), onto c; big then takes b.
    assert assess_gpus(nodes, pods, ["a"], resource=GPU).ok
    # No room on c: refused, and the reason names the rule.
    nodes[2] = node("c", 0)
    result = assess_gpus(nodes, pods, ["a"], resource=GPU)
    assert result.unplaced == (("serving/vllm-1", 4),)
    assert result.blocked == (("serving/vllm-1", f"anti-affinity with app=vllm on {HOST} (node b)"),)


def test_anti_affinity_covers_the_terms_namespaces_and_pods_placed_before() -> None:
    nodes = [node("a"), node("b")]
    moving = pod("vllm-1", "a", 4, app="vllm", affinity=anti("vllm"))
    elsewhere = pod("vllm-x", "b", app="vllm", namespace="other")
    assert assess_gpus(nodes, [moving, elsewhere], ["a"], resource=GPU).ok  # own namespace only
    for extra in (
        {"namespaces": ["other"]},
        {"namespaceSelector": {}},
        {"namespaceSelector": {"matchLabels": {"t": "x"}}},
    ):
        moving["spec"]["affinity"] = anti("vllm", **extra)
        assert not assess_gpus(nodes, [moving, elsewhere], ["a"], resource=GPU).ok, extra
    # Two replicas that keep apart, one node with room for both: the second is refused.
    first = pod("vllm-1", "a", 4, app="vllm", affinity=anti("vllm"))
    second = pod("vllm-2", "a", 4, app="vllm", affinity=anti("vllm"))
    result = assess_gpus(nodes, [first, second], ["a"], resource=GPU)
    assert result.unplaced == (("serving/vllm-2", 4),)


def test_an_existing_pods_anti_affinity_keeps_the_moving_pod_out_of_its_domain() -> None:
    nodes = [node("a", zone="z1"), node("b", zone="z1"), node("c", zone="z2")]
    guard = pod("db-0", "b", app="db", affinity=anti("web", ZONE))
    pods = [pod("w1", "a", 4), guard]
    assert assess_gpus(nodes, pods, ["a"], resource=GPU).ok  # on c
    nodes[2] = node("c", 0, zone="z2")
    result = assess_gpus(nodes, pods, ["a"], resource=GPU)
    assert result.blocked == (("serving/w1", f"anti-affinity of serving/db-0 (app=web) on {ZONE} (node b)"),)


# --- affinity --------------------------------------------------------------------------------


def test_pod_affinity_needs_a_matching_pod_in_the_nodes_domain() -> None:
    # The cache runs in z2 (c); b in z1 has room but no cache.
    nodes = [node("a", zone="z1"), node("b", zone="z1"), node("c", zone="z2")]
    w1 = pod("w1", "a", 4, affinity=together("cache"))
    pods = [w1, pod("cache", "c", app="cache")]
    assert assess_gpus(nodes, pods, ["a"], resource=GPU).ok
    nodes[2] = node("c", 0, zone="z2")
    result = assess_gpus(nodes, pods, ["a"], resource=GPU)
    assert result.blocked == (
        ("serving/w1", f"pod affinity with app=cache on {ZONE}: no such pod there (node b)"),
    )
    # A cache on the drained node leaves with it.
    pods[1] = pod("cache", "a", app="cache")
    nodes[2] = node("c", zone="z2")
    assert not assess_gpus(nodes, pods, ["a"], resource=GPU).ok


def test_the_first_pod_of_a_group_with_affinity_to_itself_may_go_anywhere() -> None:
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    lone = pod("w1", "a", 4, affinity=together("web"))
    assert assess_gpus(nodes, [lone], ["a"], resource=GPU).ok
    # Not when the group lives elsewhere (another web pod in z1, no room there).
    nodes.append(node("c", 0, zone="z1"))
    assert not assess_gpus(nodes, [lone, pod("w2", "c")], ["a"], resource=GPU).ok
