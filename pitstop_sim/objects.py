"""What the simulator's controllers and API do to objects beyond reading them: new names and
uids, owner references, resource quantities, taints and tolerations, node affinity, conditions.

Reading an object ("is this pod ready?", "which node is it on?") is `pitstop.kube.objects`,
the same answer pitstop's modules use.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from pitstop.kube.objects import meta, name_of
from pitstop_sim.clock import rfc3339
from pitstop_sim.quantity import parse_quantity

Obj = dict[str, Any]

GPU = "nvidia.com/gpu"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet
# Names drawn for one generated name before giving up: the apiserver retries a generateName
# that clashes (RetryGenerateName, on by default since 1.31) up to 8 times.
GENERATE_NAME_ATTEMPTS = 8


def new_uid() -> str:
    """A random (version 4) UUID, as `str(uuid.uuid4())` but without building a UUID object."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def random_suffix(rng: random.Random | None = None, length: int = 5) -> str:
    rng = rng or random.Random()
    return "".join(rng.choice(_NAME_CHARS) for _ in range(length))


def redraw_suffix(name: str, rng: random.Random | None = None, length: int = 5) -> str:
    """`name` with its generated suffix (the last `length` characters) drawn again."""
    return f"{name[:-length]}{random_suffix(rng, length)}"


def now() -> str:
    return rfc3339()


def owner_ref(owner: Mapping[str, Any], *, block: bool = True) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": name_of(owner),
        "uid": meta(owner)["uid"],
        "controller": True,
        "blockOwnerDeletion": block,
    }


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective requests: sum over containers (limits stand in for missing requests, as in the API)."""
    total: dict[str, Decimal] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in merged.items():
            try:
                total[name] = total.get(name, Decimal(0)) + parse_quantity(value)
            except (ValueError, TypeError):
                continue
    return total


def allocatable_of(node: Mapping[str, Any]) -> dict[str, Decimal]:
    """Every allocatable resource of a node as a quantity (the scheduler's view)."""
    out: dict[str, Decimal] = {}
    for name, value in ((node.get("status") or {}).get("allocatable") or {}).items():
        try:
            out[name] = parse_quantity(value)
        except (ValueError, TypeError):
            continue
    return out


def toleration_matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if operator == "Exists":
        return key == "" or key == taint.get("key")
    return bool(key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or ""))


def untolerated(
    tolerations: Iterable[Mapping[str, Any]], taints: Iterable[Mapping[str, Any]], effects: tuple[str, ...]
) -> list[Mapping[str, Any]]:
    tolerations = list(tolerations)
    return [
        taint
        for taint in taints
        if taint.get("effect") in effects and not any(toleration_matches(t, taint) for t in tolerations)
    ]


def node_affinity_matches(pod: Mapping[str, Any], node_labels: Mapping[str, str]) -> bool:
    spec = pod.get("spec") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node_labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    if not required:
        return True
    return any(_term_matches(term, node_labels) for term in required)


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    for expr in term.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op in ("Gt", "Lt"):
            try:
                have, want = int(labels.get(key, "")), int(values[0])
            except (ValueError, IndexError):
                return False
            if (op == "Gt" and not have > want) or (op == "Lt" and not have < want):
                return False
    for expr in term.get("matchFields") or []:
        # metadata.name of the node, which its hostname label carries (DaemonSet pods pin this way).
        pinned = expr.get("key") == "metadata.name" and expr.get("operator") == "In"
        if pinned and labels.get("kubernetes.io/hostname") not in (expr.get("values") or []):
            return False
    return True


def set_condition(
    conditions: list[Obj], kind: str, status: str, reason: str = "", message: str = ""
) -> list[Obj]:
    """Conditions with `kind` set; lastTransitionTime changes only when the status does."""
    out: list[Obj] = []
    found = False
    stamp = now()
    for cond in conditions:
        if cond.get("type") == kind:
            found = True
            changed = cond.get("status") != status
            updated = {**cond, "status": status, "reason": reason, "message": message}
            if changed:
                updated["lastTransitionTime"] = stamp
            out.append(updated)
        else:
            out.append(cond)
    if not found:
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": stamp,
            }
        )
    return out
