"""Args of `acceptance.check`: upgrade acceptance by layer
(docs/upgrade-process.md "Acceptance by layer"), compared with the pre-upgrade baseline.

Run it once before the upgrade with `baseline: {}` and register the result; feed its
`measured` map as `baseline` of the runs after each stage. Every probe reads the cluster
through the Kubernetes API (Jobs for NCCL, DCGM, Xid and the representative benchmarks).
Optional probes are `n/a` with a reason until configured; a check in `require` may not be n/a.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator

from pitstop.acceptance.probes import BY_KEY, Direction, select
from pitstop.module_args.storage import S3Args
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults


class Workload(ModuleArgs):
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)


class JobSpec(ModuleArgs):
    """A Job the probe runs pinned to a node (its pod is labelled pitstop.dev/validation=<kind>)."""

    image: str = Field(min_length=1)
    command: list[str] | None = None
    args: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    node: str | None = Field(default=None, description="Default: the first of `nodes`.")
    gpus: int | None = Field(default=None, ge=0, description="Default: the node's allocatable GPUs.")


class BenchArgs(ModuleArgs):
    """The representative training and inference workloads (validation kind `bench`): their
    log ends with `METRIC <name>=<value> <unit>` lines."""

    training: JobSpec | None = Field(
        default=None,
        description="Training benchmark Job: METRIC samples_per_second, loss_first, loss_last, "
        "checkpoint_restore_seconds (checkpoint_save_seconds optional).",
    )
    inference: JobSpec | None = Field(
        default=None,
        description="Inference benchmark Job: METRIC model_load_seconds, ttft_ms_p50, tpot_ms_p50 "
        "(model_download_seconds optional).",
    )


class NcclArgs(ModuleArgs):
    image: str = Field(default="ghcr.io/nvidia/nccl-tests:2.13.10")
    binary: str = Field(default="all_reduce_perf")
    min_bytes: str = Field(default="1M")
    max_bytes: str = Field(default="8G")


class ObjectStorageArgs(S3Args):
    """The object store the platform's workloads use (models, checkpoints)."""


class AcceptanceArgs(ModuleArgs):
    layers: list[str] = Field(
        default_factory=list,
        description="Layers (kubernetes, gpu, network, storage, training, inference, governance) or "
        "checks (network/nccl) to run; default: all.",
    )
    nodes: list[str] = Field(
        default_factory=list, description="Nodes for the Job probes (NCCL, DCGM diag, Xid, benchmarks)."
    )
    baseline: dict[str, float] = Field(
        default_factory=dict, description="`measured` of the pre-upgrade run; {} records only."
    )
    max_deviation_pct: float = Field(
        default=10.0, ge=0, description="Allowed regression against the baseline."
    )
    thresholds: dict[str, float] = Field(
        default_factory=dict, description="Per-check limits (network/nccl: 5)."
    )
    directions: dict[str, Direction] = Field(
        default_factory=dict, description="Per-check overrides of which way is better."
    )
    on_deviation: Literal["fail", "report"] = Field(
        default="fail",
        description="fail: a deviation fails the module; report: listed in `deviations` for a "
        "gate that asks for a written explanation.",
    )
    require: list[str] = Field(default_factory=list, description="Checks that fail instead of being n/a.")
    workload_namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces of the platform's workloads (scheduling, PVCs, cost labels); "
        "default: every namespace but kube-* and the operators'.",
    )
    pending_limit_seconds: float = Field(
        default=300, ge=0, description="A pod Pending longer fails scheduling."
    )
    dns: Workload = Field(default_factory=lambda: Workload(namespace="kube-system", name="coredns"))
    cni_daemonsets: list[str] = Field(
        default_factory=list,
        description="'namespace/name' of the CNI DaemonSets; default: the well-known ones found.",
    )
    csi_daemonsets: list[str] = Field(
        default_factory=list,
        description="'namespace/name' of the CSI node DaemonSets; default: DaemonSets named *csi*.",
    )
    dcgm_exporter: str | None = Field(
        default=None, description="'namespace/name' of the DCGM exporter DaemonSet; default: found by name."
    )
    dcgm_diag_level: int | None = Field(
        default=None, ge=1, le=4, description="Also run dcgmi diag -r N on each of `nodes`."
    )
    dcgm_image: str = Field(default="nvcr.io/nvidia/cloud-native/dcgm:3.3.7-1-ubuntu22.04")
    dcgm_hostengine: str = Field(
        default="embedded",
        pattern=r"^(embedded|[A-Za-z0-9.-]+(:[0-9]{1,5})?)$",
        description="Where dcgmi finds nv-hostengine: `embedded` (started in the Job) or `host:port`.",
    )
    xid_image: str = Field(
        default="busybox:1.36", description="Image of the Job that reads each node's kernel log for Xid."
    )
    xid_privileged: bool = Field(
        default=True,
        description="Run the Xid probe privileged: reading the kernel log needs it where dmesg_restrict=1 "
        "(the default on current distributions). Unprivileged, the probe reports that it could not read "
        "the log instead of counting 0 Xids.",
    )
    network_operator_namespace: str = Field(default="nvidia-network-operator")
    nccl: NcclArgs = Field(default_factory=NcclArgs)
    cross_node: JobSpec | None = Field(
        default=None, description="A multi-node NCCL job (its log in nccl-tests format); n/a without."
    )
    object_storage: ObjectStorageArgs | None = Field(default=None, description="HeadBucket on this store.")
    bench: BenchArgs = Field(default_factory=BenchArgs)
    scaling: Workload | None = Field(
        default=None, description="Inference Deployment to scale +1 and back (off by default)."
    )
    canary: Workload | None = Field(default=None, description="The canary inference Deployment.")
    cluster_roles: list[str] = Field(
        default_factory=lambda: ["cluster-admin", "admin", "edit", "view"],
        description="ClusterRoles that must exist.",
    )
    cluster_role_bindings: list[str] = Field(default_factory=list, description="Bindings that must exist.")
    policy_webhooks: list[str] = Field(
        default_factory=list,
        description="Names of the policy engine's webhook configurations; default: any registered.",
    )
    audit: bool = Field(default=False, description="Check the apiserver's audit flags (kubeadm static pods).")
    cost_labels: list[str] = Field(default_factory=list, description="Labels every workload pod must carry.")
    namespace: str = Field(default="default", description="Namespace of the probe Jobs.")
    job_timeout_seconds: float = Field(default=1800, gt=0, description="Give up on one probe Job after this.")
    poll_interval_seconds: float = Field(default=5.0, gt=0)
    ready_timeout_seconds: float = Field(default=600, gt=0, description="Scaling: wait this long for ready.")

    @field_validator("layers")
    @classmethod
    def _layers(cls, value: list[str]) -> list[str]:
        select(value)
        return value

    @field_validator("baseline", "thresholds", "directions")
    @classmethod
    def _keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if key not in BY_KEY:
                select([key])
        return value

    @field_validator("require")
    @classmethod
    def _require(cls, value: list[str]) -> list[str]:
        for key in value:
            if key not in BY_KEY:
                select([key])
        return value

    @field_validator("cni_daemonsets", "csi_daemonsets")
    @classmethod
    def _qualified(cls, value: list[str]) -> list[str]:
        for ref in value:
            if ref.count("/") != 1:
                raise ValueError(f"{ref!r} must be 'namespace/name'")
        return value

    @field_validator("dcgm_exporter")
    @classmethod
    def _one_ref(cls, value: str | None) -> str | None:
        if value is not None and value.count("/") != 1:
            raise ValueError(f"{value!r} must be 'namespace/name'")
        return value


ACCEPTANCE_CHECK: ModuleSpec[AcceptanceArgs] = ModuleSpec(
    name="acceptance.check",
    args_model=AcceptanceArgs,
    summary="Upgrade acceptance by layer: API, GPU, network, storage, training, inference, "
    "governance, compared with the pre-upgrade baseline.",
    supports_check_mode=True,
    start_to_close=timedelta(hours=3),
    heartbeat_timeout=timedelta(seconds=120),
    retry=RetryDefaults(maximum_attempts=3),
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [ACCEPTANCE_CHECK]
