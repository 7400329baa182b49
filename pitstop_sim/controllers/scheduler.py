"""A small default-scheduler: binds pending pods to Ready, schedulable nodes whose taints
they tolerate, whose labels match their nodeSelector/affinity, and that have room for their
requests (GPUs, CPU, memory, pod count). Replicas of one owner spread across nodes. On a
big cluster, as kube-scheduler does, a pod's search stops once it has found enough feasible
nodes to choose from (`feasible_nodes_to_find`), starting where the previous search ended."""

from __future__ import annotations

import itertools
from collections import Counter
from decimal import Decimal
from typing import Any

from pitstop.kube.objects import (
    controller_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    node_is_ready,
    node_is_unschedulable,
    pod_is_active,
    pod_node,
)
from pitstop_sim.clock import rfc3339
from pitstop_sim.controllers.base import Controller
from pitstop_sim.events import EventRecorder
from pitstop_sim.objects import GPU, allocatable_of, node_affinity_matches, pod_requests, untolerated
from pitstop_sim.store import WatchEvent, clone

Obj = dict[str, Any]
Usage = dict[str, Decimal]
MIN_FEASIBLE_NODES = 100  # kube-scheduler's minFeasibleNodesToFind
MIN_PERCENTAGE_TO_SCORE = 5  # and minFeasibleNodesPercentageToFind


class Scheduler(Controller):
    name = "scheduler"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._pending: set[tuple[str, str]] = set()
        self._retry = False
        # What each bound, active pod takes from its node, kept up to date from pod events.
        self._contribution: dict[str, tuple[str, Usage, str | None]] = {}
        self._usage: dict[str, Usage] = {}
        self._owners: dict[str, Counter[str]] = {}
        self.events = EventRecorder(self.ctx.store)
        # Where the next pod's search through the nodes starts (kube-scheduler's
        # nextStartNodeIndex): searches that stop early do not all end on the first nodes.
        self._next_start = 0
        # Pods that did not fit, by uid: their key and the message last written to them.
        self._waiting: dict[str, tuple[tuple[str, str], str]] = {}

    def observe(self, event: WatchEvent) -> None:
        if event.storage == "pods":
            self._account(event)
            pod = event.obj
            if event.type != "DELETED" and not pod_node(pod) and pod_is_active(pod):
                self._pending.add((namespace_of(pod), name_of(pod)))
            elif event.type == "DELETED" or not pod_is_active(pod):
                self._waiting.pop(meta(pod).get("uid", ""), None)
                self._retry = True
        elif event.storage == "nodes":
            self._retry = True

    def pending(self) -> bool:
        return bool(self._pending) or (self._retry and bool(self._waiting))

    def resync(self) -> None:
        for pod in self.ctx.store.list("pods").items:
            self._account_pod(pod)
            if not pod_node(pod) and pod_is_active(pod):
                self._pending.add((namespace_of(pod), name_of(pod)))

    def _account(self, event: WatchEvent) -> None:
        uid = meta(event.obj).get("uid", "")
        if event.type == "DELETED":
            self._drop(uid)
        else:
            self._account_pod(event.obj)

    def _drop(self, uid: str) -> None:
        old = self._contribution.pop(uid, None)
        if old is None:
            return
        node, usage, owner = old
        totals = self._usage.setdefault(node, {})
        for key, value in usage.items():
            totals[key] = totals.get(key, Decimal(0)) - value
        if owner:
            self._owners.setdefault(node, Counter())[owner] -= 1

    def _account_pod(self, pod: Obj) -> None:
        uid = meta(pod).get("uid", "")
        node = pod_node(pod) or None
        counts = node is not None and pod_is_active(pod)
        old = self._contribution.get(uid)
        if old is not None and counts and old[0] == node:
            return
        self._drop(uid)
        if not counts or node is None:
            return
        usage = pod_requests(pod)
        usage["pods"] = Decimal(1)
        ref = controller_of(pod)
        owner = ref.get("uid") if ref else None
        self._contribution[uid] = (node, usage, owner)
        totals = self._usage.setdefault(node, {})
        for key, value in usage.items():
            totals[key] = totals.get(key, Decimal(0)) + value
        if owner:
            self._owners.setdefault(node, Counter())[owner] += 1

    def free(self, node: Obj) -> Usage:
        allocatable = allocatable_of(node)
        used = self._usage.get(name_of(node), {})
        return {key: allocatable.get(key, Decimal(0)) - used.get(key, Decimal(0)) for key in allocatable}

    def sync(self) -> None:
        pending, self._pending = self._pending, set()
        if self._retry:
            self._retry = False
            pending |= {key for key, _ in self._waiting.values()}
        if not pending:
            return
        nodes = self.ctx.store.list("nodes").items
        for ns, name in sorted(pending):
            pod = self.ctx.store.get("pods", ns, name)
            if pod is None or pod_node(pod) or not pod_is_active(pod):
                continue
            self._schedule(pod, nodes)

    def _schedule(self, pod: Obj, nodes: list[Obj]) -> None:
        requests = pod_requests(pod)
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        ref = controller_of(pod)
        owner = ref.get("uid") if ref else None
        reasons: Counter[str] = Counter()
        best: tuple[Any, ...] | None = None
        chosen: Obj | None = None
        wanted = feasible_nodes_to_find(len(nodes))
        start = self._next_start % len(nodes) if nodes else 0
        feasible = processed = 0
        for node in itertools.chain(nodes[start:], nodes[:start]):
            if feasible >= wanted:
                break
            processed += 1
            taints = (node.get("spec") or {}).get("taints") or []
            if node_is_unschedulable(node) and not _tolerates_unschedulable(tolerations):
                reasons["node(s) were unschedulable"] += 1
                continue
            if not node_is_ready(node):
                reasons["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"] += 1
                continue
            blocking = untolerated(tolerations, taints, ("NoSchedule", "NoExecute"))
            if blocking:
                taint = blocking[0]
                reasons[
                    f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
                ] += 1
                continue
            if not node_affinity_matches(pod, labels_of(node)):
                reasons["node(s) didn't match Pod's node affinity/selector"] += 1
                continue
            free = self.free(node)
            short = [key for key, want in requests.items() if want > 0 and free.get(key, Decimal(0)) < want]
            if free.get("pods", Decimal(0)) < 1:
                short.append("pods")
            if short:
                for key in short:
                    reasons["Too many pods" if key == "pods" else f"Insufficient {key}"] += 1
                continue
            same_owner = self._owners.get(name_of(node), Counter()).get(owner, 0) if owner else 0
            allocatable_gpu = allocatable_of(node).get(GPU, Decimal(0))
            used_gpu = allocatable_gpu - free.get(GPU, Decimal(0))
            score = (
                same_owner,
                float(used_gpu / allocatable_gpu) if allocatable_gpu else 0.0,
                float(self._usage.get(name_of(node), {}).get("pods", 0)),
                name_of(node),
            )
            feasible += 1
            if best is None or score < best:
                best, chosen = score, node
        if nodes:
            self._next_start = (start + processed) % len(nodes)
        if chosen is None:
            self._unschedulable(pod, len(nodes), reasons)
            return
        self._bind(pod, name_of(chosen))

    def _bind(self, pod: Obj, node: str) -> None:
        bound = clone(pod)
        bound["spec"]["nodeName"] = node
        status = bound.setdefault("status", {})
        status["conditions"] = [
            c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"
        ] + [
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": rfc3339()}
        ]
        self._waiting.pop(meta(pod).get("uid", ""), None)
        stored = self.ctx.store.update("pods", bound)
        self.events.record(
            stored,
            "Normal",
            "Scheduled",
            f"Successfully assigned {namespace_of(pod)}/{name_of(pod)} to {node}",
            "default-scheduler",
        )

    def _unschedulable(self, pod: Obj, total: int, reasons: Counter[str]) -> None:
        detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        message = f"0/{total} nodes are available: {detail}." if detail else f"0/{total} nodes are available."
        message += f" preemption: 0/{total} nodes are available: {total} No preemption victims found"
        message += " for incoming pod."
        uid = meta(pod).get("uid", "")
        key = (namespace_of(pod), name_of(pod))
        previous = self._waiting.get(uid)
        self._waiting[uid] = (key, message)
        if previous is not None and previous[1] == message:
            return
        updated = clone(pod)
        status = updated.setdefault("status", {})
        status["phase"] = "Pending"
        status["conditions"] = [
            c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"
        ] + [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(),
            }
        ]
        stored = self.ctx.store.update("pods", updated)
        self.events.record(stored, "Warning", "FailedScheduling", message, "default-scheduler")


def feasible_nodes_to_find(nodes: int) -> int:
    """How many feasible nodes kube-scheduler looks for before scoring (numFeasibleNodesToFind
    with the default percentageOfNodesToScore): every node up to 100, then an adaptive share,
    50% less 1% per 125 nodes, at least 5% and at least 100 nodes. So scheduling one pod on a
    10,000-node fleet checks about 500 nodes, not all of them; a pod that fits nowhere still
    checks all, and its FailedScheduling message counts them all."""
    if nodes < MIN_FEASIBLE_NODES:
        return nodes
    percentage = max(MIN_PERCENTAGE_TO_SCORE, 50 - nodes // 125)
    return max(MIN_FEASIBLE_NODES, nodes * percentage // 100)


def _tolerates_unschedulable(tolerations: list[Obj]) -> bool:
    taint = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    return not untolerated(tolerations, [taint], ("NoSchedule",))
