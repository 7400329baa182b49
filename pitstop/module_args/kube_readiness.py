"""Args of kube.readiness: does a MultiKueue worker cluster have what the manager cluster's jobs
expect (RuntimeClasses, image pull Secrets by name and type, StorageClasses and volumes for the
model cache, monitoring, Kueue's ResourceFlavors, ClusterQueues and LocalQueues, namespaces)?

What is expected comes from the manager cluster, read through the worker policy when this worker
may reach it (`manager.cluster`), or from an explicit list (`expected`), e.g. the `data.expected`
of `kube.readiness` with `mode: export` run on the manager's own worker.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal, Self, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pitstop.kube.names import InvalidName, check_name
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults

Kind = Literal[
    "Namespace",
    "RuntimeClass",
    "Secret",
    "StorageClass",
    "PersistentVolumeClaim",
    "DaemonSet",
    "ServiceMonitor",
    "ResourceFlavor",
    "ClusterQueue",
    "LocalQueue",
]
# The kinds in the order they are read and reported, as `Kind` lists them (a namespace before
# what lives in it, a ResourceFlavor before the ClusterQueues that use it).
KINDS: tuple[Kind, ...] = get_args(Kind)
NAMESPACED: frozenset[str] = frozenset(
    {"Secret", "PersistentVolumeClaim", "DaemonSet", "ServiceMonitor", "LocalQueue"}
)
# What is compared of each kind besides its name (a field missing from an expectation is not
# compared). A Secret is compared by its type only: its data is never read.
COMPARED: dict[str, tuple[str, ...]] = {
    "Namespace": (),
    "RuntimeClass": ("handler",),
    "Secret": ("type",),
    "StorageClass": ("provisioner",),
    "PersistentVolumeClaim": ("storage_class",),
    "DaemonSet": (),
    "ServiceMonitor": (),
    "ResourceFlavor": ("node_labels",),
    "ClusterQueue": ("flavors",),
    "LocalQueue": ("cluster_queue",),
}


class ExpectedItem(BaseModel):
    """One object the worker cluster must have."""

    model_config = ConfigDict(extra="forbid")

    kind: Kind
    name: str = Field(min_length=1)
    namespace: str = Field(default="", description="For namespaced kinds (Secret, PVC, DaemonSet...).")
    fields: dict[str, Any] = Field(
        default_factory=dict,
        description="What must be equal besides the name: RuntimeClass `handler`, Secret `type`, "
        "StorageClass `provisioner`, PersistentVolumeClaim `storage_class`, ResourceFlavor `node_labels`, "
        "ClusterQueue `flavors` ({flavor: [covered resources]}), LocalQueue `cluster_queue`.",
    )
    used_by: list[str] = Field(
        default_factory=list, description="What on the manager needs it (named in the message)."
    )
    required: bool = Field(default=True, description="Missing or different fails the task.")

    @model_validator(mode="after")
    def _shape(self) -> Self:
        try:
            check_name(self.name, f"{self.kind} name")
            if self.namespace:
                check_name(self.namespace, f"{self.kind} namespace", "label")
        except InvalidName as exc:
            raise ValueError(str(exc)) from None
        if self.kind in NAMESPACED and not self.namespace:
            raise ValueError(f"{self.kind} {self.name}: give its `namespace`")
        if self.kind not in NAMESPACED and self.namespace:
            raise ValueError(f"{self.kind} {self.name} is cluster-scoped: no `namespace`")
        unknown = sorted(set(self.fields) - set(COMPARED[self.kind]))
        if unknown:
            allowed = ", ".join(COMPARED[self.kind]) or "none"
            raise ValueError(
                f"{self.kind} {self.name}: fields {unknown} are not compared (compared: {allowed})"
            )
        return self

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)


class ManagerSource(BaseModel):
    """Where the expectation is read on the manager cluster."""

    model_config = ConfigDict(extra="forbid")

    cluster: str = Field(min_length=1, description="The manager cluster's name in the worker policy.")
    label_selector: str | None = Field(
        default=None,
        description="Objects of each kind in `kinds` carrying these labels are expected "
        "(e.g. `pitstop.dev/multikueue=required`).",
    )
    names: dict[Kind, list[str]] = Field(
        default_factory=dict,
        description="Objects expected by name, per kind (`namespace/name` for namespaced kinds).",
    )
    kinds: list[Kind] = Field(
        default_factory=lambda: list(KINDS),
        description="Kinds read with `label_selector`.",
    )
    multikueue_cluster: str | None = Field(
        default=None,
        description="The MultiKueueCluster that names this worker on the manager (default: the worker "
        "cluster's name); it must exist and be Active.",
    )


class ReadinessArgs(ModuleArgs):
    """Compare a MultiKueue worker cluster (the inventory's) with what the manager's jobs expect.
    Each expected object is `present`, `missing` or `different` (with what differs); the task
    fails when a required one is missing or different, naming each. Read-only (runs in check
    mode); Secrets are read by name and type only (a server-printed table, never their data).
    `mode: export` reads the expectation from this cluster instead (run it on the manager's
    worker) and returns it as `data.expected`, the `expected` of a later check."""

    mode: Literal["check", "export"] = "check"
    expected: list[ExpectedItem] = Field(
        default_factory=list,
        description="The expectation, when the manager cannot be read from here.",
    )
    manager: ManagerSource | None = Field(
        default=None,
        description="Read the expectation from the manager cluster (when this worker's policy reaches it); "
        "also checks the manager's MultiKueueCluster for this worker.",
    )
    source: Literal["auto", "manager", "expected"] = Field(
        default="auto",
        description="auto: the manager when `manager` is given and this worker's policy knows that cluster, "
        "else `expected`; manager/expected: only that one.",
    )
    worker_cluster: str | None = Field(
        default=None, description="The worker's name in messages (default: the inventory's cluster)."
    )
    select: dict[Kind, list[str]] = Field(
        default_factory=dict,
        description="mode export: the objects to export by name, per kind (`namespace/name` if namespaced).",
    )
    label_selector: str | None = Field(
        default=None, description="mode export: objects of `kinds` with these labels are exported."
    )
    kinds: list[Kind] = Field(default_factory=lambda: list(KINDS), description="mode export: kinds to read.")
    kueue_api_version: str | None = Field(
        default=None,
        description="Kueue's API version to read (e.g. kueue.x-k8s.io/v1beta1); default: the version "
        "each cluster's apiserver prefers for the group (v1beta1 or, in newer releases, v1beta2).",
    )
    servicemonitor_api_version: str = Field(default="monitoring.coreos.com/v1")

    @field_validator("expected")
    @classmethod
    def _unique(cls, value: list[ExpectedItem]) -> list[ExpectedItem]:
        seen: set[tuple[str, str, str]] = set()
        for item in value:
            if item.key in seen:
                raise ValueError(f"{item.label} is expected twice")
            seen.add(item.key)
        return value

    @model_validator(mode="after")
    def _source(self) -> Self:
        if self.mode == "check":
            if self.source == "manager" and self.manager is None:
                raise ValueError("source: manager needs `manager: {cluster: NAME}`")
            if self.source == "expected" and not self.expected:
                raise ValueError("source: expected needs `expected`")
            if self.manager is None and not self.expected:
                raise ValueError(
                    "give `manager: {cluster: NAME, ...}` (read the manager when this worker may reach it) "
                    "and/or `expected` (from kube.readiness mode: export on the manager's worker)"
                )
        elif not self.select and not self.label_selector:
            raise ValueError("mode: export needs `select` (names per kind) and/or `label_selector`")
        return self


READINESS: ModuleSpec[ReadinessArgs] = ModuleSpec(
    name="kube.readiness",
    args_model=ReadinessArgs,
    summary="Whether a MultiKueue worker cluster has what the manager cluster's jobs expect (read-only).",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=5),
    heartbeat_timeout=timedelta(seconds=60),
    retry=RetryDefaults(),
)

SPECS: list[ModuleSpec[Any]] = [READINESS]
