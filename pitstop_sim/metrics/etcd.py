"""etcd's `/metrics` for the control-plane nodes of a platform scenario (one member each).

etcd_disk_wal_fsync_duration_seconds is etcd's own histogram (server/storage/wal/metrics.go:
buckets prometheus.ExponentialBuckets(0.001, 2, 14), 1 ms .. 8.192 s). Each member fsyncs
its WAL a steady number of times per simulated second, each fsync taking the node's
`etcd_wal_fsync_seconds` (default 2 ms, a healthy SSD; POST /_sim/nodes/{node}/telemetry
slows it down). etcd_server_has_leader says the member sees a leader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pitstop_sim.context import SimContext
from pitstop_sim.metrics.exposition import Family
from pitstop_sim.metrics.telemetry import Telemetry

BUCKETS: tuple[float, ...] = tuple(0.001 * 2**i for i in range(14))
FSYNCS_PER_SECOND = 20.0
HEALTHY_FSYNC_SECONDS = 0.002


def members(ctx: SimContext) -> list[str]:
    return sorted(name for name, p in ctx.profiles.items() if p.role == "control-plane")


def families(ctx: SimContext, telemetry: Telemetry, node: str) -> list[Family]:
    if node not in members(ctx):
        raise KeyError(f"{node!r} is not a control-plane node of this cluster (it runs no etcd member)")
    latency = telemetry.node(node).etcd_wal_fsync_seconds or HEALTHY_FSYNC_SECONDS
    now = ctx.clock.now()
    histogram = Family(
        "etcd_disk_wal_fsync_duration_seconds",
        "histogram",
        "The latency distributions of fsync called by WAL.",
    )
    for le in BUCKETS:
        rate = FSYNCS_PER_SECOND if latency <= le else 0.0
        histogram.add(
            (("le", _le(le)),),
            round(telemetry.counter("etcd_wal", node, _le(le)).advance(now, rate)),
            "_bucket",
        )
    count = round(telemetry.counter("etcd_wal", node, "+Inf").advance(now, FSYNCS_PER_SECOND))
    histogram.add((("le", "+Inf"),), count, "_bucket")
    histogram.add(
        (), telemetry.counter("etcd_wal_sum", node).advance(now, FSYNCS_PER_SECOND * latency), "_sum"
    )
    histogram.add((), count, "_count")
    leader = Family(
        "etcd_server_has_leader", "gauge", "Whether or not a leader exists. 1 is existence, 0 is not."
    )
    leader.add((), 1)
    return [leader, histogram]


def _le(bound: float) -> str:
    # Go's client formats bucket bounds with the shortest representation: 0.001, 0.002, ..., 8.192.
    return repr(round(bound, 6))
