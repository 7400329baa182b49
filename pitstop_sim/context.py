"""Everything the API and the controllers share, in one place."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pitstop.kube.objects import labels_of, name_of, namespace_of
from pitstop_sim.annotations import GANG_LABEL
from pitstop_sim.clock import SimClock
from pitstop_sim.counters import Recorder
from pitstop_sim.faults import FaultInjector
from pitstop_sim.metrics.telemetry import Telemetry
from pitstop_sim.models import NodeProfile
from pitstop_sim.resources import KUBE_VERSION, ResourceRegistry, ResourceType
from pitstop_sim.scenario import Scenario
from pitstop_sim.selectors import FieldTerm
from pitstop_sim.store import ObjectStore
from pitstop_sim.writes import WriteLog

Obj = dict[str, Any]


@dataclass
class SimContext:
    scenario: Scenario
    clock: SimClock
    store: ObjectStore
    registry: ResourceRegistry
    recorder: Recorder
    faults: FaultInjector
    rng: random.Random
    profiles: dict[str, NodeProfile] = field(default_factory=dict)
    # Container logs by pod uid (the kubelet keeps them, not etcd).
    logs: dict[str, str] = field(default_factory=dict)
    pdbs_never_allow: set[str] = field(default_factory=set)
    # The control plane's version: what /version answers (kubeadm upgrade apply changes it).
    kubernetes_version: str = KUBE_VERSION
    # Writes and annotation changes per object since serving began (GET /_sim/writes).
    writes: WriteLog = field(default_factory=WriteLog)
    # GPU and etcd figures set at run time, and the exporters' counters (/metrics/...).
    telemetry: Telemetry = field(default_factory=Telemetry)
    # Set by the controller manager: wakes it after API writes that need a reaction.
    poke: Callable[[], None] = lambda: None

    def rt(self, group: str, plural: str) -> ResourceType:
        return self.registry.lookup(group, plural)

    def is_training(self, pod: Obj) -> bool:
        """The scenario's own word on whether a pod belongs to one of its training jobs, from
        its name (`<job>-...`), never from the marks pitstop reads: what a drain must not evict
        without a checkpoint, whichever framework runs it."""
        if GANG_LABEL in labels_of(pod):
            return True
        namespace, name = namespace_of(pod), name_of(pod)
        return any(
            namespace == t.namespace and name.startswith(f"{t.name}-")
            for t in self.scenario.workloads.training_jobs
        )

    def pods_on_node(self, node: str) -> list[Obj]:
        return self.store.list("pods", fields=[FieldTerm("spec.nodeName", True, node)]).items

    def effective_profile(self, profile: NodeProfile) -> NodeProfile:
        """The profile with the scenario's regressions that hold for its versions applied."""
        platform = self.scenario.platform
        if platform is None or not platform.regressions:
            return profile
        return profile.model_copy(update={"health": platform.health_for(profile)})

    def domain_of(self, node: str) -> str:
        profile = self.profiles.get(node)
        return profile.domain if profile else ""
