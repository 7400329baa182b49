"""PodDisruptionBudget arithmetic, as the disruption controller computes it.

Pure functions over plain objects: which PDBs cover a pod, and a PDB's status
(`expectedPods`, `desiredHealthy`, `currentHealthy`, `disruptionsAllowed`) from the pods it
selects and the scale of their controllers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pitstop.kube.objects import controller_of, is_terminating, meta, name_of, pod_is_ready
from pitstop.kube.selectors import labels_match, selector_requirements
from pitstop_sim.clock import parse_rfc3339
from pitstop_sim.objects import set_condition

Obj = dict[str, Any]
# Returns the desired replica count of a pod's controller, or None when it has no scalable one.
ScaleOf = Callable[[Obj], int | None]

DISRUPTED_POD_TIMEOUT = 120.0  # seconds an evicted pod stays in status.disruptedPods


def pdb_selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    if meta(pdb).get("namespace") != meta(pod).get("namespace"):
        return False
    try:
        requirements = selector_requirements((pdb.get("spec") or {}).get("selector"))
    except ValueError:
        return False
    # An empty selector matches every pod in the namespace (policy/v1 semantics).
    return labels_match(requirements, meta(pod).get("labels") or {})


def _selected_pods(pdb: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`pdb_selects` over many pods, with the selector parsed once."""
    try:
        requirements = selector_requirements((pdb.get("spec") or {}).get("selector"))
    except ValueError:
        return []
    namespace = meta(pdb).get("namespace")
    return [
        p
        for p in pods
        if meta(p).get("namespace") == namespace and labels_match(requirements, meta(p).get("labels") or {})
    ]


def _resolve(value: int | str | None, total: int, round_up: bool) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.endswith("%"):
        fraction = int(text[:-1]) * total / 100
        return math.ceil(fraction) if round_up else math.floor(fraction)
    return int(text)


def compute_status(
    pdb: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    scale_of: ScaleOf,
    *,
    never_allow: bool = False,
    now_ts: float | None = None,
) -> Obj:
    """The PDB's status as the disruption controller would write it."""
    spec = pdb.get("spec") or {}
    old = pdb.get("status") or {}
    pods = _selected_pods(pdb, pods)
    disrupted = dict(old.get("disruptedPods") or {})
    names = {name_of(p): p for p in pods}
    # An evicted pod stays "disrupted" until it is gone (or the entry expires).
    for pod_name, stamp in list(disrupted.items()):
        pod = names.get(pod_name)
        expired = now_ts is not None and now_ts - parse_rfc3339(stamp).timestamp() > DISRUPTED_POD_TIMEOUT
        if pod is None or is_terminating(pod) or expired:
            del disrupted[pod_name]
    healthy = sum(
        1 for p in pods if pod_is_ready(p) and not is_terminating(p) and name_of(p) not in disrupted
    )
    min_available = spec.get("minAvailable")
    max_unavailable = spec.get("maxUnavailable")
    needs_scale = max_unavailable is not None or (
        isinstance(min_available, str) and min_available.endswith("%")
    )
    error = False
    if needs_scale:
        expected = 0
        seen: set[str] = set()
        for pod in pods:
            ref = controller_of(pod)
            if ref is not None and ref["uid"] in seen:
                continue  # its controller's scale is counted (one lookup per controller)
            scale = scale_of(dict(pod))
            if ref is None or scale is None:
                error = True
                break
            seen.add(ref["uid"])
            expected += scale
        if max_unavailable is not None:
            desired = max(0, expected - (_resolve(max_unavailable, expected, round_up=True) or 0))
        else:
            desired = _resolve(min_available, expected, round_up=True) or 0
    else:
        expected = len(pods)
        desired = _resolve(min_available, expected, round_up=True) or 0
    allowed = max(0, healthy - desired)
    if error or never_allow:
        allowed = 0
    status: Obj = {
        "observedGeneration": meta(pdb).get("generation", 1),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
    }
    if disrupted:
        status["disruptedPods"] = disrupted
    reason = "SufficientPods" if allowed > 0 else "InsufficientPods"
    if error:
        reason = "SyncFailed"
    status["conditions"] = set_condition(
        list(old.get("conditions") or []), "DisruptionAllowed", "True" if allowed > 0 else "False", reason
    )
    return status


def same_status(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    a = a or {}
    keys = ("observedGeneration", "disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")
    if any(a.get(k) != b.get(k) for k in keys):
        return False
    if (a.get("disruptedPods") or {}) != (b.get("disruptedPods") or {}):
        return False
    old_cond = {c.get("type"): (c.get("status"), c.get("reason")) for c in a.get("conditions") or []}
    new_cond = {c.get("type"): (c.get("status"), c.get("reason")) for c in b.get("conditions") or []}
    return old_cond == new_cond
