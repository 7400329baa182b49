"""The resource types the simulator serves, and the discovery documents that describe them.

kubectl resolves `kubectl get no`, `kubectl drain` (which looks for `pods/eviction` with group
`policy`, version `v1` in `/api/v1`) and `kubectl describe` from these documents, so their
shape follows the apiserver's legacy discovery exactly. Custom resources are added at run
time when a CustomResourceDefinition is created (Kueue's ClusterQueue is one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
KUBE_VERSION = "v1.32.4"


@dataclass(frozen=True)
class Subresource:
    name: str
    kind: str
    verbs: tuple[str, ...]
    group: str = ""
    version: str = ""


STATUS = Subresource("status", "", ("get", "patch", "update"))


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: tuple[Subresource, ...] = (STATUS,)
    categories: tuple[str, ...] = ()
    # Field selector labels beyond metadata.name/metadata.namespace (the apiserver refuses others).
    fields: tuple[str, ...] = ()
    custom: bool = False
    printer_columns: tuple[Obj, ...] = field(default=(), compare=False)

    @property
    def api_version(self) -> str:
        return self.version if not self.group else f"{self.group}/{self.version}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def storage(self) -> str:
        """Key prefix in the object store: `/registry/<storage>/<ns>/<name>`, as in etcd."""
        return f"{self.group}/{self.plural}" if self.custom else self.plural

    def subresource(self, name: str) -> Subresource | None:
        return next((s for s in self.subresources if s.name == name), None)

    def has_status(self) -> bool:
        return self.subresource("status") is not None

    def api_resource(self) -> Obj:
        entry: Obj = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        return entry

    def api_subresources(self) -> list[Obj]:
        out: list[Obj] = []
        for sub in self.subresources:
            entry: Obj = {
                "name": f"{self.plural}/{sub.name}",
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": sub.kind or self.kind,
                "verbs": list(sub.verbs),
            }
            if sub.group:
                entry["group"] = sub.group
            if sub.version:
                entry["version"] = sub.version
            out.append(entry)
        return out


_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)

BUILTIN: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        False,
        ("ns",),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        subresources=(STATUS, Subresource("finalize", "", ("update",))),
        fields=("status.phase",),
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "node",
        "Node",
        False,
        ("no",),
        subresources=(
            STATUS,
            Subresource("proxy", "NodeProxyOptions", ("create", "delete", "get", "patch", "update")),
        ),
        fields=("spec.unschedulable",),
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        True,
        ("po",),
        categories=("all",),
        subresources=(
            STATUS,
            Subresource("eviction", "Eviction", ("create",), "policy", "v1"),
            Subresource("log", "Pod", ("get",)),
            Subresource("binding", "Binding", ("create",)),
        ),
        fields=_POD_FIELDS,
    ),
    ResourceType("", "v1", "events", "event", "Event", True, ("ev",), subresources=(), fields=_EVENT_FIELDS),
    ResourceType("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",), subresources=()),
    ResourceType("", "v1", "secrets", "secret", "Secret", True, subresources=(), fields=("type",)),
    ResourceType("", "v1", "services", "service", "Service", True, ("svc",), categories=("all",)),
    ResourceType(
        "",
        "v1",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        True,
        ("pvc",),
    ),
    ResourceType(
        "", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True, ("sa",), subresources=()
    ),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "deployment",
        "Deployment",
        True,
        ("deploy",),
        categories=("all",),
        subresources=(STATUS, Subresource("scale", "Scale", ("get", "patch", "update"), "autoscaling", "v1")),
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "replicaset",
        "ReplicaSet",
        True,
        ("rs",),
        categories=("all",),
        subresources=(STATUS, Subresource("scale", "Scale", ("get", "patch", "update"), "autoscaling", "v1")),
        fields=("status.replicas",),
    ),
    ResourceType("apps", "v1", "daemonsets", "daemonset", "DaemonSet", True, ("ds",), categories=("all",)),
    ResourceType(
        "apps",
        "v1",
        "statefulsets",
        "statefulset",
        "StatefulSet",
        True,
        ("sts",),
        categories=("all",),
        subresources=(STATUS, Subresource("scale", "Scale", ("get", "patch", "update"), "autoscaling", "v1")),
    ),
    ResourceType(
        "batch", "v1", "jobs", "job", "Job", True, categories=("all",), fields=("status.successful",)
    ),
    ResourceType("batch", "v1", "cronjobs", "cronjob", "CronJob", True, ("cj",), categories=("all",)),
    ResourceType(
        "policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", True, ("pdb",)
    ),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        False,
        ("crd", "crds"),
        categories=("api-extensions",),
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "validatingwebhookconfiguration",
        "ValidatingWebhookConfiguration",
        False,
        categories=("api-extensions",),
        subresources=(),
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration",
        "MutatingWebhookConfiguration",
        False,
        categories=("api-extensions",),
        subresources=(),
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "lease", "Lease", True, subresources=()),
    # Cluster-scoped, no status: what jobs dispatched to a cluster expect to find there (a
    # RuntimeClass such as `nvidia`, the StorageClass of a model cache), read by kube.readiness.
    ResourceType(
        "node.k8s.io", "v1", "runtimeclasses", "runtimeclass", "RuntimeClass", False, subresources=()
    ),
    ResourceType(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        "storageclass",
        "StorageClass",
        False,
        ("sc",),
        subresources=(),
    ),
)


class ResourceRegistry:
    """Every served resource type, by (group, version, plural) and by the names kubectl uses."""

    def __init__(self) -> None:
        self._by_path: dict[tuple[str, str, str], ResourceType] = {}
        self._group_order: list[str] = []
        for rt in BUILTIN:
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self._by_path[(rt.group, rt.version, rt.plural)] = rt
        if rt.group and rt.group not in self._group_order:
            self._group_order.append(rt.group)

    def remove(self, group: str, version: str, plural: str) -> None:
        self._by_path.pop((group, version, plural), None)
        if group and not any(g == group for g, _, _ in self._by_path):
            self._group_order.remove(group)

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def lookup(self, group: str, plural: str) -> ResourceType:
        """The served type of `plural` in `group` (any version); KeyError if not served."""
        for (g, _, p), rt in self._by_path.items():
            if g == group and p == plural:
                return rt
        raise KeyError(f"{plural}.{group}" if group else plural)

    def all(self) -> list[ResourceType]:
        return list(self._by_path.values())

    def of_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for rt in self._by_path.values():
            if rt.api_version == api_version and rt.kind == kind:
                return rt
        return None

    def versions(self, group: str) -> list[str]:
        return sorted({v for g, v, _ in self._by_path if g == group}, reverse=True)

    # --- discovery documents -------------------------------------------------------------

    def api_versions(self, server_address: str) -> Obj:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        }

    def api_group(self, group: str) -> Obj | None:
        versions = self.versions(group)
        if not versions:
            return None
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": entries, "preferredVersion": entries[0]}

    def api_group_list(self) -> Obj:
        groups = [g for g in (self.api_group(name) for name in self._group_order) if g is not None]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def resource_list(self, group: str, version: str) -> Obj | None:
        types = [rt for (g, v, _), rt in self._by_path.items() if g == group and v == version]
        if not types:
            return None
        resources: list[Obj] = []
        for rt in sorted(types, key=lambda t: t.plural):
            resources.append(rt.api_resource())
            resources.extend(rt.api_subresources())
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": version if not group else f"{group}/{version}",
            "resources": resources,
        }


def version_info(version: str = KUBE_VERSION) -> Obj:
    major, minor, _ = version.lstrip("v").split(".")
    return {
        "major": major,
        "minor": minor,
        "gitVersion": version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-22T00:00:00Z",
        "goVersion": "go1.23.8",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def crd_resource_type(crd: Obj) -> list[ResourceType]:
    """The served types a CustomResourceDefinition declares (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out: list[ResourceType] = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        has_status = "status" in (version.get("subresources") or {})
        out.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                singular=names.get("singular") or names["kind"].lower(),
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=(STATUS,) if has_status else (),
                custom=True,
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            )
        )
    return out
