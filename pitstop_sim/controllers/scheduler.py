"""A small default-scheduler: binds pending pods to Ready, schedulable nodes whose taints
they tolerate, whose labels match their nodeSelector/affinity, that have room for their
requests (GPUs, CPU, memory, pod count), and where the pod's DoNotSchedule topology spread
constraints, its required pod affinity/anti-affinity and the required anti-affinity of the pods
already there allow it (`interpod`: kube-scheduler's PodTopologySpread and InterPodAffinity
filters, run after the others as in its default plugin order). Replicas of one owner spread
across nodes. On a big cluster, as kube-scheduler does, a pod's search stops once it has found
enough feasible nodes to choose from (`feasible_nodes_to_find`), starting where the previous
search ended. A pod no node passes stays Pending with kube-scheduler's FailedScheduling message;
one held back by its own spread or pod affinity is tried again when pods are bound or relabelled,
as the scheduling queue moves it back on a pod add/update."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping
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
from pitstop_sim.controllers.interpod import (
    Filter,
    Guard,
    NodeView,
    PodIndex,
    has_own_constraints,
    has_required_anti_affinity,
    pod_filter,
    required_terms,
    resident_of,
)
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
        # Bound pods with required pod anti-affinity (every pod to schedule checks them), the
        # bound pods by label (built when a pod with spread or pod (anti-)affinity first needs
        # it), and the waiting pods whose own spread/affinity another pod's arrival may satisfy.
        self._guards: dict[str, Guard] = {}
        self._index: PodIndex | None = None
        self._view: NodeView | None = None
        self._waiting_for_pods: set[str] = set()
        self._pods_arrived = False

    def observe(self, event: WatchEvent) -> None:
        if event.storage == "pods":
            self._account(event)
            pod = event.obj
            if self._track(pod, deleted=event.type == "DELETED") and self._waiting_for_pods:
                self._pods_arrived = True
            if event.type != "DELETED" and not pod_node(pod) and pod_is_active(pod):
                self._pending.add((namespace_of(pod), name_of(pod)))
            elif event.type == "DELETED" or not pod_is_active(pod):
                uid = meta(pod).get("uid", "")
                self._waiting.pop(uid, None)
                self._waiting_for_pods.discard(uid)
                self._retry = True
        elif event.storage == "nodes":
            self._retry = True

    def pending(self) -> bool:
        return (
            bool(self._pending)
            or (self._retry and bool(self._waiting))
            or (self._pods_arrived and bool(self._waiting_for_pods))
        )

    def resync(self) -> None:
        for pod in self.ctx.store.list("pods").items:
            self._account_pod(pod)
            self._track(pod, deleted=False)
            if not pod_node(pod) and pod_is_active(pod):
                self._pending.add((namespace_of(pod), name_of(pod)))

    def _track(self, pod: Obj, *, deleted: bool) -> bool:
        """Keep the anti-affinity guards and the label index (once built) in step with a pod;
        True when a pod was bound or a bound pod's labels changed (pods waiting on their own
        spread or affinity may fit now)."""
        guarded = not deleted and has_required_anti_affinity(pod)
        if self._index is None and not guarded and not self._guards:
            return False  # nothing kept about pods yet: no cost for pods without these rules
        uid = meta(pod).get("uid", "")
        resident = None if deleted else resident_of(pod)
        if resident is not None and guarded:
            guard = self._guards.get(uid)
            if guard is None or guard.node != resident.node or guard.labels != resident.labels:
                terms = required_terms(pod, "podAntiAffinity")
                self._guards[uid] = Guard(resident.node, resident.labels, terms)
        elif self._guards:
            self._guards.pop(uid, None)
        # Without the index no pod has waited on its own spread or affinity yet.
        return self._index is not None and self._index.put(uid, resident) and resident is not None

    def _pod_index(self) -> PodIndex:
        if self._index is None:
            index = PodIndex()
            for pod in self.ctx.store.list("pods").items:
                index.put(meta(pod).get("uid", ""), resident_of(pod))
            self._index = index
        return self._index

    def _namespace_labels(self, namespace: str) -> dict[str, str]:
        obj = self.ctx.store.get("namespaces", None, namespace)
        return labels_of(obj) if obj is not None else {}

    def _namespaces(self) -> list[tuple[str, Mapping[str, str]]]:
        return [(name_of(ns), labels_of(ns)) for ns in self.ctx.store.list("namespaces").items]

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
        if self._pods_arrived:
            self._pods_arrived = False
            pending |= {self._waiting[uid][0] for uid in self._waiting_for_pods if uid in self._waiting}
        if not pending:
            return
        nodes = self.ctx.store.list("nodes").items
        self._view = None  # this round's view of the nodes, made if a pod needs it
        for ns, name in sorted(pending):
            pod = self.ctx.store.get("pods", ns, name)
            if pod is None or pod_node(pod) or not pod_is_active(pod):
                continue
            self._schedule(pod, nodes)
        self._view = None

    def _inter_pod_filter(self, pod: Obj, nodes: list[Obj]) -> Filter | None:
        """PodTopologySpread and InterPodAffinity for `pod`, or None when there is nothing to check."""
        if not self._guards and not has_own_constraints(pod):
            return None
        if self._view is None:
            self._view = NodeView(nodes, lambda name: self.ctx.store.get("nodes", None, name))
        return pod_filter(
            pod,
            self._view,
            self._pod_index,
            self._guards.values(),
            self._namespace_labels,
            self._namespaces,
        )

    def _schedule(self, pod: Obj, nodes: list[Obj]) -> None:
        requests = pod_requests(pod)
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        ref = controller_of(pod)
        owner = ref.get("uid") if ref else None
        reasons: Counter[str] = Counter()
        best: tuple[Any, ...] | None = None
        chosen: Obj | None = None
        inter_pod = self._inter_pod_filter(pod, nodes)
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
            if inter_pod is not None:
                why = inter_pod(meta(node).get("labels") or {})
                if why is not None:
                    reasons[why] += 1
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
        self._waiting_for_pods.discard(meta(pod).get("uid", ""))
        stored = self.ctx.store.update("pods", bound)
        self.events.record(
            stored,
            "Normal",
            "Scheduled",
            f"Successfully assigned {namespace_of(pod)}/{name_of(pod)} to {node}",
            "default-scheduler",
        )

    def _unschedulable(self, pod: Obj, total: int, reasons: Counter[str]) -> None:
        # kube-scheduler's FitError: "<count> <reason>" strings, sorted as strings.
        detail = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
        message = f"0/{total} nodes are available: {detail}." if detail else f"0/{total} nodes are available."
        message += f" preemption: 0/{total} nodes are available: {total} No preemption victims found"
        message += " for incoming pod."
        uid = meta(pod).get("uid", "")
        key = (namespace_of(pod), name_of(pod))
        previous = self._waiting.get(uid)
        self._waiting[uid] = (key, message)
        spec = pod.get("spec") or {}
        if spec.get("topologySpreadConstraints") or (spec.get("affinity") or {}).get("podAffinity"):
            self._waiting_for_pods.add(uid)
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
