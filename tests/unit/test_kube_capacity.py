"""Can nodes leave? Spare GPUs (first-fit) and PDB headroom (`pitstop.kube.capacity`)."""

from __future__ import annotations

from typing import Any

from pitstop.kube.budgets import budget_uses, pdb_from_refusal
from pitstop.kube.capacity import assess, assess_gpus, takes_pods

Obj = dict[str, Any]
RS = {"kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}
DS = {"kind": "DaemonSet", "name": "ds", "uid": "d", "controller": True}


def node(
    name: str,
    gpus: int = 8,
    *,
    ready: bool = True,
    cordoned: bool = False,
    taints: list[Obj] | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": cordoned, "taints": taints or []},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "Unknown"}],
        },
    }


def pod(
    name: str,
    where: str,
    gpus: int = 0,
    *,
    owner: Obj = RS,
    ready: bool = True,
    phase: str = "Running",
    app: str = "web",
) -> Obj:
    container: Obj = {"name": "c"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {
            "name": name,
            "namespace": "serving",
            "labels": {"app": app},
            "ownerReferences": [owner],
        },
        "spec": {"nodeName": where, "containers": [container]},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pdb(name: str, app: str, allowed: int, healthy: int = 3, desired: int = 2) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "serving"},
        "spec": {"selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": healthy, "desiredHealthy": desired},
    }


def test_pods_fit_in_the_free_gpus_of_the_remaining_nodes() -> None:
    nodes = [node("a"), node("b"), node("c")]
    pods = [pod("w1", "a", 4), pod("w2", "a", 2), pod("x", "b", 4), pod("agent", "a", 0, owner=DS)]
    result = assess_gpus(nodes, pods, ["a"], resource="nvidia.com/gpu")
    assert (result.needed, result.free, result.receiving_nodes, result.free_after) == (6, 12, 2, 6)
    assert result.ok
    assert result.moving == (("serving/w1", 4), ("serving/w2", 2))


def test_a_pod_that_fits_on_no_single_node_fails_even_when_the_total_is_enough() -> None:
    nodes = [node("a"), node("b"), node("c")]
    pods = [pod("big", "a", 8), pod("x", "b", 4), pod("y", "c", 4)]
    result = assess_gpus(nodes, pods, ["a"], resource="nvidia.com/gpu")
    assert (result.needed, result.free) == (8, 8)
    assert not result.ok
    assert result.unplaced == (("serving/big", 8),)
    assert "no node has room for serving/big (8) (largest free block: 4)" in result.describe()


def test_cordoned_not_ready_tainted_and_ineligible_nodes_take_no_pods() -> None:
    maintenance = [{"key": "pitstop.dev/maintenance", "effect": "NoSchedule"}]
    nodes = [
        node("a"),
        node("b", cordoned=True),
        node("c", ready=False),
        node("d", taints=maintenance),
        node("e", labels={"pool": "cpu"}),
        node("f", labels={"pool": "gpu"}),
    ]
    assert [takes_pods(n) for n in nodes] == [True, False, False, False, True, True]
    result = assess_gpus(
        nodes,
        [pod("w", "a", 8)],
        ["a"],
        resource="nvidia.com/gpu",
        eligible=lambda n: n["metadata"]["labels"].get("pool") == "gpu",
    )
    assert (result.receiving_nodes, result.free, result.ok) == (1, 8, True)


def test_margin_of_spare_gpus_is_enforced() -> None:
    nodes = [node("a"), node("b")]
    result = assess_gpus(nodes, [pod("w", "a", 6)], ["a"], resource="nvidia.com/gpu", margin=4)
    assert (result.free_after, result.ok) == (2, False)
    assert "(4 must stay spare, 2 would)" in result.describe()


def test_finished_pods_free_their_gpus_and_are_not_moved() -> None:
    nodes = [node("a"), node("b")]
    pods = [pod("old", "b", 8, phase="Succeeded"), pod("done", "a", 8, phase="Failed"), pod("w", "a", 8)]
    result = assess_gpus(nodes, pods, ["a"], resource="nvidia.com/gpu")
    assert (result.needed, result.free, result.ok) == (8, 8, True)


def test_pdb_headroom_counts_the_healthy_pods_on_the_leaving_nodes() -> None:
    pods = [
        pod("w1", "a"),
        pod("w2", "a"),
        pod("w3", "b"),
        pod("sick", "a", ready=False),
        pod("db", "a", app="db"),
    ]
    uses = budget_uses(
        [p for p in pods if p["spec"]["nodeName"] == "a"], [pdb("web", "web", 1), pdb("db", "db", 1)]
    )
    assert [(u.pdb, u.needed, u.allowed, u.exceeds) for u in uses] == [
        ("serving/db", 1, 1, False),
        ("serving/web", 2, 1, True),
    ]
    assert uses[1].describe() == (
        "PDB serving/web allows 1 disruption now (2 of its healthy pods to evict; 3 healthy, 2 required)"
    )


def test_sequential_headroom_refuses_only_a_budget_that_never_allows_a_disruption() -> None:
    # Two replicas of `web` on the leaving node, minAvailable 1 of 2: not both at once, but a
    # drain that evicts one, waits for its replacement elsewhere, then the other, gets through.
    nodes = [node("a"), node("b")]
    pods = [pod("w1", "a", 1), pod("w2", "a", 1)]
    budget = pdb("web", "web", 1, healthy=2, desired=1)
    budget["status"]["expectedPods"] = 2
    gpu = "nvidia.com/gpu"
    assert not assess(nodes, pods, [budget], ["a"], resource=gpu).ok
    assert assess(nodes, pods, [budget], ["a"], resource=gpu, pdb_headroom="sequential").ok
    # minAvailable equal to the replicas: no order of evictions gets past it.
    stuck = pdb("web", "web", 0, healthy=2, desired=2)
    stuck["status"]["expectedPods"] = 2
    report = assess(nodes, pods, [stuck], ["a"], resource=gpu, pdb_headroom="sequential")
    assert not report.ok
    assert "PDB never allows a disruption: PDB serving/web allows 0 disruptions now" in report.describe()


def test_report_fails_with_the_numbers_of_every_shortfall() -> None:
    nodes = [node("a"), node("b", 4)]
    pods = [pod("w1", "a", 4), pod("w2", "a", 4)]
    report = assess(nodes, pods, [pdb("web", "web", 0)], ["a"], resource="nvidia.com/gpu")
    assert not report.ok
    text = report.describe()
    assert text.startswith(
        "not enough capacity if a leave: not enough GPUs: 2 pods to move need 8 nvidia.com/gpu; 4 free"
    )
    assert "PDB headroom too small: PDB serving/web allows 0 disruptions now (2 of its healthy pods" in text
    fine = assess(
        [node("a"), node("b")],
        [pod("w1", "a", 4), pod("w9", "b")],  # another replica keeps serving
        [pdb("web", "web", 1)],
        ["a"],
        resource="nvidia.com/gpu",
    )
    assert fine.ok
    assert fine.describe() == (
        "capacity is enough if a leave: GPUs: 1 pods to move need 4 nvidia.com/gpu; 8 free on 1 schedulable "
        "Ready nodes; 1 PDBs allow the evictions"
    )
    skipped = assess(
        nodes,
        pods,
        [pdb("web", "web", 0)],
        ["a"],
        resource="nvidia.com/gpu",
        check_gpus=False,
        check_pdbs=False,
    )
    assert skipped.ok and skipped.gpus is None


def test_the_pdb_named_in_a_refusal_is_read_from_its_cause() -> None:
    causes = [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
        }
    ]
    assert pdb_from_refusal("serving", causes, "fallback") == "serving/web"
    assert pdb_from_refusal("serving", [], "fallback") == "fallback"


POOL_TAINT = {"key": "pool", "value": "training", "effect": "NoSchedule"}


def test_gpus_of_nodes_a_pod_may_not_use_do_not_count_for_it() -> None:
    # The only free GPUs are in a tainted training pool; the serving pod neither tolerates the
    # taint nor matches its nodeSelector elsewhere.
    nodes = [node("a"), node("pool-1", taints=[POOL_TAINT], labels={"pool": "training"}), node("c", 0)]
    serving = pod("w1", "a", 4)
    serving["spec"]["nodeSelector"] = {"pool": "inference"}
    other = pod("w2", "c")
    report = assess(nodes, [serving, other], [pdb("web", "web", 1)], ["a"], resource="nvidia.com/gpu")
    assert not report.ok and report.gpus is not None
    assert report.gpus.unplaced == (("serving/w1", 4),) and report.gpus.constrained == ("serving/w1",)
    assert "serving/w1 would fit only on nodes its nodeSelector, node affinity or tolerations rule out" in (
        report.describe()
    )
    # A pod that tolerates the taint and whose required node affinity picks the pool fits there.
    serving["spec"].pop("nodeSelector")
    serving["spec"]["tolerations"] = [{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}]
    serving["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["training"]}]}
                ]
            }
        }
    }
    assert assess(nodes, [serving, other], [pdb("web", "web", 1)], ["a"], resource="nvidia.com/gpu").ok
    # Affinity for a pool that has no room: unplaced again.
    serving["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"][0]["values"] = ["inference"]
    assert not assess(nodes, [serving, other], [pdb("web", "web", 1)], ["a"], resource="nvidia.com/gpu").ok


def test_serving_that_would_go_down_unprotected_is_refused_by_name_unless_acknowledged() -> None:
    rs = {**RS, "name": "vllm-7d9f8b6c5", "uid": "rs-vllm"}
    lone = pod("vllm-7d9f8b6c5-abcde", "a", 1, owner=rs)
    lone["metadata"]["labels"]["pod-template-hash"] = "7d9f8b6c5"
    no_pdb = pod("w1", "a", 1)  # web: two replicas, but no PDB covers them
    elsewhere = pod("w2", "b", 1)
    nodes = [node("a"), node("b")]
    report = assess(nodes, [lone, no_pdb, elsewhere], [], ["a"], resource="nvidia.com/gpu")
    assert report.unprotected == {
        "Deployment serving/vllm": "its only running replica would go",
        "ReplicaSet serving/rs": "no PodDisruptionBudget covers it",
    }
    assert not report.ok
    assert (
        "serving would go down unprotected: Deployment serving/vllm (its only running replica would go); "
        "ReplicaSet serving/rs (no PodDisruptionBudget covers it)"
    ) in report.describe()
    accepted = assess(
        nodes,
        [lone, no_pdb, elsewhere],
        [],
        ["a"],
        resource="nvidia.com/gpu",
        acknowledged=["Deployment serving/vllm", "ReplicaSet serving/rs"],
    )
    assert accepted.ok
    assert "acknowledged going down: Deployment serving/vllm, ReplicaSet serving/rs" in accepted.describe()
    # Pods without GPUs are not this check's business.
    cpu_only = pod("c1", "a", 0, owner=rs)
    assert assess(nodes, [cpu_only], [], ["a"], resource="nvidia.com/gpu").unprotected == {}


def test_training_pods_wait_for_room_after_their_checkpoint_instead_of_needing_it_now() -> None:
    job = {"kind": "Job", "name": "pretrain", "uid": "j", "controller": True}
    trainer = pod("pretrain-0", "a", 8, owner=job)
    trainer["metadata"]["labels"]["pitstop.dev/gang"] = "pretrain"
    report = assess([node("a"), node("b", 0)], [trainer], [], ["a"], resource="nvidia.com/gpu")
    assert report.ok and report.gpus is not None
    assert report.gpus.waiting == ("serving/pretrain-0",) and report.gpus.needed == 0
    assert "1 training pods wait for room after their checkpoint" in report.describe()


def test_mid_rollout_the_old_replica_sets_last_pod_is_not_the_services_last_replica() -> None:
    old = {"kind": "ReplicaSet", "name": "vllm-1111", "uid": "old", "controller": True}
    new = {"kind": "ReplicaSet", "name": "vllm-2222", "uid": "new", "controller": True}
    leaving = pod("vllm-1111-a", "a", 1, owner=old)
    leaving["metadata"]["labels"]["pod-template-hash"] = "1111"
    staying = pod("vllm-2222-b", "b", 1, owner=new)
    staying["metadata"]["labels"]["pod-template-hash"] = "2222"
    report = assess(
        [node("a"), node("b")], [leaving, staying], [pdb("web", "web", 1)], ["a"], resource="nvidia.com/gpu"
    )
    assert report.unprotected == {}


def test_the_most_constrained_pod_is_placed_first() -> None:
    # Two nodes with 4 free GPUs each; the pinned pod may only use "pool-1". Placed first-fit by
    # size alone, the free pod would take pool-1 and the pinned one would find no room.
    # ("a-pool" sorts before "z", so size-only first fit tries the pool first.)
    nodes = [node("a"), node("z", 4), node("a-pool", 4, labels={"pool": "x"})]
    free = pod("free", "a", 4)
    pinned = pod("pinned", "a", 4)
    pinned["spec"]["nodeSelector"] = {"pool": "x"}
    z_pod = pod("other", "z", 0)
    report = assess(nodes, [free, pinned, z_pod], [pdb("web", "web", 2)], ["a"], resource="nvidia.com/gpu")
    assert report.gpus is not None and report.gpus.unplaced == () and report.ok, report.describe()
