"""Fault injection on the API: errors and latency for matching requests.

Faults come from the scenario (`faults.api_errors`, `faults.latency`) or are added at run
time (`POST /_sim/faults`, `SimCluster.add_fault`). Randomness comes from the scenario seed,
so a run with `rate: 0.3` fails the same requests every time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pitstop_sim.errors import ApiError, injected
from pitstop_sim.models import ApiErrorFault, LatencyFault


@dataclass
class RequestInfo:
    verb: str
    resource: str
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None

    def label(self) -> str:
        return f"{self.verb} {self.resource}" + (f"/{self.subresource}" if self.subresource else "")


def _matches(fault: ApiErrorFault | LatencyFault, request: RequestInfo) -> bool:
    if fault.verb != "*" and fault.verb != request.verb:
        return False
    if fault.resource != "*" and fault.resource != request.resource:
        return False
    if fault.subresource != request.subresource and fault.subresource != "*":
        return False
    if fault.namespace is not None and fault.namespace != request.namespace:
        return False
    return not (isinstance(fault, ApiErrorFault) and fault.name is not None and fault.name != request.name)


@dataclass
class _ErrorState:
    fault: ApiErrorFault
    seen: int = 0
    injected: int = 0


@dataclass
class FaultInjector:
    seed: int = 0
    errors: list[_ErrorState] = field(default_factory=list)
    latency: list[LatencyFault] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def add_error(self, fault: ApiErrorFault) -> int:
        self.errors.append(_ErrorState(fault))
        return len(self.errors) - 1

    def add_latency(self, fault: LatencyFault) -> int:
        self.latency.append(fault)
        return len(self.latency) - 1

    def clear(self) -> None:
        self.errors.clear()
        self.latency.clear()

    def delay_seconds(self, request: RequestInfo) -> float:
        total = 0.0
        for fault in self.latency:
            if _matches(fault, request):
                total += (fault.ms + self._rng.uniform(0, fault.jitter_ms)) / 1000.0
        return total

    def error_for(self, request: RequestInfo) -> ApiError | None:
        for state in self.errors:
            fault = state.fault
            if not _matches(fault, request):
                continue
            state.seen += 1
            if state.seen <= fault.after:
                continue
            if fault.count is not None and state.injected >= fault.count:
                continue
            if fault.rate is not None and self._rng.random() >= fault.rate:
                continue
            state.injected += 1
            return injected(fault.status, fault.message, fault.retry_after_seconds)
        return None

    def injected_counts(self) -> dict[str, int]:
        return {
            f"{i}: {s.fault.status} {s.fault.verb} {s.fault.resource}"
            + (f"/{s.fault.subresource}" if s.fault.subresource else ""): s.injected
            for i, s in enumerate(self.errors)
        }

    def describe(self) -> dict[str, list[dict[str, object]]]:
        return {
            "api_errors": [
                {**s.fault.model_dump(exclude_none=True), "seen": s.seen, "injected": s.injected}
                for s in self.errors
            ],
            "latency": [f.model_dump(exclude_none=True) for f in self.latency],
        }
