"""Server-side printing: `meta.k8s.io/v1 Table` responses, which `kubectl get` asks for.

Columns and cell formats follow the apiserver's printers (pkg/printers/internalversion), so
`kubectl get nodes -o wide` shows STATUS `Ready,SchedulingDisabled`, ROLES, VERSION,
INTERNAL-IP, OS-IMAGE, KERNEL-VERSION and CONTAINER-RUNTIME as on a real cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pitstop.kube.objects import (
    annotations_of,
    is_terminating,
    labels_of,
    meta,
    name_of,
    node_condition,
    node_is_ready,
    pod_phase,
)
from pitstop_sim.clock import human_age, human_duration, parse_rfc3339
from pitstop_sim.resources import ResourceType
from pitstop_sim.selectors import selector_string

Obj = dict[str, Any]
Column = tuple[str, str, int, str]  # name, type, priority, description
Row = Callable[[Obj, datetime], list[Any]]

NAME_COLUMN: Column = ("Name", "string", 0, "Name must be unique within a namespace.")
AGE_COLUMN: Column = (
    "Age",
    "string",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)


def _age(obj: Obj, now: datetime) -> str:
    return human_age(meta(obj).get("creationTimestamp"), now)


def _str(value: Any) -> str:
    return "<none>" if value in (None, "", []) else str(value)


# --- nodes ----------------------------------------------------------------------------------


def _node_status(node: Obj) -> str:
    cond = node_condition(node, "Ready")
    if cond is None:
        status = ["Unknown"]
    elif cond.get("status") == "True":
        status = ["Ready"]
    else:
        status = ["NotReady"]
    if (node.get("spec") or {}).get("unschedulable"):
        status.append("SchedulingDisabled")
    return ",".join(status)


def _node_roles(node: Obj) -> str:
    roles = sorted(
        key.split("/", 1)[1]
        for key in labels_of(node)
        if key.startswith("node-role.kubernetes.io/") and key.split("/", 1)[1]
    )
    kind = labels_of(node).get("kubernetes.io/role")
    if kind:
        roles.append(kind)
    return ",".join(roles) or "<none>"


def _address(node: Obj, kind: str) -> str:
    for addr in (node.get("status") or {}).get("addresses") or []:
        if addr.get("type") == kind:
            return str(addr.get("address"))
    return "<none>"


def _node_row(node: Obj, now: datetime) -> list[Any]:
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return [
        name_of(node),
        _node_status(node),
        _node_roles(node),
        _age(node, now),
        info.get("kubeletVersion", ""),
        _address(node, "InternalIP"),
        _address(node, "ExternalIP"),
        _str(info.get("osImage")),
        _str(info.get("kernelVersion")),
        _str(info.get("containerRuntimeVersion")),
    ]


NODE_COLUMNS: list[Column] = [
    NAME_COLUMN,
    ("Status", "string", 0, "The status of the node"),
    ("Roles", "string", 0, "The roles of the node"),
    AGE_COLUMN,
    ("Version", "string", 0, "Kubelet Version reported by the node."),
    ("Internal-IP", "string", 1, "List of addresses reachable to the node."),
    ("External-IP", "string", 1, "List of addresses reachable to the node."),
    (
        "OS-Image",
        "string",
        1,
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    ),
    (
        "Kernel-Version",
        "string",
        1,
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    ),
    (
        "Container-Runtime",
        "string",
        1,
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    ),
]


# --- pods -----------------------------------------------------------------------------------


def _pod_row(pod: Obj, now: datetime) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len(spec.get("containers") or [])
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    reason = status.get("reason") or pod_phase(pod)
    for s in statuses:
        state = s.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif (
            "terminated" in state and state["terminated"].get("reason") and pod_phase(pod) not in ("Running",)
        ):
            reason = state["terminated"]["reason"]
    if pod_phase(pod) == "Pending" and spec.get("nodeName") and not statuses:
        reason = "ContainerCreating"
    if is_terminating(pod):
        reason = "Terminating"
    return [
        name_of(pod),
        f"{ready}/{total}",
        reason,
        str(restarts),
        _age(pod, now),
        _str(status.get("podIP")),
        _str(spec.get("nodeName")),
        _str(status.get("nominatedNodeName")),
        "<none>",
    ]


POD_COLUMNS: list[Column] = [
    NAME_COLUMN,
    ("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
    ("Status", "string", 0, "The aggregate status of the containers in this pod."),
    (
        "Restarts",
        "string",
        0,
        "The number of times the containers in this pod have been restarted.",
    ),
    AGE_COLUMN,
    (
        "IP",
        "string",
        1,
        "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    ),
    ("Node", "string", 1, "NodeName is a request to schedule this pod onto a specific node."),
    (
        "Nominated Node",
        "string",
        1,
        "nominatedNodeName is set only when this pod preempts other pods on the node.",
    ),
    (
        "Readiness Gates",
        "string",
        1,
        "If specified, all readiness gates will be evaluated for pod readiness.",
    ),
]


# --- workloads --------------------------------------------------------------------------------


def _containers(obj: Obj) -> tuple[str, str]:
    template = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = template.get("containers") or []
    return ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)


def _deployment_row(obj: Obj, now: datetime) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(obj)
    return [
        name_of(obj),
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        _age(obj, now),
        names,
        images,
        selector_string(spec.get("selector")),
    ]


def _replicaset_row(obj: Obj, now: datetime) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(obj)
    return [
        name_of(obj),
        spec.get("replicas", 1),
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        _age(obj, now),
        names,
        images,
        selector_string(spec.get("selector")),
    ]


def _daemonset_row(obj: Obj, now: datetime) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(obj)
    selector = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    return [
        name_of(obj),
        status.get("desiredNumberScheduled", 0),
        status.get("currentNumberScheduled", 0),
        status.get("numberReady", 0),
        status.get("updatedNumberScheduled", 0),
        status.get("numberAvailable", 0),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
        _age(obj, now),
        names,
        images,
        selector_string(spec.get("selector")),
    ]


def _job_status(job: Obj) -> str:
    conditions = {c.get("type"): c.get("status") for c in (job.get("status") or {}).get("conditions") or []}
    for kind, label in (
        ("Complete", "Complete"),
        ("Failed", "Failed"),
        ("FailureTarget", "FailureTarget"),
        ("SuccessCriteriaMet", "SuccessCriteriaMet"),
        ("Suspended", "Suspended"),
    ):
        if conditions.get(kind) == "True":
            return label
    return "Running"


def _job_row(obj: Obj, now: datetime) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(obj)
    completions = spec.get("completions")
    completions_text = (
        f"{status.get('succeeded', 0)}/{completions}"
        if completions is not None
        else f"{status.get('succeeded', 0)}/1 of {spec.get('parallelism', 1)}"
    )
    duration = ""
    if status.get("startTime"):
        end = parse_rfc3339(status["completionTime"]) if status.get("completionTime") else now
        duration = human_duration(int((end - parse_rfc3339(status["startTime"])).total_seconds()))
    return [
        name_of(obj),
        _job_status(obj),
        completions_text,
        duration,
        _age(obj, now),
        names,
        images,
        selector_string(spec.get("selector")),
    ]


def _pdb_row(obj: Obj, now: datetime) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [
        name_of(obj),
        "N/A" if spec.get("minAvailable") is None else str(spec["minAvailable"]),
        "N/A" if spec.get("maxUnavailable") is None else str(spec["maxUnavailable"]),
        status.get("disruptionsAllowed", 0),
        _age(obj, now),
    ]


def _namespace_row(obj: Obj, now: datetime) -> list[Any]:
    return [name_of(obj), (obj.get("status") or {}).get("phase", "Active"), _age(obj, now)]


def _event_row(obj: Obj, now: datetime) -> list[Any]:
    involved = obj.get("involvedObject") or {}
    last = obj.get("lastTimestamp") or meta(obj).get("creationTimestamp")
    return [
        human_age(last, now),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        obj.get("message", ""),
        (obj.get("source") or {}).get("component", ""),
        "",
        human_age(obj.get("firstTimestamp") or last, now),
        obj.get("count", 1),
        name_of(obj),
    ]


def _crd_row(obj: Obj, now: datetime) -> list[Any]:
    return [name_of(obj), meta(obj).get("creationTimestamp", "")]


def _lease_row(obj: Obj, now: datetime) -> list[Any]:
    return [name_of(obj), (obj.get("spec") or {}).get("holderIdentity", ""), _age(obj, now)]


def _webhook_row(obj: Obj, now: datetime) -> list[Any]:
    return [name_of(obj), len(obj.get("webhooks") or []), _age(obj, now)]


def _data_row(obj: Obj, now: datetime) -> list[Any]:
    return [name_of(obj), len(obj.get("data") or {}), _age(obj, now)]


def _secret_row(obj: Obj, now: datetime) -> list[Any]:
    return [name_of(obj), obj.get("type", "Opaque"), len(obj.get("data") or {}), _age(obj, now)]


TABLES: dict[tuple[str, str], tuple[list[Column], Row]] = {
    ("", "nodes"): (NODE_COLUMNS, _node_row),
    ("", "pods"): (POD_COLUMNS, _pod_row),
    ("", "namespaces"): (
        [NAME_COLUMN, ("Status", "string", 0, "The status of the namespace"), AGE_COLUMN],
        _namespace_row,
    ),
    ("", "events"): (
        [
            ("Last Seen", "string", 0, "Time when last event occurred"),
            ("Type", "string", 0, "Type of event"),
            ("Reason", "string", 0, "Reason for the transition into the object's current status"),
            ("Object", "string", 0, "Object the event is about"),
            ("Message", "string", 0, "A human-readable description of the status of this operation."),
            ("Source", "string", 1, "The component reporting this event."),
            ("Subobject", "string", 1, "The subobject of the involved object."),
            ("First Seen", "string", 1, "Time when first event occurred"),
            ("Count", "string", 1, "The number of times this event has occurred."),
            ("Name", "string", 1, "Name must be unique within a namespace."),
        ],
        _event_row,
    ),
    ("", "configmaps"): (
        [NAME_COLUMN, ("Data", "string", 0, "Data contains the configuration data."), AGE_COLUMN],
        _data_row,
    ),
    ("", "secrets"): (
        [
            NAME_COLUMN,
            ("Type", "string", 0, "The type of secret"),
            ("Data", "string", 0, "Data contains the secret data."),
            AGE_COLUMN,
        ],
        _secret_row,
    ),
    ("apps", "deployments"): (
        [
            NAME_COLUMN,
            ("Ready", "string", 0, "Number of the pod with ready state"),
            (
                "Up-to-date",
                "string",
                0,
                "Non-terminated pods of this deployment that have the desired template spec.",
            ),
            (
                "Available",
                "string",
                0,
                "Available pods (ready for at least minReadySeconds) of this deployment.",
            ),
            AGE_COLUMN,
            ("Containers", "string", 1, "Names of each container in the template."),
            ("Images", "string", 1, "Images referenced by each container in the template."),
            (
                "Selector",
                "string",
                1,
                "Label selector for pods.",
            ),
        ],
        _deployment_row,
    ),
    ("apps", "replicasets"): (
        [
            NAME_COLUMN,
            ("Desired", "integer", 0, "Replicas is the number of desired replicas."),
            ("Current", "integer", 0, "Replicas is the most recently observed number of replicas."),
            ("Ready", "integer", 0, "The number of ready replicas for this replica set."),
            AGE_COLUMN,
            ("Containers", "string", 1, "Names of each container in the template."),
            ("Images", "string", 1, "Images referenced by each container in the template."),
            (
                "Selector",
                "string",
                1,
                "Selector is a label query over pods that should match the replica count.",
            ),
        ],
        _replicaset_row,
    ),
    ("apps", "daemonsets"): (
        [
            NAME_COLUMN,
            ("Desired", "integer", 0, "The total number of nodes that should be running the daemon pod."),
            (
                "Current",
                "integer",
                0,
                "Nodes running at least 1 daemon pod that are supposed to run it.",
            ),
            (
                "Ready",
                "integer",
                0,
                "Nodes that should run the daemon pod and have it running and ready.",
            ),
            ("Up-to-date", "integer", 0, "The total number of nodes that are running updated daemon pod"),
            (
                "Available",
                "integer",
                0,
                "Nodes that should run the daemon pod and have it running and available.",
            ),
            (
                "Node Selector",
                "string",
                0,
                "NodeSelector is a selector which must be true for the pod to fit on a node.",
            ),
            AGE_COLUMN,
            ("Containers", "string", 1, "Names of each container in the template."),
            ("Images", "string", 1, "Images referenced by each container in the template."),
            ("Selector", "string", 1, "A label query over pods that are managed by the daemon set."),
        ],
        _daemonset_row,
    ),
    ("batch", "jobs"): (
        [
            NAME_COLUMN,
            ("Status", "string", 0, "Status of the job."),
            (
                "Completions",
                "string",
                0,
                "The desired number of successfully finished pods the job should be run with.",
            ),
            ("Duration", "string", 0, "Time required to complete the job."),
            AGE_COLUMN,
            ("Containers", "string", 1, "Names of each container in the template."),
            ("Images", "string", 1, "Images referenced by each container in the template."),
            ("Selector", "string", 1, "A label query over pods that should match the pod count."),
        ],
        _job_row,
    ),
    ("policy", "poddisruptionbudgets"): (
        [
            NAME_COLUMN,
            ("Min Available", "string", 0, "The minimum number of pods that must be available."),
            ("Max Unavailable", "string", 0, "The maximum number of pods that may be unavailable."),
            (
                "Allowed Disruptions",
                "integer",
                0,
                "Calculated number of pods that may be disrupted at this time.",
            ),
            AGE_COLUMN,
        ],
        _pdb_row,
    ),
    ("apiextensions.k8s.io", "customresourcedefinitions"): (
        [NAME_COLUMN, ("Created At", "date", 0, "")],
        _crd_row,
    ),
    ("coordination.k8s.io", "leases"): (
        [NAME_COLUMN, ("Holder", "string", 0, "The holder of the lease."), AGE_COLUMN],
        _lease_row,
    ),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): (
        [NAME_COLUMN, ("Webhooks", "integer", 0, "Number of webhooks."), AGE_COLUMN],
        _webhook_row,
    ),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): (
        [NAME_COLUMN, ("Webhooks", "integer", 0, "Number of webhooks."), AGE_COLUMN],
        _webhook_row,
    ),
}


def _json_path(obj: Obj, path: str) -> Any:
    current: Any = obj
    for part in path.strip(".").split("."):
        if not part:
            continue
        if not isinstance(current, dict):
            return None
        current = current.get(part)
    return current


def _custom_columns(rt: ResourceType) -> tuple[list[Column], Row]:
    """CRDs print their additionalPrinterColumns (jsonPath cells), or Name + Age."""
    if not rt.printer_columns:
        return [NAME_COLUMN, AGE_COLUMN], lambda obj, now: [name_of(obj), _age(obj, now)]
    columns: list[Column] = [NAME_COLUMN]
    paths: list[tuple[str, str]] = []
    for col in rt.printer_columns:
        kind = col.get("type", "string")
        columns.append((col["name"], kind, int(col.get("priority", 0)), col.get("description", "")))
        paths.append((col.get("jsonPath", ""), kind))

    def row(obj: Obj, now: datetime) -> list[Any]:
        cells: list[Any] = [name_of(obj)]
        for path, kind in paths:
            value = _json_path(obj, path)
            if kind == "date" and isinstance(value, str):
                cells.append(human_age(value, now))
            else:
                cells.append(value if value is not None else None)
        return cells

    return columns, row


def columns_for(rt: ResourceType) -> tuple[list[Column], Row]:
    if rt.custom:
        return _custom_columns(rt)
    return TABLES.get(
        (rt.group, rt.plural), ([NAME_COLUMN, AGE_COLUMN], lambda obj, now: [name_of(obj), _age(obj, now)])
    )


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    metadata = dict(meta(obj))
    metadata.pop("managedFields", None)
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata}


def table(
    rt: ResourceType,
    items: list[Obj],
    *,
    include_object: str = "Metadata",
    list_meta: Obj | None = None,
    include_columns: bool = True,
) -> Obj:
    columns, row = columns_for(rt)
    now = datetime.now(UTC)
    rows = []
    for obj in items:
        cells = row(obj, now)
        entry: Obj = {"cells": cells}
        embedded = _row_object(obj, include_object)
        if embedded is not None:
            entry["object"] = embedded
        rows.append(entry)
    out: Obj = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta or {},
        "rows": rows,
    }
    if include_columns:
        out["columnDefinitions"] = [
            {
                "name": name,
                "type": kind,
                "format": "name" if name == "Name" else "",
                "description": desc,
                "priority": prio,
            }
            for name, kind, prio, desc in columns
        ]
    return out


def node_ready_reason(node: Obj) -> str:
    """For tests and describe: the Ready condition's reason."""
    cond = node_condition(node, "Ready")
    return str(cond.get("reason", "")) if cond else ""


__all__ = ["annotations_of", "columns_for", "node_is_ready", "node_ready_reason", "table"]
