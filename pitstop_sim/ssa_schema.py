"""Server-side apply's schema for the built-in kinds: how each list and map merges.

The apiserver reads this from its OpenAPI: `x-kubernetes-list-type` (atomic, set, map) with
`x-kubernetes-list-map-keys`, and `x-kubernetes-map-type`/structType atomic. k8s.io/api
generates them from `+listType=map` / `+listMapKey=...` markers; a list without a marker falls
back to its strategic-merge tags (merge with a key -> map on that key, merge without one -> set,
none -> atomic), which is why the strategic-merge table (`pitstop.kube.merge_keys`) is the
starting point here. Where the markers name more keys than the patch tags, they are listed
below (k8s.io/api @ the mirror's HEAD, core/v1/types.go):
- Container.ports and EphemeralContainerCommon.ports: containerPort, protocol;
- ServiceSpec.ports: port, protocol;
- PodSpec.topologySpreadConstraints: topologyKey, whenUnsatisfiable.
A key with a schema default counts with that default when the object leaves it out
(structured-merge-diff fills list-map keys from `default`): `protocol` defaults to TCP.
Atomic maps and structs: see `_ATOMIC_FIELDS` (LabelSelectors, nodeSelector, NodeSelector,
key selectors); a custom resource's maps are granular unless its schema says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pitstop.kube.merge_keys import list_merge


@dataclass(frozen=True)
class ListKind:
    kind: str  # atomic | set | map
    keys: tuple[str, ...] = ()
    defaults: dict[str, str] = field(default_factory=dict)


_PROTOCOL = {"protocol": "TCP"}
# (parent, field) -> list-map keys, where the markers name more keys than patchMergeKey.
_MAP_KEYS: dict[tuple[str, str], tuple[tuple[str, ...], dict[str, str]]] = {
    ("containers", "ports"): (("containerPort", "protocol"), _PROTOCOL),
    ("initContainers", "ports"): (("containerPort", "protocol"), _PROTOCOL),
    ("ephemeralContainers", "ports"): (("containerPort", "protocol"), _PROTOCOL),
    ("spec", "ports"): (("port", "protocol"), _PROTOCOL),
    ("spec", "topologySpreadConstraints"): (("topologyKey", "whenUnsatisfiable"), {}),
    ("resources", "claims"): (("name",), {}),
}

# Maps and structs replaced whole (`+mapType=atomic` / `+structType=atomic`), by field name:
# metav1.LabelSelector wherever it stands (meta/v1 types.go), PodSpec.nodeSelector, the
# NodeSelector of required node affinity, and the key selectors of env and volumes
# (core/v1 types.go).
_ATOMIC_FIELDS = frozenset(
    {
        "selector",
        "labelSelector",
        "namespaceSelector",
        "podSelector",
        "nodeSelector",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "configMapKeyRef",
        "secretKeyRef",
        "fieldRef",
        "resourceFieldRef",
    }
)
# A Service's selector is a map but atomic too (`+mapType=atomic`); pod affinity's required
# terms share a name with NodeSelector but are a list, which this table never sees.


def list_kind(name: str, parent: str) -> ListKind:
    if (parent, name) in _MAP_KEYS:
        keys, defaults = _MAP_KEYS[parent, name]
        return ListKind("map", keys, defaults)
    strategy = list_merge(name, parent)
    if strategy is None:
        return ListKind("atomic")
    if strategy.key is None:
        return ListKind("set")
    return ListKind("map", (strategy.key,))


def map_is_atomic(name: str, parent: str) -> bool:
    del parent  # the names above are atomic wherever they stand in the built-in kinds
    return name in _ATOMIC_FIELDS
