"""Scenario files: the shape of a rehearsal cluster, its workloads, node health and faults.

A scenario is YAML validated by the models below; every error names file:line:column and,
for a misspelt key, the nearest valid one. See `runbooks/scenarios/*.yaml` for examples.
"""

from __future__ import annotations

import fnmatch
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Self, Union, get_args, get_origin

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from pitstop.runbook._yaml import Node, load_yaml, parse_yaml
from pitstop.runbook.errors import RunbookError, suggest
from pitstop_sim.models import ApiErrorFault, LatencyFault, NodeHealth, Strict
from pitstop_sim.platform_spec import Platform
from pitstop_sim.quantity import is_quantity
from pitstop_sim.ssh.models import SshNodeFaults

CountOrPercent = Annotated[int | str, Field(description="A count (2) or a percentage ('50%').")]
DNS_LABEL_HINT = "lowercase letters, digits and '-', starting and ending with a letter or digit"


class ScenarioError(ValueError):
    """A scenario file (or scenario data) is invalid; `str(e)` says where and how to fix it."""


class LocatedReferenceError(ScenarioError):
    """A name that does not resolve, at a place in the scenario (`loc`) the file can point to."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(f"{_dotted([f'[{p}]' if isinstance(p, int) else str(p) for p in loc])}: {message}")
        self.loc = loc
        self.message = message


def _dns_name(value: str) -> str:
    if (
        not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", value)
        or len(value) > 253
    ):
        raise ValueError(f"{value!r} is not a valid Kubernetes name ({DNS_LABEL_HINT})")
    return value


def _percent_or_count(value: int | str) -> int | str:
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must be 0 or more")
        return value
    text = value.strip()
    if text.endswith("%") and text[:-1].isdigit() and 0 <= int(text[:-1]) <= 100:
        return text
    if text.isdigit():
        return int(text)
    raise ValueError(f"{value!r} is neither a count nor a percentage like '50%'")


class Taint(Strict):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class NodeOverride(Strict):
    """Per-node differences from the cluster defaults."""

    domain: str | None = None
    gpu_product: str | None = None
    gpus: int | None = Field(default=None, ge=0)
    driver_version: str | None = None
    firmware_version: str | None = None
    kernel_version: str | None = None
    os_image: str | None = None
    kubelet_version: str | None = None
    nvswitch: bool | None = Field(
        default=None, description="An NVSwitch system (HGX); default: the cluster's."
    )
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    unschedulable: bool = False


class ClusterShape(Strict):
    nodes: int = Field(default=4, ge=1, le=10_000)
    domains: int = Field(default=2, ge=1)
    gpus_per_node: int = Field(default=8, ge=0)
    name_prefix: str = "gpu-node-"
    domain_prefix: str = "zone-"
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    driver_version: str = "550.90.07"
    firmware_version: str = "96.00.89.00.01"
    kernel_version: str = "5.15.0-105-generic"
    os_image: str = "Ubuntu 22.04.4 LTS"
    kubelet_version: str = "v1.32.4"
    container_runtime: str = "containerd://1.7.20"
    nvswitch: bool = Field(
        default=False,
        description="NVSwitch systems (HGX H100/H200/B200): Fabric Manager must run the loaded "
        "driver's version.",
    )
    cpu: str = "192"
    memory: str = "2Ti"
    max_pods: int = Field(default=110, ge=1)
    gpu_operator: bool = Field(default=True, description="GPU Operator and DCGM exporter DaemonSets.")
    driver_management: Literal["host", "operator"] = Field(
        default="host",
        description="`host`: the NVIDIA driver comes from host packages (ClusterPolicy "
        "driver.enabled false, no driver DaemonSet); `operator`: the GPU Operator's driver "
        "container (DaemonSet nvidia-driver-daemonset, OnDelete) runs it, versioned by the "
        "ClusterPolicy's spec.driver.version and rolled by its upgradePolicy.",
    )
    kueue: bool = Field(default=True, description="Kueue CRDs (ClusterQueue, LocalQueue, ...).")
    node_overrides: dict[str, NodeOverride] = Field(default_factory=dict)

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str) -> str:
        if not is_quantity(value):
            raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. '64', '500m', '512Gi')")
        return value

    @model_validator(mode="after")
    def _operator_needs_the_operator(self) -> Self:
        if self.driver_management == "operator" and not self.gpu_operator:
            raise ValueError("driver_management: operator needs gpu_operator: true")
        return self

    @model_validator(mode="after")
    def _domains_fit(self) -> Self:
        if self.domains > self.nodes:
            raise ValueError(
                f"{self.domains} failure domains need at least {self.domains} nodes, got {self.nodes}"
            )
        return self

    def node_names(self) -> list[str]:
        width = max(3, len(str(self.nodes)))
        return [f"{self.name_prefix}{i:0{width}d}" for i in range(1, self.nodes + 1)]

    def domain_names(self) -> list[str]:
        letters = "abcdefghijklmnopqrstuvwxyz"
        if self.domains <= len(letters):
            return [f"{self.domain_prefix}{letters[i]}" for i in range(self.domains)]
        return [f"{self.domain_prefix}{i + 1}" for i in range(self.domains)]

    def domain_of(self, index: int) -> str:
        """Nodes fill domains in contiguous blocks (a rack, a zone), as they do in a data centre."""
        per_domain = -(-self.nodes // self.domains)
        return self.domain_names()[min(index // per_domain, self.domains - 1)]

    def is_nvswitch(self, node: str) -> bool:
        """Hardware does not change at run time, so the scenario answers (no profile copy)."""
        override = self.node_overrides.get(node)
        if override is not None and override.nvswitch is not None:
            return override.nvswitch
        return self.nvswitch


class Timing(Strict):
    """Delays in simulated seconds; `time_scale` simulated seconds pass per real second."""

    time_scale: float = Field(default=1.0, gt=0)
    pod_start_seconds: float = Field(default=2.0, ge=0)
    recreate_delay_seconds: float = Field(default=1.0, ge=0)
    pod_termination_seconds: float = Field(
        default=0.0, ge=0, description="Upper bound on a pod's graceful termination."
    )
    reboot_seconds: float = Field(default=60.0, ge=0)
    checkpoint_seconds: float = Field(default=5.0, ge=0)
    job_seconds: float = Field(default=5.0, ge=0, description="Run time of plain Job pods.")
    validation_seconds: dict[str, float] = Field(default_factory=lambda: {"dcgm": 60.0, "nccl": 30.0})
    not_ready_eviction_seconds: float = Field(
        default=300.0, ge=0, description="Pods on a NotReady node are evicted after this (taint manager)."
    )
    firmware_flash_seconds: float = Field(
        default=30.0, ge=0, description="Run time of the firmware updater on a node (over SSH)."
    )
    device_plugin_seconds: float = Field(
        default=10.0,
        ge=0,
        description="After a reboot, the node is Ready but advertises 0 allocatable GPUs until the "
        "device plugin registers them again, this long later (capacity is kept).",
    )


class Pdb(Strict):
    min_available: CountOrPercent | None = None
    max_unavailable: CountOrPercent | None = None

    _check = field_validator("min_available", "max_unavailable")(
        classmethod(lambda cls, v: None if v is None else _percent_or_count(v))
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.min_available is None) == (self.max_unavailable is None):
            raise ValueError("a pdb needs exactly one of 'min_available' or 'max_unavailable'")
        return self


class _Named(Strict):
    name: str
    namespace: str = "default"

    _names = field_validator("name", "namespace")(classmethod(lambda cls, v: _dns_name(v)))


class TopologySpread(Strict):
    """A topologySpreadConstraint over a deployment's replicas (labelSelector `app: <name>`)."""

    topology_key: str = Field(default="topology.kubernetes.io/zone", min_length=1)
    max_skew: int = Field(default=1, ge=1)
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = "DoNotSchedule"
    min_domains: int | None = Field(default=None, ge=1)
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    node_taints_policy: Literal["Honor", "Ignore"] | None = None

    def constraint(self, selector: dict[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "maxSkew": self.max_skew,
            "topologyKey": self.topology_key,
            "whenUnsatisfiable": self.when_unsatisfiable,
            "labelSelector": {"matchLabels": dict(selector)},
        }
        if self.min_domains is not None:
            out["minDomains"] = self.min_domains
        if self.node_affinity_policy is not None:
            out["nodeAffinityPolicy"] = self.node_affinity_policy
        if self.node_taints_policy is not None:
            out["nodeTaintsPolicy"] = self.node_taints_policy
        return out


class Deployment(_Named):
    replicas: int = Field(default=1, ge=0)
    gpus: int = Field(default=0, ge=0, description="nvidia.com/gpu requested by each replica.")
    cpu: str = "500m"
    memory: str = "1Gi"
    image: str = "registry.local/inference:1.0"
    labels: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    empty_dir: bool = Field(
        default=False, description="Mount an emptyDir (kubectl drain needs --delete-emptydir-data)."
    )
    pdb: Pdb | None = None
    placement: list[str] = Field(
        default_factory=list, description="Initial node of each replica, in order (default: spread)."
    )
    topology_spread: list[TopologySpread] = Field(
        default_factory=list,
        description="topologySpreadConstraints of the replicas (selector app=<name>); replicas "
        "without a placement start Pending and the scheduler places them, or not.",
    )
    anti_affinity: str | None = Field(
        default=None,
        min_length=1,
        description="A topology key no two replicas may share (required podAntiAffinity on "
        "app=<name>, e.g. kubernetes.io/hostname); replicas without a placement start Pending and "
        "the scheduler places them, or not.",
    )


Framework = Literal["pitstop", "pytorchjob", "jobset", "volcano", "raycluster", "lws", "unlabelled"]


class TrainingJob(_Named):
    """A gang whose pods run together. `framework: pitstop` is a Job labelled
    `pitstop.dev/gang=<name>`; the others are marked as their real operators mark them
    (`pitstop_sim.training_frameworks`): a PyTorchJob, a JobSet, a Volcano job, a Ray cluster, a
    LeaderWorkerSet, or GPU pods of an unknown controller with no marks at all."""

    namespace: str = "training"
    framework: Literal["pitstop", "pytorchjob", "jobset", "volcano", "raycluster", "lws", "unlabelled"] = (
        "pitstop"
    )
    pods: int = Field(default=2, ge=1)
    gpus_per_pod: int = Field(default=8, ge=0)
    checkpoint_protocol: bool | None = Field(
        default=None,
        description="Pods acknowledge pitstop's checkpoint requests (default: only framework pitstop's do).",
    )
    checkpoint_seconds: float | None = Field(
        default=None, ge=0, description="Override timing.checkpoint_seconds."
    )
    suspend_protocol: bool = Field(
        default=False,
        description=(
            "The operator's object (framework pytorchjob, jobset or raycluster) carries "
            "`pitstop.dev/checkpoint-protocol: suspend`: its owner lets pitstop suspend the whole job."
        ),
    )
    image: str = "registry.local/trainer:1.0"
    queue: str | None = Field(default=None, description="Kueue LocalQueue (label kueue.x-k8s.io/queue-name).")
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Pods only on nodes with these labels (a training pool)."
    )
    pdb: bool = Field(default=False, description="A PDB with minAvailable equal to the gang size.")
    placement: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _suspendable(self) -> TrainingJob:
        if self.suspend_protocol and self.framework not in ("pytorchjob", "jobset", "raycluster"):
            raise ValueError(
                f"training job {self.name}: suspend_protocol needs framework pytorchjob, jobset or "
                f"raycluster (their operators suspend a whole job), not {self.framework}"
            )
        return self


class DaemonSet(_Named):
    image: str = "registry.local/agent:1.0"
    gpu_nodes_only: bool = True


class LocalQueue(Strict):
    name: str
    namespace: str


class ClusterQueue(Strict):
    name: str
    stop_policy: Literal["None", "Hold", "HoldAndDrain"] = "None"
    gpus: int | None = Field(default=None, ge=0, description="Nominal GPU quota (default: all GPUs).")
    local_queues: list[LocalQueue] = Field(default_factory=list)


class Workloads(Strict):
    namespaces: list[str] = Field(default_factory=list)
    deployments: list[Deployment] = Field(default_factory=list)
    training_jobs: list[TrainingJob] = Field(default_factory=list)
    daemonsets: list[DaemonSet] = Field(default_factory=list)
    cluster_queues: list[ClusterQueue] = Field(default_factory=list)


class Health(Strict):
    default: NodeHealth = Field(default_factory=NodeHealth)
    nodes: dict[str, NodeHealth] = Field(default_factory=dict)


class Faults(Strict):
    api_errors: list[ApiErrorFault] = Field(default_factory=list)
    latency: list[LatencyFault] = Field(default_factory=list)
    pdbs_never_allow: list[str] = Field(
        default_factory=list, description="'namespace/name' of PDBs that never allow."
    )
    nodes_fail_validation: list[str] = Field(default_factory=list)
    nodes_never_return: list[str] = Field(
        default_factory=list, description="Nodes that stay NotReady after a reboot."
    )
    ssh: dict[str, SshNodeFaults] = Field(
        default_factory=dict,
        description="Per node: SSH drops mid-command, a slow or failing firmware updater.",
    )

    @field_validator("pdbs_never_allow")
    @classmethod
    def _qualified(cls, values: list[str]) -> list[str]:
        for value in values:
            if value.count("/") != 1:
                raise ValueError(f"{value!r} must be 'namespace/name'")
        return values


class Registry(Strict):
    """The images the cluster's nodes can pull (fnmatch patterns over the image reference as
    written). Any other image fails as containerd fails it: ErrImagePull, then ImagePullBackOff,
    with the kubelet's events."""

    available: list[str] = Field(default_factory=lambda: ["*"])

    def has(self, image: str) -> bool:
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.available)


class Scenario(Strict):
    name: str = "default"
    description: str = ""
    seed: int = 0
    cluster: ClusterShape = Field(default_factory=ClusterShape)
    timing: Timing = Field(default_factory=Timing)
    health: Health = Field(default_factory=Health)
    workloads: Workloads = Field(default_factory=Workloads)
    faults: Faults = Field(default_factory=Faults)
    registry: Registry = Field(default_factory=Registry)
    platform: Platform | None = Field(
        default=None,
        description="Platform versions, control plane, components, CRDs, webhooks, regressions.",
    )

    def control_plane_names(self) -> list[str]:
        return self.platform.control_plane.node_names() if self.platform else []

    def all_node_names(self) -> list[str]:
        """GPU nodes, then control-plane nodes (when the scenario has a platform)."""
        return self.cluster.node_names() + self.control_plane_names()

    def with_shape(
        self, nodes: int | None = None, domains: int | None = None, gpus_per_node: int | None = None
    ) -> Scenario:
        """The scenario with command-line overrides of the cluster shape (checked again)."""
        changes = {
            k: v
            for k, v in {"nodes": nodes, "domains": domains, "gpus_per_node": gpus_per_node}.items()
            if v is not None
        }
        if not changes:
            return self
        data = self.model_dump()
        data["cluster"].update(changes)
        try:
            return Scenario.model_validate(data)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ScenarioError(f"invalid cluster shape ({where}): {first['msg']}") from None

    def health_of(self, node: str) -> NodeHealth:
        health = self.health.nodes.get(node, self.health.default).model_copy(deep=True)
        if node in self.faults.nodes_fail_validation and "*" not in health.fails_validation:
            health.fails_validation.append("*")
        if node in self.faults.nodes_never_return:
            health.never_returns_after_reboot = True
        return health

    def check_references(self) -> None:
        """Names the scenario uses must exist in the cluster it describes."""
        nodes = self.cluster.node_names()
        known = set(nodes)
        shown = f"{nodes[0]} .. {nodes[-1]}" if len(nodes) > 1 else nodes[0]

        def need_node(name: str, where: str) -> None:
            if name not in known:
                hint = suggest(name, nodes)
                extra = f"; did you mean '{hint}'?" if hint else ""
                raise ScenarioError(f"{where}: unknown node '{name}' (the cluster has {shown}){extra}")

        for name in self.cluster.node_overrides:
            need_node(name, "cluster.node_overrides")
        for name in self.health.nodes:
            need_node(name, "health.nodes")
        for name in self.faults.nodes_fail_validation:
            need_node(name, "faults.nodes_fail_validation")
        for name in self.faults.nodes_never_return:
            need_node(name, "faults.nodes_never_return")
        for name in self.faults.ssh:
            need_node(name, "faults.ssh")
        placements = [("deployments", i, d.placement) for i, d in enumerate(self.workloads.deployments)]
        placements += [("training_jobs", i, t.placement) for i, t in enumerate(self.workloads.training_jobs)]
        for kind, index, nodes_of_item in placements:
            for node in nodes_of_item:
                need_node(node, f"workloads.{kind}[{index}].placement")
        pdbs = {f"{d.namespace}/{d.name}" for d in self.workloads.deployments if d.pdb}
        pdbs |= {f"{t.namespace}/{t.name}" for t in self.workloads.training_jobs if t.pdb}
        for ref in self.faults.pdbs_never_allow:
            if ref not in pdbs:
                raise ScenarioError(
                    f"faults.pdbs_never_allow: no workload in the scenario has a PDB named '{ref}' "
                    f"(PDBs: {', '.join(sorted(pdbs)) or 'none'})"
                )
        if self.platform is not None:
            self._check_platform(self.platform)

    def _check_platform(self, platform: Platform) -> None:
        nodes = self.all_node_names()
        control_plane = set(self.control_plane_names())
        clash = control_plane & set(self.cluster.node_names())
        if clash:
            raise LocatedReferenceError(
                ("platform", "control_plane", "name_prefix"),
                f"control-plane node names clash with GPU node names ({', '.join(sorted(clash))}); "
                "choose another name_prefix",
            )

        def need_node(name: str, loc: tuple[str | int, ...]) -> None:
            if name not in nodes:
                hint = suggest(name, nodes)
                extra = f"; did you mean '{hint}'?" if hint else ""
                raise LocatedReferenceError(
                    loc, f"unknown node '{name}' (the cluster has {', '.join(nodes)}){extra}"
                )

        for index, regression in enumerate(platform.regressions):
            for position, name in enumerate(regression.nodes):
                need_node(name, ("platform", "regressions", index, "nodes", position))
        for name in platform.node_packages:
            need_node(name, ("platform", "node_packages", name))
        crds = {c.name for c in platform.crds} | {"clusterpolicies.nvidia.com"}
        charts = [("components", i, c.helm) for i, c in enumerate(platform.components) if c.helm]
        charts += [("helm_releases", i, r) for i, r in enumerate(platform.helm_releases)]
        for where, index, chart in charts:
            for position, crd in enumerate(chart.crds):
                if crd not in crds:
                    hint = suggest(crd, sorted(crds))
                    extra = f"; did you mean '{hint}'?" if hint else ""
                    loc: tuple[str | int, ...] = ("platform", where, index)
                    loc += ("helm", "crds", position) if where == "components" else ("crds", position)
                    raise LocatedReferenceError(
                        loc, f"the chart ships CRD '{crd}', which platform.crds does not define{extra}"
                    )


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; ScenarioError says file:line:column and what to change."""
    try:
        doc = load_yaml(path)
    except RunbookError as exc:
        raise ScenarioError(str(exc)) from None
    return _validate(doc.root())


def parse_scenario(text: str, path: str = "<scenario>") -> Scenario:
    try:
        doc = parse_yaml(text, path)
    except RunbookError as exc:
        raise ScenarioError(str(exc)) from None
    return _validate(doc.root())


def _validate(root: Node) -> Scenario:
    data = root.value
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(
            f"{root.path}:1:1: a scenario must be a mapping of keys (cluster, workloads, ...)"
        )
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_describe(exc.errors(include_url=False)[0], root)) from None
    try:
        scenario.check_references()
    except LocatedReferenceError as exc:
        target = root
        for part in exc.loc:
            if not target.has(part):
                break
            target = target.child(part)
        where = _dotted([f"[{p}]" if isinstance(p, int) else str(p) for p in exc.loc])
        raise ScenarioError(str(target.error(f"{where}: {exc.message}"))) from None
    except ScenarioError as exc:
        raise ScenarioError(f"{root.path}: {exc}") from None
    return scenario


def _describe(error: Any, root: Node) -> str:
    loc = tuple(error["loc"])
    target = root
    model: Any = Scenario
    names: list[str] = []
    for part in loc:
        if target.has(part):
            parent_model = model
            target = target.child(part)
            names.append(f"[{part}]" if isinstance(part, int) else str(part))
            model = _field_model(parent_model, part)
    kind = error["type"]
    where = _dotted(names) or "scenario"
    if kind == "extra_forbidden":
        key = str(loc[-1])
        owner = _owner_model(loc)
        hint = suggest(key, _keys(owner)) if owner is not None else None
        return str(
            target.error(f"unknown key '{key}' in {_parent_name(names)}", at_key=True, suggestion=hint)
        )
    if kind == "missing":
        return str(target.error(f"missing required key '{loc[-1]}' in {where}", key=str(loc[-1])))
    message = str(error["msg"]).removeprefix("Value error, ")
    return str(target.error(f"invalid value for '{where}': {message}"))


def _dotted(names: list[str]) -> str:
    return ".".join(names).replace(".[", "[")


def _parent_name(names: list[str]) -> str:
    return _dotted(names[:-1]) or "the scenario"


def _owner_model(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: Any = Scenario
    for part in loc[:-1]:
        model = _field_model(model, part)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _field_model(model: Any, part: Any) -> Any:
    """The model (or container element model) one step down `loc`, for suggestions."""
    if isinstance(model, type) and issubclass(model, BaseModel):
        info = model.model_fields.get(str(part))
        return _unwrap(info.annotation) if info is not None else None
    if isinstance(model, tuple) and model and model[0] == "container":
        return model[1]
    return None


def _unwrap(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin in (list, dict):
        args = get_args(annotation)
        return ("container", _unwrap(args[-1]))
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            if arg is not type(None):
                return _unwrap(arg)
    if origin is typing.Annotated:
        return _unwrap(get_args(annotation)[0])
    return annotation
