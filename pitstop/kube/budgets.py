"""PodDisruptionBudgets: which cover a pod, and whether evicting a set of pods fits what each
allows now (`status.disruptionsAllowed`, kept live by the disruption controller)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pitstop.kube.objects import Obj, is_terminating, key_of, labels_of, namespace_of, pod_is_ready
from pitstop.kube.selectors import object_selector_matches

_REFUSAL_PDB = re.compile(r"disruption budget (\S+)")


def covers(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    if namespace_of(pdb) != namespace_of(pod):
        return False
    return object_selector_matches((pdb.get("spec") or {}).get("selector"), labels_of(pod))


def covering(pdbs: Iterable[Obj], pod: Mapping[str, Any]) -> list[Obj]:
    return [pdb for pdb in pdbs if covers(pdb, pod)]


def allowed_now(pdb: Mapping[str, Any]) -> int:
    return int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)


def pdb_from_refusal(namespace: str, causes: Iterable[Mapping[str, Any]], fallback: str) -> str:
    """`namespace/name` of the PDB a 429 names in its DisruptionBudget cause, else `fallback`."""
    for cause in causes:
        match = _REFUSAL_PDB.search(str(cause.get("message", "")))
        if match:
            return f"{namespace}/{match.group(1)}"
    return fallback


@dataclass(frozen=True)
class BudgetUse:
    """What evicting some pods asks of one PDB."""

    pdb: str
    allowed: int
    healthy: int  # status.currentHealthy
    desired: int  # status.desiredHealthy
    pods: tuple[str, ...]  # healthy pods of the PDB among those to evict
    expected: int = 0  # status.expectedPods

    @property
    def needed(self) -> int:
        return len(self.pods)

    @property
    def exceeds(self) -> bool:
        return self.needed > self.allowed

    @property
    def never_allows(self) -> bool:
        """Even with every pod healthy the budget allows no disruption (minAvailable equal to
        the replicas, maxUnavailable 0): evicting one at a time cannot get past it."""
        return self.needed > 0 and self.desired >= max(self.expected, self.healthy)

    def describe(self) -> str:
        plural = "disruption" if self.allowed == 1 else "disruptions"
        return (
            f"PDB {self.pdb} allows {self.allowed} {plural} now "
            f"({self.needed} of its healthy pods to evict; {self.healthy} healthy, {self.desired} required)"
        )


def budget_uses(pods: Iterable[Obj], pdbs: Iterable[Obj]) -> list[BudgetUse]:
    """One entry per PDB covering at least one of `pods`, counting the pods that are healthy
    now (evicting an unhealthy or terminating pod takes nothing from the budget)."""
    pdb_list = list(pdbs)
    hits: dict[str, list[str]] = {}
    for pod in pods:
        for pdb in covering(pdb_list, pod):
            names = hits.setdefault(key_of(pdb), [])
            if pod_is_ready(pod) and not is_terminating(pod):
                names.append(key_of(pod))
    out: list[BudgetUse] = []
    for pdb in pdb_list:
        if key_of(pdb) not in hits:
            continue
        status = pdb.get("status") or {}
        out.append(
            BudgetUse(
                pdb=key_of(pdb),
                allowed=allowed_now(pdb),
                healthy=int(status.get("currentHealthy") or 0),
                desired=int(status.get("desiredHealthy") or 0),
                pods=tuple(sorted(hits[key_of(pdb)])),
                expected=int(status.get("expectedPods") or 0),
            )
        )
    return sorted(out, key=lambda u: u.pdb)
