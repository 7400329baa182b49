"""Zero-downtime serving, judged from a Deployment's own spec and the PDBs beside it.

What a node drain or an engine upgrade needs from a serving Deployment so that no request is
dropped (Kubernetes "Deployments: rolling update", "Pod lifecycle: termination", "Configure
liveness, readiness and startup probes", "Specifying a Disruption Budget"):

- a rolling update that never takes a replica away before its replacement is Ready: the
  effective maxUnavailable is 0 (percentages round down, maxSurge rounds up, and when both come
  to 0 the apiserver makes maxUnavailable 1), never `Recreate`;
- at least two replicas, so a drain or an eviction always leaves one serving;
- a readinessProbe on every container, so a new replica takes traffic only once it can serve;
- a preStop hook on every container, so endpoints stop sending requests before the process
  gets SIGTERM (the endpoint update and the signal race otherwise);
- a termination grace period long enough to finish the requests in flight (30 s by default,
  shorter than a long generation);
- a PodDisruptionBudget selecting its pods, so drains (the Eviction API) wait for a replacement.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from pitstop.kube.objects import Obj, name_of, namespace_of
from pitstop.kube.selectors import object_selector_matches

GPU = "nvidia.com/gpu"
DEFAULT_GRACE_SECONDS = 30  # the Pod API's default terminationGracePeriodSeconds
DEFAULT_ROLLING = {"maxUnavailable": "25%", "maxSurge": "25%"}  # the Deployment API's defaults


class ServingFinding(BaseModel):
    """One serving Deployment that does not meet the practice, and how."""

    deployment: str
    problems: list[str]


def requests_gpus(template_spec: Mapping[str, Any]) -> bool:
    for container in template_spec.get("containers") or []:
        resources = container.get("resources") or {}
        for kind in ("limits", "requests"):
            amount = (resources.get(kind) or {}).get(GPU)
            if amount not in (None, 0, "0"):
                return True
    return False


def _scaled(value: Any, replicas: int, round_up: bool) -> int:
    if isinstance(value, str) and value.strip().endswith("%"):
        share = float(value.strip()[:-1]) * replicas / 100.0
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


def effective_max_unavailable(deployment: Obj) -> int | None:
    """Replicas a rolling update may take away at once (None: the strategy is Recreate)."""
    spec = deployment.get("spec") or {}
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return None
    replicas = int(spec.get("replicas", 1))
    rolling = {**DEFAULT_ROLLING, **(strategy.get("rollingUpdate") or {})}
    unavailable = _scaled(rolling["maxUnavailable"], replicas, round_up=False)
    surge = _scaled(rolling["maxSurge"], replicas, round_up=True)
    # apps/v1 validation: both may not be 0; the deployment controller then uses 1 unavailable.
    return 1 if unavailable == 0 and surge == 0 else unavailable


def problems_of(
    deployment: Obj, pdbs: Sequence[Obj], *, min_replicas: int = 2, min_grace_seconds: int = 60
) -> list[str]:
    """How a serving Deployment falls short of zero-downtime practice (empty: it does not)."""
    spec = deployment.get("spec") or {}
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    problems: list[str] = []
    unavailable = effective_max_unavailable(deployment)
    if unavailable is None:
        problems.append("strategy Recreate stops every replica before starting new ones")
    elif unavailable > 0:
        problems.append(
            f"a rolling update may take {unavailable} replica(s) away before replacements are Ready "
            "(set rollingUpdate.maxUnavailable: 0 and maxSurge: 1)"
        )
    replicas = int(spec.get("replicas", 1))
    if replicas < min_replicas:
        problems.append(
            f"{replicas} replica(s): a drain or an eviction leaves none serving (want ≥{min_replicas})"
        )
    containers = pod_spec.get("containers") or []
    without_readiness = [c.get("name", "?") for c in containers if not c.get("readinessProbe")]
    if without_readiness:
        problems.append(f"no readinessProbe on {', '.join(without_readiness)}: traffic before it can serve")
    without_prestop = [
        c.get("name", "?") for c in containers if not (c.get("lifecycle") or {}).get("preStop")
    ]
    if without_prestop:
        problems.append(
            f"no preStop hook on {', '.join(without_prestop)}: requests still routed when SIGTERM arrives"
        )
    grace = int(pod_spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))
    if grace < min_grace_seconds:
        problems.append(
            f"terminationGracePeriodSeconds {grace} is shorter than {min_grace_seconds}: "
            "requests in flight are cut"
        )
    labels = (template.get("metadata") or {}).get("labels") or {}
    namespace = namespace_of(deployment)
    selecting = [
        p
        for p in pdbs
        if namespace_of(p) == namespace
        and object_selector_matches((p.get("spec") or {}).get("selector"), labels)
    ]
    if not selecting:
        problems.append("no PodDisruptionBudget selects its pods: a drain may evict every replica at once")
    elif not any(_protects(p, replicas) for p in selecting):
        names = ", ".join(name_of(p) for p in selecting)
        problems.append(f"its PodDisruptionBudget ({names}) lets every replica go at once")
    return problems


def _protects(pdb: Obj, replicas: int) -> bool:
    """The budget keeps at least one replica through evictions (percentages round up, as the
    disruption controller scales them)."""
    spec = pdb.get("spec") or {}
    if "minAvailable" in spec:
        return _scaled(spec["minAvailable"], replicas, round_up=True) >= 1
    if "maxUnavailable" in spec:
        return _scaled(spec["maxUnavailable"], replicas, round_up=True) < replicas
    return False


def serving_findings(
    deployments: Sequence[Obj],
    pdbs: Sequence[Obj],
    *,
    gpu_only: bool = True,
    min_replicas: int = 2,
    min_grace_seconds: int = 60,
) -> tuple[int, list[ServingFinding]]:
    """(how many serving Deployments were judged, those that fall short)."""
    judged = 0
    findings: list[ServingFinding] = []
    for deployment in deployments:
        pod_spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
        if gpu_only and not requests_gpus(pod_spec):
            continue
        if int((deployment.get("spec") or {}).get("replicas", 1)) == 0:
            continue  # scaled to zero: nothing serving to interrupt
        judged += 1
        problems = problems_of(
            deployment, pdbs, min_replicas=min_replicas, min_grace_seconds=min_grace_seconds
        )
        if problems:
            findings.append(
                ServingFinding(
                    deployment=f"{namespace_of(deployment)}/{name_of(deployment)}", problems=problems
                )
            )
    return judged, findings
