"""The metric families pitstop exposes, in a registry of their own.

Names follow Prometheus's conventions (base units, `_total` for counters, `_seconds`). The
families are created once per process at import; `pitstop.metrics.activities` and
`pitstop.metrics.runs` update them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

# Not prometheus_client's global REGISTRY: an embedding application's metrics stay its own,
# and tests that import pitstop see only pitstop's families here.
REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

MODULE_FAILURES = Counter(
    "pitstop_module_failures",
    "Module activity attempts that failed, by module and error type (the ApplicationError type, "
    "or 'failed' for a module result with failed: true, e.g. a prom.query threshold).",
    ["module", "error_type"],
    registry=REGISTRY,
)
DRAIN_SECONDS = Histogram(
    "pitstop_drain_duration_seconds",
    "How long kube.drain took on this worker, by cluster and outcome (ok, failed).",
    ["cluster", "outcome"],
    # Drains wait for checkpoints and PDBs: seconds to hours.
    buckets=(5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400),
    registry=REGISTRY,
)
NODES_CORDONED = Gauge(
    "pitstop_nodes_cordoned",
    "Nodes cordoned by pitstop (unschedulable and annotated pitstop.dev/cordoned-by), as the cluster "
    "said after this worker's last kube.cordon or kube.uncordon there.",
    ["cluster"],
    registry=REGISTRY,
)
NODES_CORDONED_OBSERVED = Gauge(
    "pitstop_nodes_cordoned_observed_timestamp_seconds",
    "When pitstop_nodes_cordoned was last read from the cluster (unix seconds).",
    ["cluster"],
    registry=REGISTRY,
)
