"""GPU and etcd figures the scenario does not fix, set while the simulator runs.

`POST /_sim/nodes/{node}/telemetry` (TelemetryUpdate) sets a node's GPU temperature,
utilization and clocks-event reasons (all GPUs, or one) and, on a control-plane node, its
etcd's WAL fsync latency; `GET` answers the node's current overrides. Xids and ECC errors
are not here: they are the node's health (`NodeHealth.xid_errors`, `.ecc`), which the
validation logs read too, so the metrics and a `dcgmi`/`dmesg` probe always agree.

The counters a real exporter exposes (energy, NVLink bytes, WAL fsyncs) are integrated here
over simulated time, so they only ever grow, whatever the rates do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field


class GpuTelemetry(BaseModel):
    """Overrides for one GPU (`gpu`) or every GPU of the node (`gpu` omitted)."""

    model_config = ConfigDict(extra="forbid")

    gpu: int | None = Field(default=None, ge=0, description="The GPU's index; omitted: every GPU.")
    temperature_c: float | None = Field(default=None, ge=0, le=150)
    utilization_pct: float | None = Field(default=None, ge=0, le=100)
    clocks_event_reasons: int | None = Field(
        default=None,
        ge=0,
        description="NVML clocks-event reasons bitmask: 0x8 HW slowdown, 0x20 SW thermal, "
        "0x40 HW thermal, 0x80 HW power brake.",
    )


class TelemetryUpdate(BaseModel):
    """Body of `POST /_sim/nodes/{node}/telemetry`; what is omitted stays as it was."""

    model_config = ConfigDict(extra="forbid")

    gpus: list[GpuTelemetry] = Field(default_factory=list)
    etcd_wal_fsync_seconds: float | None = Field(
        default=None, gt=0, le=10, description="How long each WAL fsync of this node's etcd takes."
    )
    reset: bool = Field(default=False, description="Drop the node's overrides first.")


class NodeTelemetry(BaseModel):
    """A node's overrides (`GET /_sim/nodes/{node}/telemetry`)."""

    gpus: dict[int, GpuTelemetry] = Field(
        default_factory=dict, description="By GPU index; -1 holds the every-GPU overrides."
    )
    etcd_wal_fsync_seconds: float | None = None

    def gpu(self, index: int) -> GpuTelemetry:
        """The overrides that hold for GPU `index`: its own over the node-wide ones."""
        every = self.gpus.get(-1, GpuTelemetry())
        own = self.gpus.get(index, GpuTelemetry())
        merged = {**every.model_dump(exclude_none=True), **own.model_dump(exclude_none=True)}
        merged.pop("gpu", None)
        return GpuTelemetry.model_validate(merged)

    def apply(self, update: TelemetryUpdate) -> None:
        if update.reset:
            self.gpus.clear()
            self.etcd_wal_fsync_seconds = None
        for change in update.gpus:
            key = -1 if change.gpu is None else change.gpu
            current = self.gpus.get(key, GpuTelemetry(gpu=change.gpu))
            self.gpus[key] = current.model_copy(update=change.model_dump(exclude_none=True))
        if update.etcd_wal_fsync_seconds is not None:
            self.etcd_wal_fsync_seconds = update.etcd_wal_fsync_seconds


@dataclass
class Accumulator:
    """A counter that grows at a rate which may change between reads (simulated seconds)."""

    value: float = 0.0
    at: float | None = None

    def advance(self, now: float, rate: float) -> float:
        if self.at is not None and now > self.at:
            self.value += rate * (now - self.at)
        self.at = now
        return self.value


@dataclass
class Telemetry:
    """Every node's overrides and the exporters' counters (one per simulator)."""

    nodes: dict[str, NodeTelemetry] = field(default_factory=dict)
    counters: dict[tuple[str, ...], Accumulator] = field(default_factory=dict)

    def node(self, name: str) -> NodeTelemetry:
        return self.nodes.setdefault(name, NodeTelemetry())

    def counter(self, *key: str) -> Accumulator:
        return self.counters.setdefault(key, Accumulator())
