"""Everything the API and the controllers share, in one place."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pitstop.sim.clock import SimClock
from pitstop.sim.counters import Recorder
from pitstop.sim.faults import FaultInjector
from pitstop.sim.models import NodeProfile
from pitstop.sim.resources import ResourceRegistry, ResourceType
from pitstop.sim.scenario import Scenario
from pitstop.sim.selectors import FieldTerm
from pitstop.sim.store import ObjectStore

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
    # Set by the controller manager: wakes it after API writes that need a reaction.
    poke: Callable[[], None] = lambda: None

    def rt(self, group: str, plural: str) -> ResourceType:
        return self.registry.lookup(group, plural)

    def pods_on_node(self, node: str) -> list[Obj]:
        return self.store.list("pods", fields=[FieldTerm("spec.nodeName", True, node)]).items

    def domain_of(self, node: str) -> str:
        profile = self.profiles.get(node)
        return profile.domain if profile else ""
