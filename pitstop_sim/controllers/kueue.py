"""A small Kueue: ClusterQueue status follows `spec.stopPolicy`, and Jobs labelled
`kueue.x-k8s.io/queue-name` are admitted (unsuspended) only while their ClusterQueue runs.

- `None`: queued Jobs are admitted.
- `Hold`: no new admissions; running Jobs continue.
- `HoldAndDrain`: no new admissions, and admitted Jobs are suspended (their pods stop).
A Job's LocalQueue (same namespace, named by the label) points at its ClusterQueue.
"""

from __future__ import annotations

from typing import Any

from pitstop.kube.objects import labels_of, name_of, namespace_of
from pitstop_sim.annotations import KUEUE_QUEUE_LABEL
from pitstop_sim.controllers.base import Controller
from pitstop_sim.objects import set_condition
from pitstop_sim.store import WatchEvent, clone

Obj = dict[str, Any]
CQ = "kueue.x-k8s.io/clusterqueues"
LQ = "kueue.x-k8s.io/localqueues"


def _finished(job: Obj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


class KueueController(Controller):
    name = "kueue"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._dirty = False

    def observe(self, event: WatchEvent) -> None:
        if event.storage in (CQ, LQ):
            old = event.old or {}
            if event.type != "MODIFIED" or old.get("spec") != event.obj.get("spec"):
                self._dirty = True
        elif event.storage == "jobs" and KUEUE_QUEUE_LABEL in labels_of(event.obj):
            old = event.old or {}
            if (
                event.type != "MODIFIED"
                or (old.get("spec") or {}).get("suspend") != (event.obj.get("spec") or {}).get("suspend")
                or _finished(old) != _finished(event.obj)
            ):
                self._dirty = True

    def pending(self) -> bool:
        return self._dirty

    def resync(self) -> None:
        self._dirty = True

    def sync(self) -> None:
        self._dirty = False
        queues = {name_of(cq): cq for cq in self.ctx.store.list(CQ).items}
        counts: dict[str, list[int]] = {name: [0, 0] for name in queues}  # admitted, pending
        local_counts: dict[tuple[str, str], list[int]] = {}
        for job in self.ctx.store.list("jobs").items:
            local = labels_of(job).get(KUEUE_QUEUE_LABEL)
            if not local or _finished(job):
                continue
            lq = self.ctx.store.get(LQ, namespace_of(job), local)
            cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
            cq = queues.get(cq_name or "")
            if cq is None:
                continue
            policy = (cq.get("spec") or {}).get("stopPolicy", "None")
            suspended = bool((job.get("spec") or {}).get("suspend"))
            if suspended and policy == "None":
                self._set_suspend(job, False)
                suspended = False
            elif not suspended and policy == "HoldAndDrain":
                self._set_suspend(job, True)
                suspended = True
            counts[name_of(cq)][1 if suspended else 0] += 1
            local_counts.setdefault((namespace_of(job), local), [0, 0])[1 if suspended else 0] += 1
        for name, cq in queues.items():
            self._write_status(cq, *counts[name])
        for lq in self.ctx.store.list(LQ).items:
            admitted, waiting = local_counts.get((namespace_of(lq), name_of(lq)), [0, 0])
            status = {
                "admittedWorkloads": admitted,
                "reservingWorkloads": admitted,
                "pendingWorkloads": waiting,
            }
            if {k: (lq.get("status") or {}).get(k) for k in status} != status:
                updated = clone(lq)
                updated["status"] = {**(lq.get("status") or {}), **status}
                self.ctx.store.update(LQ, updated)

    def _set_suspend(self, job: Obj, suspend: bool) -> None:
        updated = clone(job)
        updated["spec"]["suspend"] = suspend
        self.ctx.store.update("jobs", updated)

    def _write_status(self, cq: Obj, admitted: int, pending: int) -> None:
        policy = (cq.get("spec") or {}).get("stopPolicy", "None")
        old = cq.get("status") or {}
        active = policy == "None"
        conditions = set_condition(
            list(old.get("conditions") or []),
            "Active",
            "True" if active else "False",
            "Ready" if active else "Stopped",
            "Can admit new workloads" if active else "The ClusterQueue is stopped",
        )
        status = {
            "admittedWorkloads": admitted,
            "reservingWorkloads": admitted,
            "pendingWorkloads": pending,
            "conditions": conditions,
        }
        if (
            old.get("admittedWorkloads") == admitted
            and old.get("pendingWorkloads") == pending
            and [(c.get("type"), c.get("status")) for c in old.get("conditions") or []]
            == [(c["type"], c["status"]) for c in conditions]
        ):
            return
        updated = clone(cq)
        updated["status"] = status
        self.ctx.store.update(CQ, updated)
