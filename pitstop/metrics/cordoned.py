"""Count the nodes pitstop has cordoned on a cluster, from the cluster itself.

After a cordon or uncordon the worker asks the apiserver for the unschedulable nodes (a field
selector the apiserver serves for nodes, so a 10,000-node cluster answers with the few that
are cordoned) and counts those carrying pitstop's `cordoned-by` annotation. So the gauge is
the cluster's truth at that moment, whichever worker cordoned which node, and a worker that
restarts shows it again at its next cordon or uncordon.
"""

from __future__ import annotations

import threading
import time

from pitstop.contracts import ModuleCall
from pitstop.kube.annotations import CORDONED_BY
from pitstop.metrics.registry import NODES_CORDONED, NODES_CORDONED_OBSERVED

_lock = threading.Lock()
# cluster -> when the newest applied count was started: an older count finishing later loses.
_applied: dict[str, float] = {}


def cluster_of(call: ModuleCall) -> str:
    return call.cluster.name if call.cluster else "default cluster"


def known_cluster(call: ModuleCall) -> str:
    """The call's cluster as a label, or "unknown": an inventory names its cluster, and a hostile
    one naming a new cluster per run must not add series (a drain there fails the policy anyway)."""
    from pitstop.policy.clusters import known_clusters
    from pitstop.policy.load import current_policy

    name = cluster_of(call)
    try:
        known = call.cluster is None or name in known_clusters(current_policy())
    except Exception:  # a metric never fails a task
        known = False
    return name if known else "unknown"


def observe_cordoned(call: ModuleCall) -> int:
    """Read and publish the count for `call`'s cluster (blocking: run it on a thread)."""
    # Imported here: the Kubernetes client is the activities' (and a worker needs it anyway).
    from activities.kube.common import kube_for

    started = time.time()
    nodes = kube_for(call).list("/api/v1/nodes", field_selector="spec.unschedulable=true")
    count = sum(1 for n in nodes if CORDONED_BY in ((n.get("metadata") or {}).get("annotations") or {}))
    cluster = cluster_of(call)
    with _lock:
        if _applied.get(cluster, 0.0) <= started:
            _applied[cluster] = started
            NODES_CORDONED.labels(cluster).set(count)
            NODES_CORDONED_OBSERVED.labels(cluster).set(time.time())
    return count
