"""What the apiserver does to an object on its way into storage: defaults, validation, and
the rules of the status subresource (spec and status change through different doors)."""

from __future__ import annotations

import re
from typing import Any

from pitstop.kube.objects import meta
from pitstop_sim.annotations import KUEUE_QUEUE_LABEL
from pitstop_sim.errors import bad_request, invalid
from pitstop_sim.objects import new_uid, now, random_suffix
from pitstop_sim.quantity import is_quantity
from pitstop_sim.resources import ResourceType
from pitstop_sim.store import clone

Obj = dict[str, Any]
Cause = tuple[str, str, str]

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
STOP_POLICIES = ("None", "Hold", "HoldAndDrain")

# Tolerations the DefaultTolerationSeconds admission plugin adds to every pod.
DEFAULT_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)


def prepare_create(
    rt: ResourceType, obj: Obj, namespace: str | None, rng: Any, *, fresh: bool = False
) -> Obj:
    """A new object as it will be stored (without resourceVersion), or ApiError.

    `fresh`: the caller built `obj` for this call and shares none of it, so it is completed in
    place instead of copied (the seeder and controllers creating pods by the thousand)."""
    if not isinstance(obj, dict):
        raise bad_request("the body of the request must be a JSON object")
    if not fresh:
        obj = clone(obj)
    metadata = obj.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise bad_request("metadata must be an object")
    if obj.get("kind") not in (None, rt.kind) or obj.get("apiVersion") not in (None, rt.api_version):
        raise bad_request(
            f"the API version in the data ({obj.get('apiVersion')}) does not match the expected API version "
            f"({rt.api_version})"
            if obj.get("apiVersion") != rt.api_version
            else f"the kind in the data ({obj.get('kind')}) does not match the expected kind ({rt.kind})"
        )
    obj["apiVersion"] = rt.api_version
    obj["kind"] = rt.kind
    if rt.namespaced:
        body_ns = metadata.get("namespace")
        if body_ns and namespace and body_ns != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        metadata["namespace"] = namespace or body_ns or "default"
    else:
        metadata.pop("namespace", None)
    if not metadata.get("name") and metadata.get("generateName"):
        metadata["name"] = f"{metadata['generateName']}{random_suffix(rng)}"
    name = metadata.get("name") or ""
    causes: list[Cause] = []
    if not name:
        causes.append(
            ("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")
        )
    elif rt.group == "rbac.authorization.k8s.io":
        # RBAC names only need to be path segments (`system:discovery`), as in ValidateRBACName.
        if name in (".", "..") or "/" in name or "%" in name:
            reason = "may not be '.' or '..', may not contain '/' or '%'"
            causes.append(("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {reason}'))
    elif not _SUBDOMAIN.match(name) or len(name) > 253:
        causes.append(("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {SUBDOMAIN_MESSAGE}'))
    causes += _label_causes(metadata)
    for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
        metadata.pop(key, None)
    metadata["uid"] = new_uid()
    metadata["creationTimestamp"] = now()
    if rt.has_status() or rt.kind in ("CustomResourceDefinition",):
        metadata["generation"] = 1
    _DEFAULTS.get(rt.kind, _no_defaults)(obj)
    causes += _VALIDATORS.get(rt.kind, _no_causes)(obj)
    if causes:
        raise invalid(rt, name, causes)
    return obj


def prepare_update(rt: ResourceType, old: Obj, new: Obj, subresource: str | None) -> Obj:
    """Merge an update with what may not change through this door; ApiError on invalid input."""
    if not isinstance(new, dict):
        raise bad_request("the body of the request must be a JSON object")
    new = clone(new)
    old_meta = meta(old)
    new_meta = new.setdefault("metadata", {})
    name = old_meta["name"]
    if new_meta.get("name") not in (None, name):
        raise bad_request(
            f"the name of the object ({new_meta.get('name')}) does not match the name on the URL ({name})"
        )
    if subresource == "status":
        merged = clone(old)
        merged["status"] = new.get("status", old.get("status"))
        merged["metadata"]["resourceVersion"] = new_meta.get(
            "resourceVersion", old_meta.get("resourceVersion")
        )
        new = merged
    else:
        for key in (
            "uid",
            "creationTimestamp",
            "namespace",
            "name",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if key in old_meta:
                new_meta[key] = old_meta[key]
            else:
                new_meta.pop(key, None)
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        if rt.has_status():
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
            if _spec_of(new) != _spec_of(old):
                new_meta["generation"] = int(old_meta.get("generation", 1)) + 1
            else:
                new_meta["generation"] = old_meta.get("generation", 1)
    causes = _label_causes(new_meta)
    if rt.kind == "Pod" and subresource is None:
        causes += _pod_update_causes(old, new)
    causes += _VALIDATORS.get(rt.kind, _no_causes)(new)
    if causes:
        raise invalid(rt, name, causes)
    return new


def _spec_of(obj: Obj) -> Any:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _label_causes(metadata: Obj) -> list[Cause]:
    causes: list[Cause] = []
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict):
        return [("metadata.labels", "FieldValueInvalid", "Invalid value: labels must be a map of strings")]
    for key, value in labels.items():
        if not isinstance(value, str) or not _LABEL_VALUE.match(value) or len(value) > 63:
            causes.append(
                (
                    "metadata.labels",
                    "FieldValueInvalid",
                    f'Invalid value: "{value}": a valid label must be an empty string or consist of '
                    "alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                )
            )
        if not key:
            causes.append(
                ("metadata.labels", "FieldValueInvalid", "Invalid value: label keys must not be empty")
            )
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, dict) or any(not isinstance(v, str) for v in annotations.values()):
        causes.append(
            ("metadata.annotations", "FieldValueInvalid", "Invalid value: annotations must be strings")
        )
    return causes


_MUTABLE_POD_SPEC = (
    "activeDeadlineSeconds",
    "tolerations",
    "schedulingGates",
    "containers",
    "initContainers",
)


def _pod_update_causes(old: Obj, new: Obj) -> list[Cause]:
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    for key in set(old_spec) | set(new_spec):
        if key in _MUTABLE_POD_SPEC:
            continue
        if key == "nodeName" and not old_spec.get("nodeName"):
            continue
        if old_spec.get(key) != new_spec.get(key):
            return [
                (
                    "spec",
                    "FieldValueForbidden",
                    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                    "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
                    "(only additions to existing tolerations), `spec.terminationGracePeriodSeconds` "
                    "(allow it to be set to 1 if it was previously negative)",
                )
            ]
    return []


# --- defaults -------------------------------------------------------------------------------


def _no_defaults(obj: Obj) -> None:
    return None


def _no_causes(obj: Obj) -> list[Cause]:
    return []


def _pod_defaults(pod: Obj) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    tolerations = spec.setdefault("tolerations", [])
    for default in DEFAULT_TOLERATIONS:
        if not any(t.get("key") == default["key"] and t.get("effect") == "NoExecute" for t in tolerations):
            tolerations.append(dict(default))
    for container in spec.get("containers") or []:
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
    status = pod.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status["qosClass"] = _qos_class(spec.get("containers") or [])


def _qos_class(containers: list[Obj]) -> str:
    """Guaranteed when every container's cpu and memory limits equal its requests, BestEffort
    when nothing is requested or limited, Burstable otherwise (as the apiserver decides)."""
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            limit = limits.get(name)
            if limit is None or requests.get(name, limit) != limit:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _node_defaults(node: Obj) -> None:
    node.setdefault("spec", {})
    status = node.setdefault("status", {})
    status.setdefault("conditions", [])


def _namespace_defaults(ns: Obj) -> None:
    ns.setdefault("spec", {"finalizers": ["kubernetes"]})
    ns["status"] = {"phase": "Active"}
    labels = ns["metadata"].setdefault("labels", {})
    labels["kubernetes.io/metadata.name"] = ns["metadata"]["name"]


def _job_defaults(job: Obj) -> None:
    spec = job.setdefault("spec", {})
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", spec["parallelism"] if spec.get("completionMode") == "Indexed" else 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    uid = job["metadata"]["uid"]
    name = job["metadata"]["name"]
    labels = job["metadata"].get("labels") or {}
    if labels.get(KUEUE_QUEUE_LABEL):
        # Kueue's webhook suspends queued Jobs; Kueue unsuspends them on admission.
        spec["suspend"] = True
    if "selector" not in spec:
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    template = spec.setdefault("template", {})
    template_meta = template.setdefault("metadata", {})
    template_labels = template_meta.setdefault("labels", {})
    template_labels.update(
        {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
    )
    template.setdefault("spec", {}).setdefault("restartPolicy", "Never")
    job.setdefault("status", {})


def _deployment_defaults(deploy: Obj) -> None:
    spec = deploy.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    spec.setdefault(
        "strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    )
    deploy.setdefault("status", {})


def _daemonset_defaults(ds: Obj) -> None:
    spec = ds.setdefault("spec", {})
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault(
        "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    )
    ds.setdefault(
        "status",
        {"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0},
    )


def _pdb_defaults(pdb: Obj) -> None:
    pdb.setdefault("spec", {})
    pdb["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}


def _cluster_queue_defaults(cq: Obj) -> None:
    spec = cq.setdefault("spec", {})
    spec.setdefault("stopPolicy", "None")
    spec.setdefault("namespaceSelector", {})
    spec.setdefault("queueingStrategy", "BestEffortFIFO")


_DEFAULTS = {
    "Pod": _pod_defaults,
    "Node": _node_defaults,
    "Namespace": _namespace_defaults,
    "Job": _job_defaults,
    "Deployment": _deployment_defaults,
    "DaemonSet": _daemonset_defaults,
    "PodDisruptionBudget": _pdb_defaults,
    "ClusterQueue": _cluster_queue_defaults,
}


# --- validation -----------------------------------------------------------------------------


def _pod_causes(pod: Obj) -> list[Cause]:
    containers = (pod.get("spec") or {}).get("containers")
    if not containers:
        return [("spec.containers", "FieldValueRequired", "Required value")]
    causes: list[Cause] = []
    for index, container in enumerate(containers):
        if not container.get("name"):
            causes.append((f"spec.containers[{index}].name", "FieldValueRequired", "Required value"))
        if not container.get("image"):
            causes.append((f"spec.containers[{index}].image", "FieldValueRequired", "Required value"))
        for kind in ("requests", "limits"):
            for resource, value in ((container.get("resources") or {}).get(kind) or {}).items():
                if not is_quantity(value):
                    causes.append(
                        (
                            f"spec.containers[{index}].resources.{kind}[{resource}]",
                            "FieldValueInvalid",
                            f'Invalid value: "{value}": quantities must match the regular expression '
                            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                        )
                    )
    return causes


def _node_causes(node: Obj) -> list[Cause]:
    causes: list[Cause] = []
    spec = node.get("spec") or {}
    if "unschedulable" in spec and not isinstance(spec["unschedulable"], bool):
        causes.append(
            (
                "spec.unschedulable",
                "FieldValueInvalid",
                f"Invalid value: {spec['unschedulable']!r}: must be a boolean",
            )
        )
    seen: set[tuple[str, str]] = set()
    for index, taint in enumerate(spec.get("taints") or []):
        field = f"spec.taints[{index}]"
        if not isinstance(taint, dict) or not taint.get("key"):
            causes.append((f"{field}.key", "FieldValueRequired", "Required value"))
            continue
        effect = taint.get("effect")
        if effect not in TAINT_EFFECTS:
            causes.append(
                (
                    f"{field}.effect",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{effect}": supported values: '
                    '"NoSchedule", "PreferNoSchedule", "NoExecute"',
                )
            )
        pair = (taint["key"], str(effect))
        if pair in seen:
            causes.append(
                (
                    f"{field}",
                    "FieldValueDuplicate",
                    "Duplicate value: taints must be unique by key and effect pair",
                )
            )
        seen.add(pair)
    return causes


def _pdb_causes(pdb: Obj) -> list[Cause]:
    spec = pdb.get("spec") or {}
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        return [
            ("spec", "FieldValueInvalid", "Invalid value: minAvailable and maxUnavailable cannot be both set")
        ]
    return []


def _cluster_queue_causes(cq: Obj) -> list[Cause]:
    policy = (cq.get("spec") or {}).get("stopPolicy", "None")
    if policy not in STOP_POLICIES:
        return [
            (
                "spec.stopPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{policy}": supported values: "None", "Hold", "HoldAndDrain"',
            )
        ]
    return []


def _crd_causes(crd: Obj) -> list[Cause]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    causes: list[Cause] = []
    for key in ("group", "scope"):
        if not spec.get(key):
            causes.append((f"spec.{key}", "FieldValueRequired", "Required value"))
    for key in ("plural", "kind"):
        if not names.get(key):
            causes.append((f"spec.names.{key}", "FieldValueRequired", "Required value"))
    if not spec.get("versions"):
        causes.append(
            (
                "spec.versions",
                "FieldValueRequired",
                "Required value: must have exactly one version marked as storage version",
            )
        )
    name = (crd.get("metadata") or {}).get("name")
    if names.get("plural") and spec.get("group") and name != f"{names['plural']}.{spec['group']}":
        causes.append(
            (
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
            )
        )
    # The apiserver refuses to drop a version objects may still be stored in (migrate first).
    served = {v.get("name") for v in spec.get("versions") or []}
    for index, stored in enumerate((crd.get("status") or {}).get("storedVersions") or []):
        if spec.get("versions") and stored not in served:
            causes.append(
                (
                    f"status.storedVersions[{index}]",
                    "FieldValueInvalid",
                    f'Invalid value: "{stored}": must appear in spec.versions',
                )
            )
    return causes


_VALIDATORS = {
    "Pod": _pod_causes,
    "Node": _node_causes,
    "PodDisruptionBudget": _pdb_causes,
    "ClusterQueue": _cluster_queue_causes,
    "CustomResourceDefinition": _crd_causes,
}
