"""The scenario's `platform:` section: the versions of a GPU Kubernetes platform and what runs
on it (control-plane nodes, node packages, operators and engines with their Helm releases,
CRDs, webhooks) plus regressions that appear while a node runs given versions.

    platform:
      kubernetes_version: v1.30.6
      control_plane: {nodes: 1}
      packages: {kubeadm: 1.30.6-1.1, containerd.io: 1.7.20-1}
      nic_driver: "24.07-0.6.1.0"
      components:
        - {name: gpu-operator, namespace: gpu-operator, image: nvcr.io/nvidia/gpu-operator:v24.6.2,
           helm: {release: gpu-operator, chart: gpu-operator, version: v24.6.2}}
      crds: [{name: clusterpolicies.nvidia.com, kind: ClusterPolicy, versions: [v1]}]
      webhooks: [{name: kserve-webhook, service: {namespace: kserve, name: kserve-webhook}}]
      regressions:
        - {when: {driver_version: "570.86.15"}, nodes: [gpu-node-001], health: {nccl_busbw_gbps: 205}}

A webhook or conversion service that no component provides is allowed on purpose: it is how a
scenario shows a webhook whose backend is missing.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from pitstop_sim.models import GpuEcc, NodeHealth, NodeProfile, Strict

KUBE_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def kube_version(value: object) -> str:
    """`1.30.6` or `v1.30.6` -> `v1.30.6`; anything else is refused."""
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a Kubernetes version: write it as a string like v1.30.6")
    match = KUBE_VERSION_RE.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes version like v1.30.6")
    return "v" + ".".join(match.groups())


def _name(value: str) -> str:
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", value) or len(value) > 253:
        raise ValueError(
            f"{value!r} is not a valid Kubernetes name (lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit)"
        )
    return value


class ControlPlane(Strict):
    nodes: int = Field(default=1, ge=1, le=7)
    name_prefix: str = "cp-"
    cpu: str = "16"
    memory: str = "64Gi"

    def node_names(self) -> list[str]:
        return [f"{self.name_prefix}{i:03d}" for i in range(1, self.nodes + 1)]


class ServiceRef(Strict):
    namespace: str
    name: str
    path: str | None = None
    port: int = Field(default=443, ge=1, le=65535)

    _names = field_validator("namespace", "name")(classmethod(lambda cls, v: _name(v)))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class HelmChart(Strict):
    """A Helm 3 release of the component's chart, stored as Helm stores it (a Secret)."""

    release: str
    chart: str
    version: str
    app_version: str | None = Field(default=None, description="Default: the chart version.")
    revision: int = Field(default=1, ge=1)
    crds: list[str] = Field(
        default_factory=list, description="CRDs (names) whose manifests the chart ships in crds/."
    )
    objects: list[dict[str, Any]] = Field(
        default_factory=list, description="More objects in the release manifest (rendered as given)."
    )

    _release = field_validator("release")(classmethod(lambda cls, v: _name(v)))


class HelmRelease(HelmChart):
    """A release on its own (no component of the scenario), e.g. an old one with removed APIs."""

    namespace: str

    _ns = field_validator("namespace")(classmethod(lambda cls, v: _name(v)))


class Component(Strict):
    """An operator, controller or engine: a Deployment or DaemonSet running `image`."""

    name: str
    namespace: str = "default"
    kind: Literal["Deployment", "DaemonSet"] = "Deployment"
    image: str
    replicas: int = Field(default=1, ge=0, description="Deployments only.")
    gpus: int = Field(default=0, ge=0, description="nvidia.com/gpu requested by each pod.")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(
        default_factory=dict, description="On the workload and its pods (e.g. pitstop.dev/model-format)."
    )
    nodes: Literal["gpu", "all"] = Field(
        default="gpu",
        description="DaemonSets: GPU nodes only, or every node (control plane too, like a CNI).",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Deployments: pods only on nodes with these labels (a node pool)."
    )
    service: str | None = Field(
        default=None, description="A Service of this name selecting the component's pods (port 443)."
    )
    helm: HelmChart | None = None

    _names = field_validator("name", "namespace")(classmethod(lambda cls, v: _name(v)))

    @field_validator("image")
    @classmethod
    def _tagged(cls, value: str) -> str:
        if ":" not in value.rsplit("/", 1)[-1] and "@" not in value:
            raise ValueError(f"{value!r} needs a tag (e.g. {value}:v1.0): versions are read from it")
        return value


class Conversion(Strict):
    strategy: Literal["None", "Webhook"] = "None"
    service: ServiceRef | None = None

    @model_validator(mode="after")
    def _service_for_webhook(self) -> Self:
        if self.strategy == "Webhook" and self.service is None:
            raise ValueError("a Webhook conversion needs 'service' (namespace and name)")
        if self.strategy == "None" and self.service is not None:
            raise ValueError("'service' only applies to strategy Webhook")
        return self


class CrdSpec(Strict):
    name: str = Field(description="<plural>.<group>, e.g. clusterpolicies.nvidia.com")
    kind: str
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"
    versions: list[str] = Field(min_length=1, description="Served versions.")
    storage: str | None = Field(default=None, description="Default: the last of `versions`.")
    stored_versions: list[str] | None = Field(
        default=None, description="status.storedVersions (default: the storage version)."
    )
    conversion: Conversion = Field(default_factory=Conversion)

    @field_validator("name")
    @classmethod
    def _plural_dot_group(cls, value: str) -> str:
        if "." not in value:
            raise ValueError(f"{value!r} must be <plural>.<group>, e.g. clusterpolicies.nvidia.com")
        return _name(value)

    @model_validator(mode="after")
    def _storage_served(self) -> Self:
        if self.storage is not None and self.storage not in self.versions:
            raise ValueError(f"storage version {self.storage!r} is not one of versions {self.versions}")
        return self

    @property
    def plural(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def group(self) -> str:
        return self.name.split(".", 1)[1]

    @property
    def storage_version(self) -> str:
        return self.storage or self.versions[-1]


class WebhookSpec(Strict):
    name: str
    kind: Literal["validating", "mutating"] = "validating"
    service: ServiceRef
    failure_policy: Literal["Fail", "Ignore"] = "Fail"
    rules: list[dict[str, Any]] = Field(
        default_factory=lambda: [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
        ]
    )

    _names = field_validator("name")(classmethod(lambda cls, v: _name(v)))


class HealthOverride(Strict):
    """Health fields a regression changes (the others keep the node's own values)."""

    nccl_busbw_gbps: float | None = Field(default=None, ge=0)
    dcgm_failures: list[str] | None = None
    fails_validation: list[str] | None = None
    xid_errors: list[int] | None = None
    ecc: list[GpuEcc] | None = None
    train_samples_per_s: float | None = Field(default=None, ge=0)
    inference_ttft_ms: float | None = Field(default=None, ge=0)
    inference_tpot_ms: float | None = Field(default=None, ge=0)


class VersionCondition(Strict):
    """Versions a node must run for a regression to apply (exact, or a glob like `570.*`)."""

    driver_version: str | None = None
    kernel_version: str | None = None
    kubelet_version: str | None = None
    firmware_version: str | None = None

    @model_validator(mode="after")
    def _something(self) -> Self:
        if not self.model_dump(exclude_none=True):
            raise ValueError(
                "'when' needs at least one of driver_version, kernel_version, kubelet_version, "
                "firmware_version"
            )
        return self

    def holds(self, profile: NodeProfile) -> bool:
        return all(
            fnmatch.fnmatchcase(str(getattr(profile, field)), pattern)
            for field, pattern in self.model_dump(exclude_none=True).items()
        )


class Regression(Strict):
    when: VersionCondition
    nodes: list[str] = Field(default_factory=list, description="Default: every node.")
    health: HealthOverride


class Platform(Strict):
    kubernetes_version: str = "v1.32.4"
    control_plane: ControlPlane = Field(default_factory=ControlPlane)
    packages: dict[str, str] = Field(
        default_factory=dict,
        description="Installed packages of every node (kubeadm, kubelet, kubectl, containerd.io, "
        "nvidia-driver-<branch>, linux-image-<kernel>); defaults follow the node's versions.",
    )
    node_packages: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Per node: packages that differ from `packages`."
    )
    nic_driver: str | None = Field(default="24.07-0.6.1.0", description="`ofed_info -s` on GPU nodes.")
    components: list[Component] = Field(default_factory=list)
    helm_releases: list[HelmRelease] = Field(default_factory=list)
    crds: list[CrdSpec] = Field(default_factory=list)
    webhooks: list[WebhookSpec] = Field(default_factory=list)
    regressions: list[Regression] = Field(default_factory=list)

    _version = field_validator("kubernetes_version", mode="before")(
        classmethod(lambda cls, v: kube_version(v))
    )

    @model_validator(mode="after")
    def _unique(self) -> Self:
        seen: set[tuple[str, str, str]] = set()
        for component in self.components:
            key = (component.kind, component.namespace, component.name)
            if key in seen:
                raise ValueError(
                    f"two components are {component.kind} {component.namespace}/{component.name}"
                )
            seen.add(key)
        releases = [(c.namespace, c.helm.release) for c in self.components if c.helm]
        releases += [(r.namespace, r.release) for r in self.helm_releases]
        for key2 in releases:
            if releases.count(key2) > 1:
                raise ValueError(f"two Helm releases are named {key2[1]!r} in namespace {key2[0]!r}")
        return self

    def health_for(self, profile: NodeProfile) -> NodeHealth:
        """The node's health with every regression whose condition holds applied (in order)."""
        health = profile.health
        for regression in self.regressions:
            if (not regression.nodes or profile.name in regression.nodes) and regression.when.holds(profile):
                health = health.model_copy(update=regression.health.model_dump(exclude_none=True), deep=True)
        return health
