"""Counters and the node timeline: the evidence safety tests read.

The API reports what clients did (evictions, deletions); a store listener watches nodes
(cordon, readiness) to keep the timeline and to close "drain" cycles. Everything here runs
on the simulator's loop thread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from pitstop.kube.objects import (
    annotations_of,
    is_daemonset_pod,
    labels_of,
    meta,
    name_of,
    namespace_of,
    node_is_ready,
    node_is_unschedulable,
    pod_is_active,
    pod_node,
)
from pitstop_sim.annotations import CHECKPOINT_DONE, CHECKPOINT_PROTOCOL, CHECKPOINT_REQUESTED, GANG_LABEL
from pitstop_sim.clock import SimClock
from pitstop_sim.models import (
    CountersSnapshot,
    DomainUnavailability,
    EvictionRecord,
    PdbViolation,
    TimelineEvent,
)
from pitstop_sim.store import WatchEvent

Obj = dict[str, Any]
EVICTION_LOG_LIMIT = 10_000
PodsOnNode = Callable[[str], list[Obj]]


def checkpoint_state(pod: Obj) -> Literal["none", "acknowledged", "unacknowledged"]:
    notes = annotations_of(pod)
    if not notes.get(CHECKPOINT_PROTOCOL):
        return "none"
    requested = notes.get(CHECKPOINT_REQUESTED)
    if requested and notes.get(CHECKPOINT_DONE) == requested:
        return "acknowledged"
    return "unacknowledged"


class Recorder:
    def __init__(
        self,
        clock: SimClock,
        domain_of: Callable[[str], str],
        pods_on_node: PodsOnNode,
        is_training: Callable[[Obj], bool] = lambda pod: GANG_LABEL in labels_of(pod),
    ) -> None:
        self._clock = clock
        self._is_training = is_training
        self._domain_of = domain_of
        self._pods_on_node = pods_on_node
        self.timeline: list[TimelineEvent] = []
        self._node_state: dict[str, tuple[bool, bool]] = {}
        # node -> API removals of non-DaemonSet pods in its current cordon cycle; None once counted
        self._cycle: dict[str, int | None] = {}
        self.reset()

    def reset(self) -> None:
        self.evictions: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()
        self.deletions: Counter[str] = Counter()
        self.forced: Counter[str] = Counter()
        self.drains: Counter[str] = Counter()
        self.cordons: Counter[str] = Counter()
        self.uncordons: Counter[str] = Counter()
        self.reboots: Counter[str] = Counter()
        self.firmware_flashes: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        self.per_pod: Counter[str] = Counter()
        self.violations: list[PdbViolation] = []
        self.eviction_log: list[EvictionRecord] = []
        self.training_without_protocol = 0
        self.training_unacknowledged = 0
        self.checkpoint_acks = 0
        # A reset starts fresh cycles for nodes that are cordoned now.
        self._cycle = {node: 0 for node in self._cycle}

    # --- what clients did -------------------------------------------------------------------

    def request(self, label: str) -> None:
        self.requests[label] += 1

    def eviction(self, pod: Obj, outcome: Literal["evicted", "refused", "dry-run"], pdb: str | None) -> None:
        node = pod_node(pod) or None
        training = self._is_training(pod)
        checkpoint = checkpoint_state(pod) if training else None
        record = EvictionRecord(
            t=round(self._clock.now(), 3),
            namespace=namespace_of(pod),
            pod=name_of(pod),
            uid=meta(pod).get("uid", ""),
            node=node,
            outcome=outcome,
            pdb=pdb,
            training=training,
            checkpoint=checkpoint,
        )
        if len(self.eviction_log) < EVICTION_LOG_LIMIT:
            self.eviction_log.append(record)
        if outcome == "refused":
            self.refusals[node or ""] += 1
        elif outcome == "evicted":
            self.evictions[node or ""] += 1
            self.per_pod[f"{record.namespace}/{record.pod}/{record.uid}"] += 1
            self._training_removed(pod)
            self._removed_from(node, pod)

    def deletion(self, pod: Obj, *, forced: bool) -> None:
        node = pod_node(pod) or None
        self.deletions[node or ""] += 1
        if forced:
            self.forced[node or ""] += 1
        self._training_removed(pod)
        self._removed_from(node, pod)

    def violation(self, violation: PdbViolation) -> None:
        self.violations.append(violation)

    def checkpoint_acknowledged(self) -> None:
        self.checkpoint_acks += 1

    def reboot(self, node: str) -> None:
        self.reboots[node] += 1

    def firmware_flash(self, node: str) -> None:
        self.firmware_flashes[node] += 1

    def _training_removed(self, pod: Obj) -> None:
        if not self._is_training(pod):
            return
        state = checkpoint_state(pod)
        if state == "none":
            self.training_without_protocol += 1
        elif state == "unacknowledged":
            self.training_unacknowledged += 1

    def _removed_from(self, node: str | None, pod: Obj) -> None:
        if node is None or is_daemonset_pod(pod):
            return
        count = self._cycle.get(node)
        if node not in self._cycle or count is None:
            return
        self._cycle[node] = count + 1
        remaining = [p for p in self._pods_on_node(node) if pod_is_active(p) and not is_daemonset_pod(p)]
        if not remaining:
            self.drains[node] += 1
            self._cycle[node] = None

    # --- what happened to nodes ---------------------------------------------------------------

    def observe(self, event: WatchEvent) -> None:
        if event.storage != "nodes":
            return
        node = event.obj
        name = name_of(node)
        state = (node_is_unschedulable(node), node_is_ready(node))
        before = self._node_state.get(name)
        if event.type == "DELETED":
            self._node_state.pop(name, None)
            self._append(name, "removed", *state)
            return
        self._node_state[name] = state
        if before is None:
            self._append(name, "registered", *state)
            if state[0]:
                self._cycle[name] = 0
            return
        if before[0] != state[0]:
            if state[0]:
                self.cordons[name] += 1
                self._cycle[name] = 0
                self._append(name, "cordoned", *state)
            else:
                self.uncordons[name] += 1
                self._cycle.pop(name, None)
                self._append(name, "uncordoned", *state)
        if before[1] != state[1]:
            self._append(name, "ready" if state[1] else "not_ready", *state)

    def note_reboot(self, name: str, node: Obj) -> None:
        """The node is going down now (the not_ready event follows)."""
        self._append(name, "reboot", node_is_unschedulable(node), False)

    def _append(self, node: str, event: Any, unschedulable: bool, ready: bool) -> None:
        self.timeline.append(
            TimelineEvent(
                t=round(self._clock.now(), 3),
                at=datetime.now(UTC),
                node=node,
                domain=self._domain_of(node),
                event=event,
                unschedulable=unschedulable,
                ready=ready,
            )
        )

    # --- reports ------------------------------------------------------------------------------

    def snapshot(self, faults: dict[str, int]) -> CountersSnapshot:
        return CountersSnapshot(
            evictions=dict(self.evictions),
            evictions_total=sum(self.evictions.values()),
            eviction_refusals=dict(self.refusals),
            deletions=dict(self.deletions),
            deletions_total=sum(self.deletions.values()),
            forced_deletions=dict(self.forced),
            forced_deletions_total=sum(self.forced.values()),
            drains=dict(self.drains),
            cordons=dict(self.cordons),
            uncordons=dict(self.uncordons),
            reboots=dict(self.reboots),
            firmware_flashes=dict(self.firmware_flashes),
            pdb_violations=len(self.violations),
            pdb_violation_log=list(self.violations),
            training_evictions_without_protocol=self.training_without_protocol,
            training_evictions_unacknowledged=self.training_unacknowledged,
            checkpoint_acks=self.checkpoint_acks,
            evictions_per_pod=dict(self.per_pod),
            eviction_log=list(self.eviction_log),
            faults_injected={k: v for k, v in faults.items() if v},
            requests=dict(self.requests),
        )


def unavailability(timeline: list[TimelineEvent]) -> list[DomainUnavailability]:
    """Per failure domain, the most nodes unavailable at once over the whole timeline."""
    state: dict[str, tuple[str, bool]] = {}
    nodes: dict[str, set[str]] = {}
    peak: dict[str, tuple[int, float | None]] = {}
    at_start: dict[str, int] = {}
    for event in timeline:
        nodes.setdefault(event.domain, set()).add(event.node)
        if event.event == "removed":
            state.pop(event.node, None)
        else:
            state[event.node] = (event.domain, event.unavailable)
        down = sum(1 for d, off in state.values() if d == event.domain and off)
        if event.event == "registered" and event.unavailable:
            at_start[event.domain] = at_start.get(event.domain, 0) + 1
        best, _ = peak.get(event.domain, (0, None))
        if down > best:
            peak[event.domain] = (down, event.t)
    return [
        DomainUnavailability(
            domain=domain,
            nodes=len(members),
            max_unavailable=peak.get(domain, (0, None))[0],
            at=peak.get(domain, (0, None))[1],
            unavailable_at_start=at_start.get(domain, 0),
        )
        for domain, members in sorted(nodes.items())
    ]
