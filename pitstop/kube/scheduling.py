"""Could the scheduler put this pod on that node? The node-level filters of kube-scheduler that
decide where a drained pod can go (pkg/scheduler/framework/plugins: NodeUnschedulable,
NodeName, NodeAffinity with `nodeSelector` and required node affinity, TaintToleration), so a
capacity check does not count the GPUs of a dedicated pool the pod may not use.

The filters that read the pods around a node (topology spread constraints, required inter-pod
affinity and anti-affinity) are `pitstop.kube.pod_placement`. Not modelled: preferred (soft)
terms, which only rank nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pitstop.kube.objects import labels_of, name_of, node_taints

Obj = dict[str, Any]


def _number(text: Any) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def _requirement_holds(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""
    key, op = requirement.get("key", ""), requirement.get("operator", "")
    values = [str(v) for v in requirement.get("values") or []]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        have, bound = _number(labels[key]), _number(values[0])
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _term_holds(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A NodeSelectorTerm: all its expressions and fields hold (an empty term matches nothing)."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = labels_of(node)
    field_values = {"metadata.name": name_of(node)}
    return all(_requirement_holds(r, labels) for r in expressions) and all(
        _requirement_holds(r, field_values) for r in fields
    )


def affinity_allows(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    labels = labels_of(node)
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    return any(_term_holds(term, node) for term in required.get("nodeSelectorTerms") or [])


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """v1.Toleration.ToleratesTaint: the effect (empty tolerates all), the key (empty with
    Exists tolerates all keys), and Equal's value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    return operator == "Exists" or str(toleration.get("value") or "") == str(taint.get("value") or "")


def untolerated_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> Obj | None:
    """The first NoSchedule/NoExecute taint of the node the pod does not tolerate."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in node_taints(node):
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations if isinstance(t, dict)):
            return taint
    return None


def can_run_on(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    return affinity_allows(pod, node) and untolerated_taint(pod, node) is None
