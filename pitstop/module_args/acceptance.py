"""Args of `acceptance.check`: upgrade acceptance by layer
(docs/upgrade-process.md "Acceptance by layer"), compared with the pre-upgrade baseline.

Run it once before the upgrade with `baseline: {}` and register the result; feed its
`measured` map as `baseline` of the runs after each stage. Every probe reads the cluster
through the Kubernetes API (Jobs for NCCL, DCGM, Xid, ECC and the representative benchmarks).
Optional probes are `n/a` with a reason until configured; a check in `require` may not be n/a.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from pitstop.acceptance.probes import BY_KEY, Direction, select
from pitstop.module_args.gpu import NCCL_TESTS_BINARY, NCCL_TESTS_IMAGE
from pitstop.module_args.kube import ConfigMapMount, distinct_mounts
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
    config_maps: list[ConfigMapMount] = Field(
        default_factory=list,
        description="ConfigMaps of `namespace` mounted read-only, e.g. the probe scripts of "
        "runbooks/manifests/probes at /opt/pitstop.",
    )
    node: str | None = Field(default=None, description="Default: the first of `nodes`.")
    gpus: int | None = Field(default=None, ge=0, description="Default: the node's allocatable GPUs.")

    @field_validator("config_maps")
    @classmethod
    def _mounts(cls, value: list[ConfigMapMount]) -> list[ConfigMapMount]:
        return distinct_mounts(value)


class BenchArgs(ModuleArgs):
    """The representative training and inference workloads (validation kind `bench`), read in
    the formats their tools print (`pitstop.acceptance.bench`). The shipped probes are in
    runbooks/manifests/probes: a PyTorch training step and vLLM's own serving benchmark."""

    training: JobSpec | None = Field(
        default=None,
        description="Training benchmark Job: METRIC lines samples_per_second, loss_first, loss_last, "
        "checkpoint_restore_seconds (checkpoint_save_seconds optional), as the shipped train_step.py "
        "prints them.",
    )
    inference: JobSpec | None = Field(
        default=None,
        description="Inference benchmark Job: vLLM's serving benchmark table (Median TTFT, Median TPOT, "
        "Request throughput) and its server log (Model loading took ... seconds, Time spent downloading "
        "weights), or METRIC lines model_load_seconds, ttft_ms_p50, tpot_ms_p50 (model_download_seconds "
        "optional).",
    )


class NcclArgs(ModuleArgs):
    image: str = Field(default=NCCL_TESTS_IMAGE)
    binary: str = Field(default=NCCL_TESTS_BINARY)
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
        description="Where dcgmi (diag; dmon for the dcgm Xid source) finds nv-hostengine: `embedded` "
        "(started in the Job) or `host:port` (the GPU Operator's nvidia-dcgm Service, "
        "internalTrafficPolicy Local: the node's own hostengine).",
    )
    xid_source: Literal["auto", "dcgm", "kernel_log"] = Field(
        default="auto",
        description="Where the Xid probe reads Xids. `dcgm`: DCGM field 230 (the last Xid of each GPU) "
        "with `dcgmi dmon` from the running nv-hostengine named in `dcgm_hostengine`, unprivileged; "
        "`kernel_log`: the NVRM lines of `dmesg`, privileged (`xid_privileged`); `auto`: dcgm when "
        "`dcgm_hostengine` names a hostengine, kernel_log when it is `embedded` (one started in the probe "
        "has seen none of the node's Xids).",
    )
    xid_image: str = Field(
        default="busybox:1.36", description="Image of the Job that reads each node's kernel log for Xid."
    )
    xid_privileged: bool = Field(
        default=True,
        description="Run the kernel_log Xid probe privileged: reading the kernel log needs it where "
        "dmesg_restrict=1 (the default on current distributions). Unprivileged, the probe reports that it "
        "could not read the log instead of counting 0 Xids. The dcgm source never runs privileged.",
    )
    ecc_gpus: Literal["request", "visible_devices"] = Field(
        default="request",
        description="How the ECC probe (`nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` in "
        "`dcgm_image`, unprivileged) gets the node's GPUs. `request`: it asks for the free ones and reads "
        "only those; `visible_devices`: it asks for none and sets NVIDIA_VISIBLE_DEVICES=all, reading every "
        "GPU, busy ones included (the NVIDIA Container Toolkit honours that from an unprivileged container "
        "unless accept-nvidia-visible-devices-envvar-when-unprivileged is false).",
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

    @model_validator(mode="after")
    def _xid_from_a_running_hostengine(self) -> AcceptanceArgs:
        if self.xid_source == "dcgm" and self.dcgm_hostengine == "embedded":
            raise ValueError(
                "xid_source: dcgm reads the Xids a running nv-hostengine recorded; one started in the "
                "probe (dcgm_hostengine: embedded) has seen none of the node's. Name the node's hostengine "
                "in dcgm_hostengine (the GPU Operator's nvidia-dcgm.gpu-operator.svc:5555) or use "
                "xid_source: kernel_log"
            )
        return self

    @property
    def xid_from(self) -> Literal["dcgm", "kernel_log"]:
        """The Xid source `auto` resolves to."""
        if self.xid_source == "auto":
            return "kernel_log" if self.dcgm_hostengine == "embedded" else "dcgm"
        return self.xid_source


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
