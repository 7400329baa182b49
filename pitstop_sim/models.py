"""Data that crosses the simulator's boundary: node health and profiles, faults, counters,
the timeline. Scenario files are built from these (see `scenario.py`); the admin endpoints
answer with them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

Verb = Literal["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuEcc(Strict):
    """One GPU's memory errors, as `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` and DCGM's
    ECC fields report them on the node (the GPUs not listed are clean)."""

    gpu: int = Field(ge=0, description="The GPU's index on the node.")
    volatile_uncorrectable: int = Field(
        default=0, ge=0, description="Uncorrectable (double bit) ECC errors since the driver loaded."
    )
    volatile_correctable: int = Field(default=0, ge=0, description="Corrected (single bit) errors since.")
    aggregate_uncorrectable: int = Field(
        default=0, ge=0, description="Lifetime uncorrectable errors (memory remapped or retired since)."
    )
    remap_pending: bool = Field(
        default=False, description="A row remap (page retirement) awaits a GPU reset."
    )
    remap_failure: bool = Field(default=False, description="A row remap failed (Remapping Failure Occurred).")


class NodeHealth(Strict):
    """What validation on a node finds (drives the logs of `pitstop.dev/validation` pods)."""

    nccl_busbw_gbps: float = Field(
        default=390.0, ge=0, description="all_reduce bus bandwidth NCCL tests report."
    )
    dcgm_failures: list[str] = Field(
        default_factory=list,
        description="DCGM diagnostic tests that fail, e.g. [Memory, PCIe, 'Targeted Power'].",
    )
    fails_validation: list[str] = Field(
        default_factory=list, description="Validation kinds that fail outright on this node ('*' for all)."
    )
    xid_errors: list[int] = Field(
        default_factory=list,
        description="Xid errors, the i-th on GPU i: the kernel log's NVRM lines and DCGM's last Xid "
        "of the GPU.",
    )
    ecc: list[GpuEcc] = Field(
        default_factory=list, description="GPUs with memory errors (ECC counters, row remapping)."
    )
    never_returns_after_reboot: bool = Field(
        default=False, description="The node stays NotReady after a reboot."
    )
    train_samples_per_s: float = Field(
        default=2400.0, ge=0, description="Throughput of the representative training bench (samples/s)."
    )
    inference_ttft_ms: float = Field(
        default=180.0, ge=0, description="Median time to first token of the inference bench (ms)."
    )
    inference_tpot_ms: float = Field(
        default=22.0, ge=0, description="Median time per output token of the inference bench (ms)."
    )

    def fails(self, kind: str) -> bool:
        return "*" in self.fails_validation or kind in self.fails_validation


def node_info_kube_proxy_version(kubelet_version: str) -> str:
    """What a kubelet writes into `nodeInfo.kubeProxyVersion`: its own version (it never knew
    kube-proxy's), and from 1.33 nothing (KEP-4004, the field is deprecated)."""
    parts = kubelet_version.lstrip("v").split(".")
    try:
        minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return kubelet_version
    return "" if minor >= (1, 33) else kubelet_version


class NodeProfile(BaseModel):
    """The simulator's own view of a node: versions and health, mirrored into labels/nodeInfo."""

    name: str
    domain: str
    gpu_product: str
    gpus: int
    driver_version: str
    firmware_version: str
    kernel_version: str
    os_image: str
    kubelet_version: str
    container_runtime: str
    health: NodeHealth = Field(default_factory=NodeHealth)
    role: Literal["gpu", "control-plane"] = "gpu"
    packages: dict[str, str] = Field(
        default_factory=dict, description="Installed Debian packages and their versions (the dpkg view)."
    )
    held: list[str] = Field(default_factory=list, description="Packages on hold (`apt-mark hold`).")
    nic_driver: str | None = Field(default=None, description="MLNX_OFED version (`ofed_info -s`).")
    boot_id: str = ""
    reboots: int = 0
    pending: ProfileUpdate | None = Field(default=None, description="Applied at the next reboot.")


class ProfileUpdate(Strict):
    """Body of `POST /_sim/nodes/{node}/profile`: versions and health to set, now or at the next reboot
    (a firmware flash only shows after the node restarts)."""

    driver_version: str | None = None
    firmware_version: str | None = None
    kernel_version: str | None = None
    os_image: str | None = None
    kubelet_version: str | None = None
    container_runtime: str | None = None
    nic_driver: str | None = None
    gpu_product: str | None = None
    health: NodeHealth | None = None
    apply: Literal["now", "reboot"] = "now"


class ApiErrorFault(Strict):
    """Answer matching requests with an error instead of serving them."""

    verb: Verb = "*"
    resource: str = Field(default="*", description="Plural resource name, e.g. pods, nodes, clusterqueues.")
    subresource: str | None = Field(default=None, description="e.g. eviction, status, log.")
    namespace: str | None = None
    name: str | None = None
    status: int = Field(default=500, ge=400, le=599)
    message: str | None = None
    count: int | None = Field(default=None, ge=1, description="Fail this many matching requests, then serve.")
    rate: float | None = Field(
        default=None, gt=0, le=1, description="Fail this fraction of matching requests."
    )
    after: int = Field(default=0, ge=0, description="Serve this many matching requests before failing any.")
    retry_after_seconds: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _count_or_rate(self) -> Self:
        if self.count is not None and self.rate is not None:
            raise ValueError("give 'count' or 'rate', not both")
        return self


class LatencyFault(Strict):
    """Delay matching requests (real milliseconds; API latency is not time-scaled)."""

    verb: Verb = "*"
    resource: str = "*"
    subresource: str | None = None
    namespace: str | None = None
    ms: float = Field(ge=0, le=60_000)
    jitter_ms: float = Field(default=0, ge=0)


class EvictionRecord(BaseModel):
    t: float
    namespace: str
    pod: str
    uid: str
    node: str | None
    outcome: Literal["evicted", "refused", "dry-run"]
    pdb: str | None = None
    training: bool = False
    checkpoint: Literal["none", "acknowledged", "unacknowledged"] | None = None


class PdbViolation(BaseModel):
    t: float
    pdb: str
    pod: str
    node: str | None
    via: Literal["eviction", "delete"]
    current_healthy: int
    desired_healthy: int


class ObjectWrites(BaseModel):
    writes: int = Field(description="Changes stored for the object: create, update, delete.")
    annotation_changes: dict[str, int] = Field(
        default_factory=dict,
        description="Per annotation key, how often its value changed (set, changed, removed).",
    )


class WriteCounts(BaseModel):
    """`GET /_sim/writes`: objects of one resource written since the start or the last reset."""

    resource: str
    annotation: str | None = Field(
        default=None, description="Only objects whose value of this annotation key changed."
    )
    objects: dict[str, ObjectWrites] = Field(
        default_factory=dict, description='By "name", or "namespace/name" for namespaced objects.'
    )


class CountersSnapshot(BaseModel):
    """`GET /_sim/counters`. Per-node maps only list nodes with a non-zero count."""

    evictions: dict[str, int] = Field(default_factory=dict, description="Successful evictions per node.")
    evictions_total: int = 0
    eviction_refusals: dict[str, int] = Field(default_factory=dict, description="429s (PDB) per node.")
    deletions: dict[str, int] = Field(
        default_factory=dict, description="Pods deleted through the API (DELETE, not eviction) per node."
    )
    deletions_total: int = 0
    forced_deletions: dict[str, int] = Field(
        default_factory=dict,
        description="DELETEs that bypassed the Eviction API for a PDB-covered pod, or used grace period 0.",
    )
    forced_deletions_total: int = 0
    drains: dict[str, int] = Field(
        default_factory=dict,
        description="Cordon cycles in which the node was emptied of all non-DaemonSet pods by the API.",
    )
    cordons: dict[str, int] = Field(default_factory=dict)
    uncordons: dict[str, int] = Field(default_factory=dict)
    reboots: dict[str, int] = Field(default_factory=dict)
    firmware_flashes: dict[str, int] = Field(
        default_factory=dict, description="Runs of the firmware updater per node (over SSH)."
    )
    pdb_violations: int = Field(default=0, description="Removals that left a PDB below desiredHealthy.")
    pdb_violation_log: list[PdbViolation] = Field(default_factory=list)
    training_evictions_without_protocol: int = Field(
        default=0, description="Gang training pods without a checkpoint protocol removed through the API."
    )
    training_evictions_unacknowledged: int = Field(
        default=0, description="Training pods with the protocol removed before acknowledging a checkpoint."
    )
    checkpoint_acks: int = 0
    evictions_per_pod: dict[str, int] = Field(
        default_factory=dict, description="`namespace/pod/uid` -> successful evictions (never above 1)."
    )
    eviction_log: list[EvictionRecord] = Field(default_factory=list)
    faults_injected: dict[str, int] = Field(
        default_factory=dict, description="Errors injected per fault index."
    )
    requests: dict[str, int] = Field(
        default_factory=dict, description="API requests per 'verb resource[/sub]'."
    )


class TimelineEvent(BaseModel):
    """One change of a node's availability (`GET /_sim/timeline`)."""

    t: float = Field(description="Simulated seconds since the cluster started.")
    at: datetime = Field(description="Wall-clock time of the change.")
    node: str
    domain: str
    event: Literal["registered", "cordoned", "uncordoned", "not_ready", "ready", "reboot", "removed"]
    unschedulable: bool
    ready: bool

    @property
    def unavailable(self) -> bool:
        return self.unschedulable or not self.ready


class DomainUnavailability(BaseModel):
    """Most nodes of a failure domain that were unavailable (cordoned or not Ready) at once."""

    domain: str
    nodes: int
    max_unavailable: int
    at: float | None = Field(default=None, description="Simulated time the maximum was first reached.")
    unavailable_at_start: int = 0


NodeProfile.model_rebuild()
