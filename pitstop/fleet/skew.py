"""Skew between clusters (pure): for each component of the version inventory, which clusters
run a version other than the newest any cluster runs, or other than the majority's.

Versions are compared as `inventory.versions` compares them (`same_version`: `v1.30.6` equals
`1.30.6`); "newest" orders what reads as a version (`try_parse_version`); a value that does not
("not deployed") is never the newest, and differs from it."""

from __future__ import annotations

from collections.abc import Mapping

from pitstop.compat.components import COMPONENT_KEYS, ROW_OF
from pitstop.compat.versions import try_parse_version
from pitstop.fleet.models import ClusterInventory, SkewRow
from pitstop.versions.collect import same_version


def _groups(by_cluster: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """(version, clusters running it), in the order first seen; equal versions share a group."""
    groups: list[tuple[str, list[str]]] = []
    for cluster, version in by_cluster.items():
        for shown, members in groups:
            if same_version(shown, version):
                members.append(cluster)
                break
        else:
            groups.append((version, [cluster]))
    return groups


def _newest(groups: list[tuple[str, list[str]]]) -> tuple[str, list[str]] | None:
    parsed = [(v, g) for g in groups if (v := try_parse_version(g[0])) is not None]
    if not parsed:
        return None
    best_version, best = parsed[0]
    for version, group in parsed[1:]:
        if best_version < version:
            best_version, best = version, group
    return best


def component_skew(component: str, by_cluster: Mapping[str, str]) -> SkewRow | None:
    """The skew of one component across clusters, None when they all run the same version."""
    groups = _groups(by_cluster)
    if len(groups) < 2:
        return None
    newest = _newest(groups)
    majority = next((g for g in groups if len(g[1]) * 2 > len(by_cluster)), None)
    return SkewRow(
        component=component,
        row=ROW_OF.get(component, ""),
        by_cluster=dict(sorted(by_cluster.items())),
        newest=newest[0] if newest else None,
        majority=majority[0] if majority else None,
        behind_newest=sorted(c for c in by_cluster if c not in newest[1]) if newest else [],
        off_majority=sorted(c for c in by_cluster if c not in majority[1]) if majority else [],
    )


def fleet_skew(inventories: Mapping[str, ClusterInventory]) -> list[SkewRow]:
    """Every component whose version differs between the inventoried clusters, in the version
    inventory's order. A component a cluster's inventory lacks (an older pitstop) is compared
    among the clusters that report it."""
    seen = [c.component for inv in inventories.values() for c in inv.components]
    order = [*COMPONENT_KEYS, *dict.fromkeys(k for k in seen if k not in COMPONENT_KEYS)]
    rows: list[SkewRow] = []
    for component in order:
        by_cluster = {
            name: version
            for name, inv in inventories.items()
            if (version := inv.version_of(component)) is not None
        }
        row = component_skew(component, by_cluster)
        if row is not None:
            rows.append(row)
    return rows
