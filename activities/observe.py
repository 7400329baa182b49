"""`kube.observe`: node conditions, pod restarts and GPU error events, looked at once.

A stage's `observe` window runs it at each interval; read-only, so it runs in check mode too.
"""

from __future__ import annotations

from typing import Any

from activities.kube.client import node_path, pods_path
from activities.kube.common import kube_for, kube_module
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.module_args.observe import OBSERVE, ObserveArgs


def _ready(node: dict[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _restarts(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


@kube_module(OBSERVE)
def observe(call: ModuleCall, args: ObserveArgs) -> ModuleResult:
    kube = kube_for(call)
    nodes = args.nodes or [str(call.host_vars.get("node_name") or call.host)]
    problems: list[str] = []
    restarts: dict[str, int] = {}
    for name in nodes:
        node = kube.get_or_none(node_path(name))
        if node is None:
            problems.append(f"node {name} is gone")
            continue
        if not _ready(node):
            problems.append(f"node {name} is not Ready")
        for pod in kube.list(pods_path(), field_selector=f"spec.nodeName={name}"):
            owners = pod["metadata"].get("ownerReferences") or []
            if not args.include_daemonsets and any(o.get("kind") == "DaemonSet" for o in owners):
                continue
            key = f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"
            restarts[key] = _restarts(pod)
            grew = restarts[key] - args.since_restarts.get(key, 0)
            if grew > args.max_pod_restarts:
                problems.append(
                    f"pod {key} on {name} restarted {grew} times (allowed {args.max_pod_restarts})"
                )
    wanted = set(args.gpu_error_events)
    watched = set(nodes)
    for event in kube.list("/api/v1/events"):
        involved = event.get("involvedObject") or {}
        if event.get("reason") in wanted and involved.get("name") in watched:
            problems.append(
                f"{event['reason']} on {involved.get('name')}: {event.get('message', '')}".strip()
            )
    data = {"nodes": nodes, "restarts": restarts}
    if problems:
        return ModuleResult(failed=True, msg="; ".join(problems[:10]), data=data)
    return ModuleResult(msg=f"{len(nodes)} node(s) Ready, no restarts or GPU errors", data=data)


OBSERVE_ACTIVITIES = [observe]
