"""The disruption controller: keeps every PodDisruptionBudget's status live as pods come,
go and change readiness (the eviction subresource reads it).

As in kube-controller-manager, a pod event re-checks only the budgets that select the pod
(before or after the change), not every budget of its namespace: during a fleet-wide drain
each eviction then costs one budget's pods, not a namespace's. A change of a controller's
scale, or of a budget itself, re-checks the namespace."""

from __future__ import annotations

from typing import Any

from pitstop.kube.objects import meta, name_of, namespace_of
from pitstop_sim.controllers.base import Controller
from pitstop_sim.disruption import pdb_selects, same_status
from pitstop_sim.store import WatchEvent, clone

Obj = dict[str, Any]
SCALED = ("deployments", "replicasets", "statefulsets")


class DisruptionController(Controller):
    name = "disruption"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._namespaces: set[str] = set()
        self._budgets: set[tuple[str, str]] = set()
        self._with_pdbs: dict[str, int] = {}

    def observe(self, event: WatchEvent) -> None:
        ns = namespace_of(event.obj)
        if event.storage == "poddisruptionbudgets":
            if event.type == "ADDED":
                self._with_pdbs[ns] = self._with_pdbs.get(ns, 0) + 1
            elif event.type == "DELETED":
                self._with_pdbs[ns] = max(0, self._with_pdbs.get(ns, 0) - 1)
            old = event.old or {}
            # Our own status writes change nothing else; reacting to them would loop.
            if (
                event.type != "MODIFIED"
                or old.get("spec") != event.obj.get("spec")
                or meta(old).get("generation") != meta(event.obj).get("generation")
            ):
                self._namespaces.add(ns)
        elif not self._with_pdbs.get(ns):
            return
        elif event.storage == "pods":
            self._mark_covering(ns, event.obj, event.old)
        elif event.storage in SCALED and _scale_changed(event):
            self._namespaces.add(ns)

    def _mark_covering(self, ns: str, pod: Obj, old: Obj | None) -> None:
        for pdb in self.ctx.store.list("poddisruptionbudgets", ns).items:
            if pdb_selects(pdb, pod) or (old is not None and pdb_selects(pdb, old)):
                self._budgets.add((ns, name_of(pdb)))

    def mark(self, namespace: str) -> None:
        """Recompute the namespace's PDBs on the next pass."""
        self._namespaces.add(namespace)

    def pending(self) -> bool:
        return bool(self._namespaces or self._budgets)

    def resync(self) -> None:
        for pdb in self.ctx.store.list("poddisruptionbudgets").items:
            ns = namespace_of(pdb)
            self._with_pdbs[ns] = self._with_pdbs.get(ns, 0) + 1
            self._namespaces.add(ns)

    def sync(self) -> None:
        namespaces, self._namespaces = self._namespaces, set()
        budgets, self._budgets = self._budgets, set()
        for ns in sorted(namespaces):
            for pdb in self.ctx.store.list("poddisruptionbudgets", ns).items:
                self._refresh(pdb)
        for ns, name in sorted(budgets):
            budget = self.ctx.store.get("poddisruptionbudgets", ns, name)
            if ns not in namespaces and budget is not None:
                self._refresh(budget)

    def _refresh(self, pdb: Obj) -> None:
        status = self.api.live_pdb_status(pdb)
        if same_status(pdb.get("status"), status):
            return
        updated = clone(pdb)
        updated["status"] = status
        self.ctx.store.update("poddisruptionbudgets", updated)


def _scale_changed(event: WatchEvent) -> bool:
    """Whether the controller's desired scale (what `maxUnavailable` budgets count) may differ:
    its replicas, or who controls it (a ReplicaSet of a Deployment counts the Deployment's)."""
    if event.type != "MODIFIED" or event.old is None:
        return True
    new, old = event.obj, event.old
    return (new.get("spec") or {}).get("replicas") != (old.get("spec") or {}).get("replicas") or meta(
        new
    ).get("ownerReferences") != meta(old).get("ownerReferences")
