"""The disruption controller: keeps every PodDisruptionBudget's status live as pods come,
go and change readiness (the eviction subresource reads it)."""

from __future__ import annotations

from typing import Any

from pitstop.kube.objects import meta, namespace_of
from pitstop_sim.controllers.base import Controller
from pitstop_sim.disruption import same_status
from pitstop_sim.store import WatchEvent, clone

Obj = dict[str, Any]


class DisruptionController(Controller):
    name = "disruption"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._namespaces: set[str] = set()
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
        elif event.storage in ("pods", "deployments", "replicasets", "statefulsets") and self._with_pdbs.get(
            ns
        ):
            self._namespaces.add(ns)

    def mark(self, namespace: str) -> None:
        """Recompute the namespace's PDBs on the next pass."""
        self._namespaces.add(namespace)

    def pending(self) -> bool:
        return bool(self._namespaces)

    def resync(self) -> None:
        for pdb in self.ctx.store.list("poddisruptionbudgets").items:
            ns = namespace_of(pdb)
            self._with_pdbs[ns] = self._with_pdbs.get(ns, 0) + 1
            self._namespaces.add(ns)

    def sync(self) -> None:
        namespaces, self._namespaces = self._namespaces, set()
        for ns in sorted(namespaces):
            for pdb in self.ctx.store.list("poddisruptionbudgets", ns).items:
                status = self.api.live_pdb_status(pdb)
                if same_status(pdb.get("status"), status):
                    continue
                updated = clone(pdb)
                updated["status"] = status
                self.ctx.store.update("poddisruptionbudgets", updated)
