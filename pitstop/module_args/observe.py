"""Args of `kube.observe`: one look at the health of nodes after maintenance (used in a stage's
`observe` window, where a failing check is a rollback trigger)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator

from pitstop.kube.names import check_name
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults


class ObserveArgs(ModuleArgs):
    """Fails, with what it saw, when a node is not Ready, when pods on the nodes restarted more
    than allowed since `since_restarts`, or when the cluster recorded GPU error events for them."""

    nodes: list[str] = Field(default_factory=list, description="Nodes to look at (default: this host).")
    max_pod_restarts: int = Field(default=0, ge=0, description="Container restarts allowed on these nodes.")
    since_restarts: dict[str, int] = Field(
        default_factory=dict, description="Restart counts per pod seen earlier (from a registered result)."
    )
    include_daemonsets: bool = Field(
        default=False,
        description="Count restarts of DaemonSet pods too (a reboot restarts them all: off by default).",
    )
    gpu_error_events: list[str] = Field(
        default_factory=lambda: ["XidError", "DCGMHealthFailure", "GPUUnhealthy"],
        description="Event reasons that count as GPU errors.",
    )

    @field_validator("nodes")
    @classmethod
    def _node_names(cls, value: list[str]) -> list[str]:
        return [check_name(name, "node name") for name in value]


OBSERVE: ModuleSpec[ObserveArgs] = ModuleSpec(
    name="kube.observe",
    args_model=ObserveArgs,
    summary="Check nodes are Ready, pods on them do not restart, no GPU error events.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=2),
    retry=RetryDefaults(maximum_attempts=3),
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [OBSERVE]
