"""Can these nodes leave? Spare GPUs on the nodes that stay, and PDB headroom.

GPUs: the pods on the leaving nodes that would be rescheduled (active, not DaemonSet, not
mirror) ask for some GPUs; the nodes that stay and can take pods (schedulable, Ready, not
tainted unschedulable/not-ready/unreachable/maintenance, matching the eligibility selector)
have allocatable GPUs minus what their pods ask for. GPUs of one pod must fit on one node,
so the pods are placed first-fit decreasing into the free GPUs per node; the check fails if
a pod does not fit, or if fewer than `margin` GPUs would remain spare afterwards. Node
affinity and other scheduling constraints are not modelled: this is a floor, not a promise.
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
from pitstop.kube.budgets import BudgetUse, budget_uses
from pitstop.kube.objects import (
    Obj,
    annotations_of,
    is_daemonset_pod,
    key_of,
    name_of,
    node_allocatable,
    node_is_ready,
    node_is_unschedulable,
    node_taints,
    pod_is_active,
    pod_is_finished,
    pod_node,
    resource_count,
)

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
    receiving = [n for n in nodes if name_of(n) not in leaving_set and takes_pods(n) and eligible(n)]
    used: dict[str, int] = {}
    for running in pod_list:
        if not pod_is_finished(running):
            where = pod_node(running)
            used[where] = used.get(where, 0) + resource_count(running, resource)
    free = {name_of(n): max(0, node_allocatable(n, resource) - used.get(name_of(n), 0)) for n in receiving}
    moving = sorted(
        ((key_of(p), resource_count(p, resource)) for p in pods_to_move(pod_list, leaving_set)),
        key=lambda item: (-item[1], item[0]),
    )
    moving = [(pod, gpus) for pod, gpus in moving if gpus > 0]
    blocks = dict(free)
    unplaced: list[tuple[str, int]] = []
    for pod, gpus in moving:
        target = next((node for node in sorted(blocks) if blocks[node] >= gpus), None)
        if target is None:
            unplaced.append((pod, gpus))
        else:
            blocks[target] -= gpus
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
    )


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

    @property
    def short_budgets(self) -> list[BudgetUse]:
        if self.pdb_headroom == "sequential":
            return [b for b in self.budgets if b.never_allows]
        return [b for b in self.budgets if b.exceeds]

    @property
    def ok(self) -> bool:
        return (self.gpus is None or self.gpus.ok) and not self.short_budgets

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
) -> CapacityReport:
    leaving_set = set(leaving)
    pod_list = list(pods)
    gpus = (
        assess_gpus(nodes, pod_list, leaving_set, resource=resource, margin=margin, eligible=eligible)
        if check_gpus
        else None
    )
    budgets = budget_uses(pods_to_move(pod_list, leaving_set), pdbs) if check_pdbs else []
    return CapacityReport(
        leaving=tuple(sorted(leaving_set)), gpus=gpus, budgets=budgets, pdb_headroom=pdb_headroom
    )
