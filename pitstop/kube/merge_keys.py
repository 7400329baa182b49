"""Strategic merge: how each list of the built-in kinds merges, from the upstream API types.

The apiserver (applying a strategic merge patch) and kubectl (computing one for `apply`) both
read this from the Go struct tags `patchStrategy:"merge"` and `patchMergeKey:"<key>"` of the
API types; a list with no patch strategy is atomic and replaced whole. Both sides of pitstop
use this one table: `pitstop.kube.apply` builds patches with it, the rehearsal cluster
(`pitstop_sim.patch`) applies them with it, as kubectl and the apiserver share the types.

Source (read 2026-07, the newest tags at the time):
- k8s.io/api core/v1/types.go, apps/v1/types.go, batch/v1/types.go, policy/v1/types.go
  (github.com/kubernetes/api @ 10b39a39bcee995dfe7cd5e8e7b922be5e46f1e2);
- k8s.io/apimachinery pkg/apis/meta/v1/types.go, ObjectMeta.OwnerReferences and .Finalizers
  (github.com/kubernetes/apimachinery @ eed236ceee2c19c2753a3d93ac0631dc20750454).

A list is named by its field and the field holding the struct it stands in (its "parent": for
a list inside list elements, that list's field; `""` at the top of an object). Most names mean
one thing in every built-in kind, so they are keyed by field alone; the few whose strategy
depends on the struct are keyed by (parent, field). One simplification: `conditions` merges on
`type` wherever it stands, while upstream declares no strategy for the conditions of
CertificateSigningRequest, ValidatingAdmissionPolicy and ResourceClaim device statuses (kinds
pitstop and the rehearsal cluster never patch). The alpha volume-health lists
(`healthConditions`, merged on `status` in core/v1 but atomic in storage/v1) are left out, so
replaced whole.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ListMerge:
    """A list with `patchStrategy: merge`: elements are matched by `key`; key None means a list
    of primitives merged as a set (ObjectMeta.finalizers, NodeSpec.podCIDRs)."""

    key: str | None


# field -> merge key, where every built-in type with the field tags it alike.
MERGE_KEYS: dict[str, str | None] = {
    # meta/v1 ObjectMeta
    "ownerReferences": "uid",
    "finalizers": None,
    # core/v1 PodSpec
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",  # patchStrategy "merge,retainKeys"
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "schedulingGates": "name",
    "resourceClaims": "name",  # "merge,retainKeys"; batch/v1's pod-group claims merge on name too
    "evictionResponders": "name",
    # core/v1 Container and EphemeralContainerCommon (ports: see below)
    "env": "name",
    "volumeMounts": "mountPath",  # also ContainerStatus.volumeMounts (VolumeMountStatus)
    "volumeDevices": "devicePath",
    # core/v1 PodStatus, ContainerStatus
    "hostIPs": "ip",
    "podIPs": "ip",
    "resourceClaimStatuses": "name",  # "merge,retainKeys"
    "nodeAllocatableResourceClaimStatuses": "resourceClaimName",
    "allocatedResourcesStatus": "name",
    # core/v1 NodeSpec, ServiceAccount
    "podCIDRs": None,
    "secrets": "name",
    # status conditions: Pod, Node, Namespace, PersistentVolumeClaim, ReplicationController,
    # Service, ComponentStatus (core/v1); Deployment, StatefulSet, DaemonSet, ReplicaSet
    # (apps/v1); Job (batch/v1); PodDisruptionBudget (policy/v1)
    "conditions": "type",
}

# (parent, field) -> merge key, where the same field name is tagged differently by type.
MERGE_KEYS_BY_PARENT: dict[tuple[str, str], str | None] = {
    # Container.ports / EphemeralContainerCommon.ports merge on containerPort ...
    ("containers", "ports"): "containerPort",
    ("initContainers", "ports"): "containerPort",
    ("ephemeralContainers", "ports"): "containerPort",
    # ... ServiceSpec.ports on port; other `ports` (NetworkPolicy, EndpointSlice) are atomic.
    ("spec", "ports"): "port",
    # NodeStatus.addresses merge on type; Endpoints' subset addresses are atomic.
    ("status", "addresses"): "type",
    # core/v1 NodeAllocatableResourceClaimStatus
    ("nodeAllocatableResourceClaimStatuses", "mapping"): "name",
    ("nodeAllocatableResourceClaimStatuses", "overhead"): "name",
}

_PARENT_DEPENDENT = frozenset(field for _, field in MERGE_KEYS_BY_PARENT)

# `patchStrategy:"retainKeys"` (k8s.io/api @ 10b39a39): a patch to the struct names every key
# it keeps (`$retainKeys`), and the server clears the others, so switching a union member
# (RollingUpdate -> Recreate, emptyDir -> hostPath) cannot leave the old member behind.
# Structs, as (parent, field): apps/v1 DeploymentSpec.strategy.
RETAIN_KEYS_STRUCTS = frozenset({("spec", "strategy")})
# Lists whose elements are such structs (`patchStrategy:"merge,retainKeys"`): core/v1
# PodSpec.volumes and .resourceClaims, PodStatus.resourceClaimStatuses.
RETAIN_KEYS_LISTS = frozenset({"volumes", "resourceClaims", "resourceClaimStatuses"})


def retains_keys(field: str, parent: str) -> bool:
    """Whether the map (or each element of the list) at `field` carries a `$retainKeys` list."""
    return (parent, field) in RETAIN_KEYS_STRUCTS or field in RETAIN_KEYS_LISTS


def list_merge(field: str, parent: str) -> ListMerge | None:
    """How list `field` inside `parent` merges; None when it is replaced whole."""
    if field in _PARENT_DEPENDENT:
        if (parent, field) in MERGE_KEYS_BY_PARENT:
            return ListMerge(MERGE_KEYS_BY_PARENT[parent, field])
        return None
    if field in MERGE_KEYS:
        return ListMerge(MERGE_KEYS[field])
    return None
