"""What a component's new release no longer ships, and what kube.delete never deletes.

An object is identified across releases by API group, kind, namespace and name: a release that
moves a Deployment from `extensions/v1beta1` to `apps/v1`, or a CRD from `v1beta1` to `v1`,
still ships the same object, so the version part of `apiVersion` is not part of the identity.
The pure part of kube.removals (activities/kube/removals.py) and kube.delete
(activities/kube/delete.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pitstop.kube.manifests import Manifest

# Deleting these loses data or the cluster: every object in a Namespace, every custom resource
# of a CRD, the volume behind a claim, a node's registration. kube.delete refuses them always.
NEVER_DELETED: dict[tuple[str, str], str] = {
    ("", "Namespace"): "deleting a Namespace deletes everything in it",
    ("apiextensions.k8s.io", "CustomResourceDefinition"): (
        "deleting a CustomResourceDefinition deletes every custom resource of its kinds"
    ),
    ("", "PersistentVolume"): "deleting a PersistentVolume can lose the data on it",
    ("", "PersistentVolumeClaim"): "deleting a PersistentVolumeClaim can lose the volume's data",
    ("", "Node"): "deleting a Node removes it from the cluster",
}
# The cluster's own namespaces: objects there are deleted only where the worker policy allows
# it for the cluster (clusters.<name>.allow_delete_in).
PROTECTED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True, order=True)
class ObjectKey:
    group: str
    kind: str
    namespace: str  # "" for cluster-scoped objects
    name: str

    @property
    def label(self) -> str:
        kind = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{kind} {self.namespace}/{self.name}" if self.namespace else f"{kind} {self.name}"


def group_of(api_version: str) -> str:
    """`apps/v1` -> `apps`, `v1` -> `` (the core group)."""
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


# Whether a manifest's kind is namespaced; None when nobody can tell (then: as written).
Scope = Callable[[Manifest], bool | None]


def crd_scopes(manifests: Iterable[Manifest]) -> dict[tuple[str, str], bool]:
    """(group, kind) -> namespaced, for the kinds the manifests' own CRDs define."""
    out: dict[tuple[str, str], bool] = {}
    for m in manifests:
        if (group_of(m.api_version), m.kind) != ("apiextensions.k8s.io", "CustomResourceDefinition"):
            continue
        spec = m.obj.get("spec") or {}
        kind = str((spec.get("names") or {}).get("kind") or "")
        if kind:
            out[(str(spec.get("group") or ""), kind)] = spec.get("scope") != "Cluster"
    return out


def object_key(manifest: Manifest, namespaced: bool | None, default_namespace: str) -> ObjectKey:
    """The object's identity as kube.apply writes it: a namespaced object that names no
    namespace goes to `default_namespace`; a cluster-scoped one has none (the server drops it)."""
    if namespaced is None:
        namespace = manifest.namespace
    elif namespaced:
        namespace = manifest.namespace or default_namespace
    else:
        namespace = ""
    return ObjectKey(group_of(manifest.api_version), manifest.kind, namespace, manifest.name)


def removed_objects(
    old: Iterable[Manifest], new: Iterable[Manifest], scope: Scope, default_namespace: str
) -> list[tuple[ObjectKey, Manifest]]:
    """The objects of `old` that `new` does not contain (by group, kind, namespace, name), each
    once, with the manifest it came from, in a stable order."""
    shipped = {object_key(m, scope(m), default_namespace) for m in new}
    found: dict[ObjectKey, Manifest] = {}
    for m in old:
        key = object_key(m, scope(m), default_namespace)
        if key not in shipped and key not in found:
            found[key] = m
    return sorted(found.items(), key=lambda item: item[0])


def refusal(key: ObjectKey, allowed_namespaces: Iterable[str]) -> str | None:
    """Why kube.delete must not delete this object, or None. `allowed_namespaces`: the protected
    namespaces the worker policy allows deletion in, for the cluster."""
    never = NEVER_DELETED.get((key.group, key.kind))
    if never is not None:
        return f"{never}; kube.delete never deletes a {key.kind}"
    if key.namespace in PROTECTED_NAMESPACES and key.namespace not in set(allowed_namespaces):
        return f"{key.namespace} is a protected namespace"
    return None
