"""kube-state-metrics' `/metrics` for the simulated cluster's nodes and pods.

Only the families the alert pack and pitstop's observe windows read, with kube-state-metrics'
label sets (docs/metrics/workload/pod-metrics.md, docs/metrics/cluster/node-metrics.md) and
its HELP texts with their stability prefix:

  kube_node_status_condition{node, condition, status}    one per status, 1 for the current
  kube_node_spec_unschedulable{node}                      1 while cordoned
  kube_node_info{node, kernel_version, os_image, container_runtime_version, kubelet_version, ...}
  kube_pod_info{namespace, pod, uid, host_ip, pod_ip, node, created_by_kind, created_by_name,
                priority_class, host_network}
  kube_pod_status_phase{namespace, pod, uid, phase}       one per phase, 1 for the current
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pitstop_sim.context import SimContext
from pitstop_sim.metrics.exposition import Family

_STATUSES = (("true", "True"), ("false", "False"), ("unknown", "Unknown"))
_PHASES = ("Pending", "Succeeded", "Failed", "Unknown", "Running")


def _node_families(nodes: list[dict[str, Any]]) -> list[Family]:
    info = Family("kube_node_info", "gauge", "[STABLE] Information about a cluster node.")
    unschedulable = Family(
        "kube_node_spec_unschedulable", "gauge", "[STABLE] Whether a node can schedule new pods."
    )
    conditions = Family("kube_node_status_condition", "gauge", "[STABLE] The condition of a cluster node.")
    for node in nodes:
        name = node["metadata"]["name"]
        status = node.get("status") or {}
        node_info = status.get("nodeInfo") or {}
        internal_ip = next(
            (a.get("address", "") for a in status.get("addresses", []) if a.get("type") == "InternalIP"), ""
        )
        info.add(
            (
                ("node", name),
                ("kernel_version", node_info.get("kernelVersion", "")),
                ("os_image", node_info.get("osImage", "")),
                ("container_runtime_version", node_info.get("containerRuntimeVersion", "")),
                ("kubelet_version", node_info.get("kubeletVersion", "")),
                ("kubeproxy_version", node_info.get("kubeProxyVersion", "")),
                ("provider_id", (node.get("spec") or {}).get("providerID", "")),
                ("pod_cidr", (node.get("spec") or {}).get("podCIDR", "")),
                ("system_uuid", node_info.get("systemUUID", "")),
                ("internal_ip", internal_ip),
            ),
            1,
        )
        unschedulable.add((("node", name),), 1 if (node.get("spec") or {}).get("unschedulable") else 0)
        for condition in status.get("conditions", []):
            for label, value in _STATUSES:
                conditions.add(
                    (("node", name), ("condition", condition["type"]), ("status", label)),
                    1 if condition.get("status") == value else 0,
                )
    return [info, unschedulable, conditions]


def _pod_families(pods: list[dict[str, Any]]) -> list[Family]:
    info = Family("kube_pod_info", "gauge", "[STABLE] Information about pod.")
    phase = Family("kube_pod_status_phase", "gauge", "[STABLE] The pods current phase.")
    for pod in pods:
        meta = pod["metadata"]
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        owner: dict[str, Any] = next((o for o in meta.get("ownerReferences", []) if o.get("controller")), {})
        ident = (
            ("namespace", meta.get("namespace", "default")),
            ("pod", meta["name"]),
            ("uid", meta.get("uid", "")),
        )
        info.add(
            (
                *ident,
                ("host_ip", status.get("hostIP", "")),
                ("pod_ip", status.get("podIP", "")),
                ("node", spec.get("nodeName", "")),
                ("created_by_kind", owner.get("kind", "")),
                ("created_by_name", owner.get("name", "")),
                ("priority_class", spec.get("priorityClassName", "")),
                ("host_network", "true" if spec.get("hostNetwork") else "false"),
            ),
            1,
        )
        current = status.get("phase", "Pending")
        for name in _PHASES:
            phase.add((*ident, ("phase", name)), 1 if name == current else 0)
    return [info, phase]


def families(ctx: SimContext) -> list[Family]:
    nodes = sorted(ctx.store.list("nodes").items, key=lambda n: n["metadata"]["name"])
    pods = sorted(
        ctx.store.list("pods").items,
        key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"]["name"]),
    )
    return [*_node_families(nodes), *_pod_families(pods)]
