"""Dynamic inventory groups: `from_nodes: {selector, domain_label}` resolved against the
cluster's nodes when a plan is loaded (labels become host vars, the domain label's value the
host's `failure_domain`; see `Inventory.with_nodes`)."""

from __future__ import annotations

from activities.kube.client import ApiStatus, Kube, KubeConfigError, Unreachable, api_client
from pitstop.kube.objects import labels_of, name_of
from pitstop.runbook import Inventory


class ClusterUnreachable(ValueError):
    """The nodes of a dynamic group could not be listed; the message says why and where."""


def resolve_dynamic_groups(inventory: Inventory) -> Inventory:
    groups = inventory.dynamic_groups()
    if not groups:
        return inventory
    names = ", ".join(g.name for g in groups)
    cluster = inventory.cluster
    if cluster is None:
        raise ValueError(
            f"inventory group(s) {names} are dynamic (from_nodes) but the inventory has no `cluster:` "
            "block saying which cluster to list nodes from"
        )
    try:
        kube = Kube(api_client(cluster, f"dynamic inventory group(s) {names}"), cluster.name)
        nodes = kube.list("/api/v1/nodes")
    except KubeConfigError as exc:
        raise ClusterUnreachable(
            f"cannot list the nodes of cluster {cluster.name!r} for {names}: {exc}"
        ) from None
    except Unreachable as exc:
        raise ClusterUnreachable(
            f"cannot list the nodes of cluster {cluster.name!r} for {names}: {exc}"
        ) from None
    except ApiStatus as exc:
        raise ClusterUnreachable(
            f"cannot list the nodes of cluster {cluster.name!r} for {names}: HTTP {exc.status} {exc.message}"
        ) from None
    return inventory.with_nodes([(name_of(n), labels_of(n)) for n in nodes])
