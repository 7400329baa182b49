"""Args of the GPU Operator driver modules: which way a node's NVIDIA driver is managed, and
the containerized driver rolled node by node by pitstop instead of the operator
(`pitstop.gpu.operator` names the upstream facts they rest on)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator

from pitstop.kube.names import check_name
from pitstop.module_args.kube import LONG_WAIT_HEARTBEAT, NodeArgs
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults

# The operator puts the version into an image tag (`<version>-<os>`): digits and dots, as
# NVIDIA numbers drivers (550.90.07); a precompiled driver is named by its branch (550).
DRIVER_VERSION_RE = re.compile(r"[0-9]+(\.[0-9]+){0,2}")


def _driver_version(value: str | None) -> str | None:
    if value is not None and not DRIVER_VERSION_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not an NVIDIA driver version like 570.86.15")
    return value


class _Policy(ModuleArgs):
    cluster_policy: str | None = Field(
        default=None, description="ClusterPolicy name; default: the cluster's only ClusterPolicy."
    )

    @field_validator("cluster_policy")
    @classmethod
    def _policy_name(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "ClusterPolicy name")


class _Namespace(ModuleArgs):
    namespace: str = Field(default="gpu-operator", description="Namespace of the GPU Operator.")

    @field_validator("namespace")
    @classmethod
    def _ns(cls, value: str) -> str:
        return check_name(value, "namespace", "label")


class DriverManagementArgs(NodeArgs, _Policy, _Namespace):
    """Read-only: `operator` (a running driver pod of the GPU Operator on the node),
    `precompiled` (the same, with `usePrecompiled`), or `host` (no ClusterPolicy driver and no
    driver pod: the driver comes from host packages). Anything contradictory or in between (a
    ClusterPolicy that manages the driver but no running driver pod on the node, driver pods
    without a ClusterPolicy that enables them) fails: the upgrade path must not be guessed."""


class OperatorDriverHoldArgs(_Policy):
    """Set the ClusterPolicy's `spec.driver.upgradePolicy.autoUpgrade: false` so that the
    operator rolls no driver pod itself (its DaemonSet is OnDelete: only a deleted pod comes back
    with the new driver), and with `version` set `spec.driver.version`. Idempotent; check mode
    says what it would change. Run once (localhost)."""

    version: str | None = Field(
        default=None, description="Driver version to set as spec.driver.version (e.g. 570.86.15)."
    )
    auto_upgrade: bool = Field(
        default=False,
        description="false: the hold. true: give the roll back to the operator (after a run whose nodes "
        "all run `version`, as the run's cleanup does when autoUpgrade was on before).",
    )

    _version = field_validator("version")(classmethod(lambda cls, v: _driver_version(v)))


class OperatorDriverNodeArgs(NodeArgs, _Policy, _Namespace):
    """Give one node (drained by the runbook first) the driver of the DaemonSet's current
    template: wait until the DaemonSet carries `version`, evict this node's driver pod (only
    this node's), wait until its new pod is Ready with that version and the node's GPUs are
    allocatable again. Refused while the operator's autoUpgrade is on (it would race pitstop)."""

    version: str | None = Field(
        default=None, description="Expected driver version; default: the ClusterPolicy's spec.driver.version."
    )
    version_label: str | None = Field(
        default=None,
        description="A node label that reports the loaded driver version (e.g. one feature discovery "
        "sets); when given, wait until it says `version` too.",
    )
    gpu_resource: str | None = Field(
        default="nvidia.com/gpu",
        description="Wait until this resource's allocatable equals capacity; null: skip.",
    )
    timeout_seconds: float = Field(default=1800, gt=0, description="Give up after this long.")
    poll_interval_seconds: float = Field(default=5.0, gt=0, description="How often to look again.")

    _version = field_validator("version")(classmethod(lambda cls, v: _driver_version(v)))


DRIVER_MANAGEMENT: ModuleSpec[DriverManagementArgs] = ModuleSpec(
    name="gpu.driver_management",
    args_model=DriverManagementArgs,
    summary="How a node's NVIDIA driver is managed: GPU Operator container, precompiled, or host packages.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=1),
    retry=RetryDefaults(),
    local="always",
)
OPERATOR_DRIVER_HOLD: ModuleSpec[OperatorDriverHoldArgs] = ModuleSpec(
    name="gpu.operator_driver_hold",
    args_model=OperatorDriverHoldArgs,
    summary="Turn the GPU Operator's driver autoUpgrade off (and set the version) so pitstop rolls it.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=1),
    retry=RetryDefaults(),
)
OPERATOR_DRIVER_NODE: ModuleSpec[OperatorDriverNodeArgs] = ModuleSpec(
    name="gpu.operator_driver_node",
    args_model=OperatorDriverNodeArgs,
    summary="Recreate one node's GPU Operator driver pod and wait for the new driver to be Ready.",
    supports_check_mode=True,
    disruptive=True,
    start_to_close=timedelta(hours=1),
    heartbeat_timeout=LONG_WAIT_HEARTBEAT,
    retry=RetryDefaults(maximum_attempts=3),
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [DRIVER_MANAGEMENT, OPERATOR_DRIVER_HOLD, OPERATOR_DRIVER_NODE]
