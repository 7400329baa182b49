"""Args of the `kube.*` modules (Kubernetes API)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from pitstop.modules import ModuleArgs, ModuleSpec, RetryDefaults, register


class NodeArgs(ModuleArgs):
    node: str | None = Field(
        default=None, description="Node name; defaults to the host's `node_name` var or its inventory name."
    )


class CordonArgs(NodeArgs):
    reason: str | None = Field(default=None, description="Recorded on the node as an annotation.")


class UncordonArgs(NodeArgs):
    force: bool = Field(
        default=False,
        description="Uncordon even if the node was cordoned before pitstop cordoned it.",
    )


class DrainArgs(NodeArgs):
    grace_period_seconds: int | None = Field(default=None, ge=0, description="Pod termination grace.")
    delete_emptydir_data: bool = Field(default=False, description="Evict pods that use emptyDir.")
    ignore_daemonsets: bool = Field(default=True, description="DaemonSet pods stay, as kubectl drain.")
    pod_selector: str | None = Field(default=None, description="Only evict pods matching this selector.")
    disable_eviction: bool = Field(
        default=False,
        description="DELETE pods instead of evicting them (bypasses PDBs). Must be written explicitly.",
    )
    retry_interval_seconds: float = Field(default=5.0, gt=0, description="Wait after a 429 from a PDB.")


CORDON = register(
    ModuleSpec(
        name="kube.cordon",
        args_model=CordonArgs,
        summary="Mark a node unschedulable, recording whether it already was.",
        supports_check_mode=True,
        start_to_close=timedelta(minutes=1),
    )
)
UNCORDON = register(
    ModuleSpec(
        name="kube.uncordon",
        args_model=UncordonArgs,
        summary="Restore the schedulability recorded before pitstop cordoned the node.",
        supports_check_mode=True,
        start_to_close=timedelta(minutes=1),
    )
)
DRAIN = register(
    ModuleSpec(
        name="kube.drain",
        args_model=DrainArgs,
        summary="Evict a node's pods through the Eviction API, waiting on PDBs, never forcing.",
        supports_check_mode=True,
        disruptive=True,
        start_to_close=timedelta(hours=2),
        heartbeat_timeout=timedelta(seconds=60),
        retry=RetryDefaults(maximum_attempts=0),
    )
)
