"""The rehearsal scheduler's topology spread and inter-pod (anti-)affinity filters, observed
through the API: which replicas run where, and the FailedScheduling message of those that stay
Pending, worded as kube-scheduler words it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pitstop_sim import SimCluster
from tests.integration.sim.conftest import StartSim

Obj = dict[str, Any]

TIMING = "timing: {time_scale: 100, pod_start_seconds: 1, recreate_delay_seconds: 1}\n"
ZONE = "topology.kubernetes.io/zone"
NO_VICTIMS = " preemption: 0/{n} nodes are available: {n} No preemption victims found for incoming pod."


def _pods(sim: SimCluster, namespace: str, selector: str) -> list[Obj]:
    return [
        p
        for p in sim.list("pods", namespace, label_selector=selector)
        if not p["metadata"].get("deletionTimestamp")
    ]


def _scheduled(pod: Obj) -> Obj | None:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)


def _unschedulable(pods: list[Obj]) -> list[Obj]:
    out = []
    for pod in pods:
        condition = _scheduled(pod)
        if condition and condition["status"] == "False" and condition.get("reason") == "Unschedulable":
            out.append(pod)
    return out


def _settled(sim: SimCluster, namespace: str, selector: str, running: int, pending: int) -> list[Obj]:
    """Wait until `running` pods are bound and `pending` are marked Unschedulable; the pods."""

    def done(s: SimCluster) -> bool:
        pods = _pods(s, namespace, selector)
        bound = [p for p in pods if p["spec"].get("nodeName")]
        return (
            len(bound) == running and len(_unschedulable(pods)) == pending and len(pods) == running + pending
        )

    sim.wait_for(done, timeout=20, what=f"{running} bound and {pending} unschedulable pods")
    return _pods(sim, namespace, selector)


def _failed_scheduling(sim: SimCluster, namespace: str, pod: str) -> list[str]:
    return [
        e["message"]
        for e in sim.list("events", namespace)
        if e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == pod
    ]


def _zone_of(sim: SimCluster) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in sim.list("nodes")}


def test_hostname_anti_affinity_leaves_the_replica_with_no_free_node_pending(start_sim: StartSim) -> None:
    sim = start_sim(
        TIMING,
        """
        cluster: {nodes: 3, domains: 1}
        workloads:
          deployments:
            - {name: web, namespace: serving, replicas: 4, gpus: 2, anti_affinity: kubernetes.io/hostname}
        """,
    )
    pods = _settled(sim, "serving", "app=web", running=3, pending=1)
    nodes = [p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")]
    assert sorted(nodes) == ["gpu-node-001", "gpu-node-002", "gpu-node-003"]
    (waiting,) = _unschedulable(pods)
    expected = "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules." + NO_VICTIMS.format(
        n=3
    )
    assert _scheduled(waiting)["message"] == expected  # type: ignore[index]
    assert waiting["status"]["phase"] == "Pending"
    assert _failed_scheduling(sim, "serving", waiting["metadata"]["name"]) == [expected]

    # A replica goes: the waiting one takes its node, and the replacement waits in its turn.
    gone = next(p for p in pods if p["spec"].get("nodeName") == "gpu-node-002")
    sim.delete("pods", gone["metadata"]["name"], "serving")
    sim.wait_for(
        lambda s: (
            (s.get("pods", waiting["metadata"]["name"], "serving") or {}).get("spec", {}).get("nodeName")
            == "gpu-node-002"
        ),
        timeout=20,
        what="the waiting replica to take the freed node",
    )
    pods = _settled(sim, "serving", "app=web", running=3, pending=1)
    assert sorted(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")) == [
        "gpu-node-001",
        "gpu-node-002",
        "gpu-node-003",
    ]


def test_zone_spread_places_evenly_and_holds_back_the_replica_that_would_skew(start_sim: StartSim) -> None:
    """zone-b can take fewer replicas than zone-a (one node cordoned, the other full after two):
    zone-a gets one more than zone-b, and the last replica waits rather than skew further."""
    sim = start_sim(
        TIMING,
        """
        cluster:
          nodes: 4
          domains: 2
          gpus_per_node: 8
          node_overrides:
            gpu-node-004: {unschedulable: true}
        workloads:
          deployments:
            - name: api
              namespace: serving
              replicas: 6
              gpus: 4
              topology_spread: [{max_skew: 1}]
        """,
    )
    zone_of = _zone_of(sim)
    assert zone_of == {
        "gpu-node-001": "zone-a",
        "gpu-node-002": "zone-a",
        "gpu-node-003": "zone-b",
        "gpu-node-004": "zone-b",
    }
    pods = _settled(sim, "serving", "app=api", running=5, pending=1)
    assert Counter(zone_of[p["spec"]["nodeName"]] for p in pods if p["spec"].get("nodeName")) == {
        "zone-a": 3,
        "zone-b": 2,
    }
    (waiting,) = _unschedulable(pods)
    expected = (
        # One node of zone-a and the zone-b node are full; the other zone-a node has room but
        # a fourth replica there would skew 2 over zone-b. Sorted as "<count> <reason>" strings.
        "0/4 nodes are available: 1 node(s) didn't match pod topology spread constraints, "
        "1 node(s) were unschedulable, 2 Insufficient nvidia.com/gpu." + NO_VICTIMS.format(n=4)
    )
    assert _scheduled(waiting)["message"] == expected  # type: ignore[index]
    assert waiting["status"]["phase"] == "Pending"
    assert _failed_scheduling(sim, "serving", waiting["metadata"]["name"]) == [expected]

    # The cordoned node comes back: the waiting replica goes to zone-b.
    sim.patch("nodes", "gpu-node-004", {"spec": {"unschedulable": None}})
    pods = _settled(sim, "serving", "app=api", running=6, pending=0)
    assert Counter(zone_of[p["spec"]["nodeName"]] for p in pods) == {"zone-a": 3, "zone-b": 3}
    assert (sim.get("pods", waiting["metadata"]["name"], "serving") or {})["spec"][
        "nodeName"
    ] == "gpu-node-004"


def _pod(name: str, labels: dict[str, str], **spec: Any) -> Obj:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}], **spec},
    }


def _term(selector: dict[str, str], key: str) -> Obj:
    return {"labelSelector": {"matchLabels": selector}, "topologyKey": key}


def test_pod_affinity_waits_for_its_group_and_existing_anti_affinity_keeps_pods_away(
    start_sim: StartSim,
) -> None:
    sim = start_sim(TIMING, "cluster: {nodes: 4, domains: 2}\n")

    def bound(name: str) -> str:
        pod = sim.get("pods", name, "default") or {}
        return str(pod.get("spec", {}).get("nodeName") or "")

    def waits(name: str) -> str:
        sim.wait_for(
            lambda s: bool(_unschedulable([s.get("pods", name, "default") or {"status": {}}])),
            timeout=20,
            what=f"{name} to be unschedulable",
        )
        return str(_scheduled(sim.get("pods", name, "default") or {})["message"])  # type: ignore[index]

    # Affinity to a group with no pod yet, of which it is not one: nowhere.
    sim.create(
        "pods",
        _pod(
            "client",
            {"app": "client"},
            affinity={
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [_term({"app": "cache"}, ZONE)]
                }
            },
        ),
        "default",
    )
    assert waits(
        "client"
    ) == "0/4 nodes are available: 4 node(s) didn't match pod affinity rules." + NO_VICTIMS.format(n=4)

    # The first pod of a group that keeps together goes anywhere; then the waiting pod joins its zone.
    sim.create(
        "pods",
        _pod(
            "cache",
            {"app": "cache"},
            affinity={
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [_term({"app": "cache"}, ZONE)]
                }
            },
        ),
        "default",
    )
    sim.wait_for(lambda s: bool(bound("cache")) and bool(bound("client")), timeout=20, what="both pods bound")
    zone_of = _zone_of(sim)
    assert zone_of[bound("client")] == zone_of[bound("cache")]

    # An existing pod's anti-affinity keeps a matching pod out of its node (symmetry).
    guard_node = bound("cache")
    sim.create(
        "pods",
        _pod(
            "guard",
            {"app": "guard"},
            nodeName=guard_node,
            affinity={
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        _term({"noisy": "yes"}, "kubernetes.io/hostname")
                    ]
                }
            },
        ),
        "default",
    )
    sim.create(
        "pods",
        _pod("noisy", {"noisy": "yes"}, nodeSelector={"kubernetes.io/hostname": guard_node}),
        "default",
    )
    assert waits("noisy") == (
        "0/4 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules, "
        "3 node(s) didn't match Pod's node affinity/selector." + NO_VICTIMS.format(n=4)
    )
    sim.delete("pods", "guard", "default")
    sim.wait_for(
        lambda s: bound("noisy") == guard_node, timeout=20, what="noisy to be bound once the guard is gone"
    )
