"""Accessors over API objects as the apiserver serves them (plain dicts, camelCase).

The one answer to "is this pod ready?", "which node is it on?": pitstop's modules and the
rehearsal cluster's controllers and API (`pitstop_sim`) both read objects through these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]


def meta(obj: Mapping[str, Any]) -> Obj:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name", ""))


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("namespace") or "")


def key_of(obj: Mapping[str, Any]) -> str:
    """`namespace/name` (or `name` for cluster-scoped objects): how results name objects."""
    ns = namespace_of(obj)
    return f"{ns}/{name_of(obj)}" if ns else name_of(obj)


def uid_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("uid", ""))


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    value = meta(obj).get("labels")
    return dict(value) if isinstance(value, dict) else {}


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    value = meta(obj).get("annotations")
    return dict(value) if isinstance(value, dict) else {}


def controller_of(obj: Mapping[str, Any]) -> Obj | None:
    """The ownerReference with `controller: true`, if any."""
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


# --- pods ------------------------------------------------------------------------------------


def pod_phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def pod_is_finished(pod: Mapping[str, Any]) -> bool:
    return pod_phase(pod) in ("Succeeded", "Failed")


def pod_is_active(pod: Mapping[str, Any]) -> bool:
    """Holds resources: not finished and not being deleted."""
    return not pod_is_finished(pod) and not is_terminating(pod)


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    if pod_phase(pod) != "Running":
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def pod_node(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    ref = controller_of(pod)
    return ref is not None and ref.get("kind") == "DaemonSet"


def uses_empty_dir(pod: Mapping[str, Any]) -> bool:
    return any("emptyDir" in (v or {}) for v in (pod.get("spec") or {}).get("volumes") or [])


def resource_count(pod: Mapping[str, Any], resource: str) -> int:
    """Whole units of an extended resource (GPUs) a pod asks for: requests, else limits, summed
    over containers; init containers run one at a time, so their largest request counts."""

    def of(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        value = (resources.get("requests") or {}).get(resource)
        if value is None:
            value = (resources.get("limits") or {}).get(resource)
        return _whole(value)

    spec = pod.get("spec") or {}
    main = sum(of(c) for c in spec.get("containers") or [])
    init = max((of(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def _whole(value: Any) -> int:
    if value is None:
        return 0
    try:
        return int(str(value))
    except ValueError:
        return 0


# --- nodes -----------------------------------------------------------------------------------


def node_condition(node: Mapping[str, Any], kind: str) -> Obj | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def node_is_ready(node: Mapping[str, Any]) -> bool:
    cond = node_condition(node, "Ready")
    return cond is not None and cond.get("status") == "True"


def node_is_unschedulable(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def node_taints(node: Mapping[str, Any]) -> list[Obj]:
    return [dict(t) for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]


def node_allocatable(node: Mapping[str, Any], resource: str) -> int:
    status = node.get("status") or {}
    value = (status.get("allocatable") or {}).get(resource)
    if value is None:
        value = (status.get("capacity") or {}).get(resource)
    return _whole(value)
