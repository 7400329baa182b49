"""The demo, watched by the embedded stack's Prometheus (when Debian's `prometheus` is here):
the in-process worker serves its /metrics where that Prometheus scrapes (`PITSTOP_WORKER_METRICS`,
default 127.0.0.1:9464), and while the run goes the demo asks Prometheus how many nodes
pitstop has cordoned (`pitstop_nodes_cordoned`) and compares it with what the rehearsal
cluster itself shows, at moments when the cluster did not change between two readings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx

from pitstop.metrics.server import MetricsAddressError, start_metrics
from pitstop.metrics.worker import WorkerMetrics
from pitstop.prometheus_stack import PROMETHEUS_BINARY, worker_metrics_target

if TYPE_CHECKING:
    from pitstop_sim import SimCluster

CORDONED_BY = "pitstop.dev/cordoned-by"


def cordoned_by_pitstop(sim: SimCluster) -> set[str]:
    """Nodes the cluster shows unschedulable with pitstop's cordon annotation."""
    return {
        node["metadata"]["name"]
        for node in sim.list("nodes")
        if node["spec"].get("unschedulable") and CORDONED_BY in (node["metadata"].get("annotations") or {})
    }


def available() -> bool:
    return PROMETHEUS_BINARY.is_file()


def start_worker_metrics() -> tuple[WorkerMetrics | None, str]:
    """The worker's /metrics where the stack's Prometheus scrapes it; (None, why) if it cannot."""
    address = worker_metrics_target()
    try:
        # The SDK's own metrics need a runtime of their own before any client; the demo's client
        # exists already, so only pitstop's families are served here (`pitstop worker` serves both).
        return WorkerMetrics(server=start_metrics(address, with_sdk=False)), address
    except MetricsAddressError as exc:
        return None, str(exc)


@dataclass
class CordonWatch:
    """Samples of (cluster's count, Prometheus's count) taken while the run goes."""

    prometheus_url: str
    cluster: str
    matched: list[int] = field(default_factory=list)
    asked: int = 0
    errors: list[str] = field(default_factory=list)

    def sample(self, sim: SimCluster) -> None:
        before = cordoned_by_pitstop(sim)
        try:
            counted = self._query()
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            self.errors.append(str(exc))
            return
        self.asked += 1
        if before and counted == len(before) and cordoned_by_pitstop(sim) == before:
            self.matched.append(counted)

    def _query(self) -> int | None:
        response = httpx.get(
            f"{self.prometheus_url}/api/v1/query",
            params={"query": f'pitstop_nodes_cordoned{{cluster="{self.cluster}"}}'},
            timeout=5,
        )
        response.raise_for_status()
        result = response.json()["data"]["result"]
        return int(float(result[0]["value"][1])) if result else None

    def said(self) -> str:
        if self.matched:
            return (
                f"Prometheus ({self.prometheus_url}) scraped the worker: pitstop_nodes_cordoned matched "
                f"the cluster's own count {len(self.matched)} times mid-run (up to {max(self.matched)} nodes)"
            )
        return (
            f"Prometheus ({self.prometheus_url}) never showed the cluster's count of cordoned nodes "
            f"mid-run ({self.asked} queries{'; ' + self.errors[-1] if self.errors else ''})"
        )
