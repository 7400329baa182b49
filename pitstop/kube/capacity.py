"""Can these nodes leave? Spare GPUs on the nodes that stay, and PDB headroom.

GPUs: the pods on the leaving nodes that would be rescheduled (active, not DaemonSet, not
mirror) ask for some GPUs; the nodes that stay and can take pods (schedulable, Ready, not
tainted unschedulable/not-ready/unreachable/maintenance, matching the eligibility selector)
have allocatable GPUs minus what their pods ask for. GPUs of one pod must fit on one node,
so the pods are placed first-fit decreasing (training pods excepted: they stop at a checkpoint
and wait for room) into the free GPUs per node, each only on nodes
its nodeSelector, required node affinity and tolerations allow (`pitstop.kube.scheduling`: a
dedicated pool's GPUs do not count for pods that may not go there), and only where their
DoNotSchedule topology spread constraints and required pod (anti-)affinity allow, counting the
pods that stay and those placed before them (`pitstop.kube.pod_placement`); the check fails if a
pod does not fit, or if fewer than `margin` GPUs would remain spare afterwards. Pods that ask for
no GPUs are not placed (they leave the drained nodes and count nowhere), and preferred terms only
rank nodes: this is a floor, not a promise.

Serving replicas that would go down with nothing to take their place are reported: GPU pods of
a Deployment or StatefulSet with no PodDisruptionBudget, or the only running replica of their
workload. The check refuses them unless the task acknowledges the workloads by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pitstop.kube.annotations import (
    MAINTENANCE_TAINT,
    MIRROR_POD_ANNOTATION,
    NOT_READY_TAINT,
    UNREACHABLE_TAINT,
    UNSCHEDULABLE_TAINT,
)
from pitstop.kube.budgets import BudgetUse, budget_uses, covering
from pitstop.kube.checkpoint import Workload
from pitstop.kube.objects import (
    Obj,
    annotations_of,
    controller_of,
    is_daemonset_pod,
    key_of,
    labels_of,
    name_of,
    namespace_of,
    node_allocatable,
    node_is_ready,
    node_is_unschedulable,
    node_taints,
    pod_is_active,
    pod_is_finished,
    pod_node,
    resource_count,
)
from pitstop.kube.pod_placement import Placement, explain
from pitstop.kube.scheduling import can_run_on

BLOCKING_TAINTS = (UNSCHEDULABLE_TAINT, NOT_READY_TAINT, UNREACHABLE_TAINT, MAINTENANCE_TAINT)


def takes_pods(node: Mapping[str, Any]) -> bool:
    """A node new pods can land on."""
    if node_is_unschedulable(node) or not node_is_ready(node):
        return False
    return not any(
        t.get("key") in BLOCKING_TAINTS and t.get("effect") in ("NoSchedule", "NoExecute")
        for t in node_taints(node)
    )


def pods_to_move(pods: Iterable[Obj], leaving: set[str]) -> list[Obj]:
    """Pods on the leaving nodes that a drain would send elsewhere."""
    return [
        p
        for p in pods
        if pod_node(p) in leaving
        and pod_is_active(p)
        and not is_daemonset_pod(p)
        and MIRROR_POD_ANNOTATION not in annotations_of(p)
    ]


@dataclass(frozen=True)
class GpuAssessment:
    leaving: tuple[str, ...]
    resource: str
    receiving_nodes: int
    free: int
    needed: int
    margin: int
    moving: tuple[tuple[str, int], ...]  # (pod, GPUs) of the pods to move that ask for GPUs
    unplaced: tuple[tuple[str, int], ...]  # those that fit on no receiving node
    largest_free: int
    free_after: int
    # Unplaced pods that would have fit somewhere their nodeSelector/affinity/tolerations forbid.
    constrained: tuple[str, ...] = ()
    # Training pods on the leaving nodes: checkpointed and rescheduled when there is room, so
    # not counted against the GPUs that must be free now.
    waiting: tuple[str, ...] = ()
    # Unplaced pods that had room where their nodeSelector/affinity/tolerations allow, and why
    # topology spread or pod (anti-)affinity kept them off it.
    blocked: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return not self.unplaced and self.free_after >= self.margin

    def describe(self) -> str:
        text = (
            f"{len(self.moving)} pods to move need {self.needed} {self.resource}; "
            f"{self.free} free on {self.receiving_nodes} schedulable Ready nodes"
        )
        if self.margin:
            text += f" ({self.margin} must stay spare, {self.free_after} would)"
        if self.unplaced:
            shown = ", ".join(f"{pod} ({gpus})" for pod, gpus in self.unplaced[:5])
            more = f" and {len(self.unplaced) - 5} more" if len(self.unplaced) > 5 else ""
            text += f"; no node has room for {shown}{more} (largest free block: {self.largest_free})"
        if self.waiting:
            text += f"; {len(self.waiting)} training pods wait for room after their checkpoint"
        if self.constrained:
            text += (
                f"; {', '.join(self.constrained[:5])} would fit only on nodes "
                "its nodeSelector, node affinity or tolerations rule out"
            )
        for pod, why in self.blocked[:5]:
            text += f"; {pod} may not go where there is room: {why}"
        return text


def assess_gpus(
    nodes: Iterable[Obj],
    pods: Iterable[Obj],
    leaving: Iterable[str],
    *,
    resource: str,
    margin: int = 0,
    eligible: Callable[[Obj], bool] = lambda _node: True,
) -> GpuAssessment:
    leaving_set = set(leaving)
    pod_list = list(pods)
    node_list = list(nodes)
    receiving = [n for n in node_list if name_of(n) not in leaving_set and takes_pods(n) and eligible(n)]
    used: dict[str, int] = {}
    for running in pod_list:
        if not pod_is_finished(running):
            where = pod_node(running)
            used[where] = used.get(where, 0) + resource_count(running, resource)
    free = {name_of(n): max(0, node_allocatable(n, resource) - used.get(name_of(n), 0)) for n in receiving}
    by_name = {name_of(n): n for n in receiving}
    to_move = sorted(
        ((key_of(p), resource_count(p, resource), p) for p in pods_to_move(pod_list, leaving_set)),
        key=lambda item: (-item[1], item[0]),
    )
    to_move = [item for item in to_move if item[1] > 0]
    # Training stops at a checkpoint and is rescheduled when there is room (its pool may be
    # full); only what must keep running has to fit elsewhere now.
    waiting = tuple(key for key, _, pod in to_move if Workload(pod).is_training)
    to_move = [item for item in to_move if item[0] not in waiting]
    moving = [(pod, gpus) for pod, gpus, _ in to_move]
    blocks = dict(free)
    unplaced: list[tuple[str, int]] = []
    constrained: list[str] = []
    blocked: list[tuple[str, str]] = []
    # Every pod the drain evicts leaves its node; the drained nodes stay, cordoned.
    placement = Placement(
        node_list, pod_list, {key_of(p) for p in pods_to_move(pod_list, leaving_set)}, leaving_set
    )
    # The most constrained pods first (fewest nodes they may go to), then the largest: a pod
    # that may go anywhere must not take the only room a constrained one has.
    allowed: dict[str, int] = {}
    for key, _, pod in to_move:
        rule = placement.rule(pod)
        allowed[key] = sum(1 for n in receiving if can_run_on(pod, n) and rule(name_of(n)) is None)
    to_move.sort(key=lambda item: (allowed[item[0]], -item[1], item[0]))
    for pod_key, gpus, pod in to_move:
        rule = placement.rule(pod)
        room = [node for node in sorted(blocks) if blocks[node] >= gpus]
        may = [node for node in room if can_run_on(pod, by_name[node])]
        target = next((node for node in may if rule(node) is None), None)
        if target is None:
            unplaced.append((pod_key, gpus))
            if may:
                blocked.append((pod_key, explain(rule, may)))
            elif room:
                constrained.append(pod_key)
        else:
            blocks[target] -= gpus
            placement.place(pod, target)
    total_free = sum(free.values())
    needed = sum(g for _, g in moving)
    return GpuAssessment(
        leaving=tuple(sorted(leaving_set)),
        resource=resource,
        receiving_nodes=len(receiving),
        free=total_free,
        needed=needed,
        margin=margin,
        moving=tuple(moving),
        unplaced=tuple(unplaced),
        largest_free=max(free.values(), default=0),
        free_after=total_free - needed,
        constrained=tuple(constrained),
        waiting=waiting,
        blocked=tuple(blocked),
    )


SERVING_CONTROLLERS = ("ReplicaSet", "StatefulSet")


def workload_of(pod: Obj) -> str | None:
    """`Deployment ns/name` or `StatefulSet ns/name` for a serving replica, else None. A
    ReplicaSet's name is its Deployment's plus `-<pod-template-hash>`."""
    ref = controller_of(pod)
    if ref is None or ref.get("kind") not in SERVING_CONTROLLERS:
        return None
    name = str(ref.get("name") or "")
    if ref.get("kind") == "ReplicaSet":
        hash_ = labels_of(pod).get("pod-template-hash")
        if hash_ and name.endswith(f"-{hash_}"):
            return f"Deployment {namespace_of(pod)}/{name.removesuffix(f'-{hash_}')}"
        return f"ReplicaSet {namespace_of(pod)}/{name}"
    return f"StatefulSet {namespace_of(pod)}/{name}"


def unprotected_serving(
    moving: Iterable[Obj], all_pods: Iterable[Obj], pdbs: Iterable[Obj], resource: str
) -> dict[str, str]:
    """Workload -> why, for GPU serving replicas on the leaving nodes that would leave the
    service with nothing in their place: no PDB covers them, or they are its only replica."""
    pdb_list = list(pdbs)
    # Counted per workload (a Deployment, not its ReplicaSets): mid-rollout, the old
    # ReplicaSet's last pod is not the service's last replica.
    replicas: dict[str, int] = {}
    for pod in all_pods:
        workload = workload_of(pod)
        if workload is not None and pod_is_active(pod):
            replicas[workload] = replicas.get(workload, 0) + 1
    out: dict[str, str] = {}
    for pod in moving:
        workload = workload_of(pod)
        if workload is None or resource_count(pod, resource) == 0:
            continue
        if replicas.get(workload, 0) <= 1:
            out.setdefault(workload, "its only running replica would go")
        elif not covering(pdb_list, pod):
            out.setdefault(workload, "no PodDisruptionBudget covers it")
    return out


@dataclass(frozen=True)
class CapacityReport:
    leaving: tuple[str, ...]
    gpus: GpuAssessment | None
    budgets: list[BudgetUse] = field(default_factory=list)
    # "now": the evictions must fit in what the PDBs allow at this moment. "sequential": the
    # drain evicts one pod at a time and waits on each 429 for the replacement to become
    # healthy elsewhere (spare GPUs are checked above), so only a budget that never allows a
    # disruption falls short.
    pdb_headroom: str = "now"
    # Serving workloads that would go down unprotected (workload -> why), and those of them the
    # task acknowledged.
    unprotected: dict[str, str] = field(default_factory=dict)
    acknowledged: frozenset[str] = frozenset()

    @property
    def refused_workloads(self) -> dict[str, str]:
        return {w: why for w, why in self.unprotected.items() if w not in self.acknowledged}

    @property
    def short_budgets(self) -> list[BudgetUse]:
        if self.pdb_headroom == "sequential":
            return [b for b in self.budgets if b.never_allows]
        return [b for b in self.budgets if b.exceeds]

    @property
    def ok(self) -> bool:
        return (self.gpus is None or self.gpus.ok) and not self.short_budgets and not self.refused_workloads

    def describe(self) -> str:
        leaving = ", ".join(self.leaving)
        parts: list[str] = []
        if self.gpus is not None:
            parts.append(("GPUs: " if self.gpus.ok else "not enough GPUs: ") + self.gpus.describe())
        short = self.short_budgets
        if short and self.pdb_headroom == "sequential":
            parts.append("PDB never allows a disruption: " + "; ".join(b.describe() for b in short))
        elif short:
            parts.append("PDB headroom too small: " + "; ".join(b.describe() for b in short))
        elif self.budgets:
            parts.append(f"{len(self.budgets)} PDBs allow the evictions")
        refused = self.refused_workloads
        if refused:
            parts.append(
                "serving would go down unprotected: "
                + "; ".join(f"{w} ({why})" for w, why in sorted(refused.items()))
                + " (acknowledge them in `acknowledge_unprotected` if that is accepted)"
            )
        accepted = sorted(w for w in self.unprotected if w in self.acknowledged)
        if accepted:
            parts.append(f"acknowledged going down: {', '.join(accepted)}")
        head = "capacity is enough" if self.ok else "not enough capacity"
        where = f" if {leaving} leave" if leaving else ""
        return f"{head}{where}: " + "; ".join(parts)


def assess(
    nodes: Iterable[Obj],
    pods: Iterable[Obj],
    pdbs: Iterable[Obj],
    leaving: Iterable[str],
    *,
    resource: str,
    margin: int = 0,
    eligible: Callable[[Obj], bool] = lambda _node: True,
    check_gpus: bool = True,
    check_pdbs: bool = True,
    pdb_headroom: str = "now",
    acknowledged: Iterable[str] = (),
) -> CapacityReport:
    leaving_set = set(leaving)
    pod_list = list(pods)
    gpus = (
        assess_gpus(nodes, pod_list, leaving_set, resource=resource, margin=margin, eligible=eligible)
        if check_gpus
        else None
    )
    pdb_list = list(pdbs)
    moving = pods_to_move(pod_list, leaving_set)
    budgets = budget_uses(moving, pdb_list) if check_pdbs else []
    unprotected = unprotected_serving(moving, pod_list, pdb_list, resource) if check_pdbs else {}
    return CapacityReport(
        leaving=tuple(sorted(leaving_set)),
        gpus=gpus,
        budgets=budgets,
        pdb_headroom=pdb_headroom,
        unprotected=unprotected,
        acknowledged=frozenset(acknowledged),
    )
