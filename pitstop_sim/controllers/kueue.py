"""A small Kueue: ClusterQueue status follows `spec.stopPolicy`, and Jobs labelled
`kueue.x-k8s.io/queue-name` are admitted (unsuspended) only while their ClusterQueue runs.

- `None`: queued Jobs are admitted.
- `Hold`: no new admissions; running Jobs continue.
- `HoldAndDrain`: no new admissions, and admitted Jobs are suspended (their pods stop).
A Job's LocalQueue (same namespace, named by the label) points at its ClusterQueue.

Training operators' jobs (PyTorchJob, JobSet, RayCluster) are admitted through their Workload
(`kueue.x-k8s.io/job-uid` labels it with the job's uid), as Kueue's jobframework does: the job's
`suspend` follows the Workload. `spec.active: false` evicts it (conditions Evicted
`InactiveWorkload` "The workload is deactivated", QuotaReserved/Admitted False `NoReservation`,
Requeued False); `true` again requeues it (Requeued True `Reactivated` "The workload was
reactivated") and it is admitted while its ClusterQueue runs (kueue pkg/workload, constants).
"""

from __future__ import annotations

from typing import Any

from pitstop.kube.objects import controller_of, labels_of, name_of, namespace_of
from pitstop_sim.annotations import KUEUE_QUEUE_LABEL
from pitstop_sim.controllers.base import Controller
from pitstop_sim.controllers.frameworks import BY_KIND, is_suspended, with_suspend
from pitstop_sim.objects import set_condition
from pitstop_sim.store import WatchEvent, clone

Obj = dict[str, Any]
CQ = "kueue.x-k8s.io/clusterqueues"
LQ = "kueue.x-k8s.io/localqueues"
WL = "kueue.x-k8s.io/workloads"
NO_RESERVATION = "The workload has no reservation"
DEACTIVATED = "The workload is deactivated"


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
        if event.storage == WL:
            old = event.old or {}
            if event.type != "MODIFIED" or old.get("spec") != event.obj.get("spec"):
                self._dirty = True
        elif event.storage in BY_KIND.values() and event.type == "DELETED":
            self._dirty = True
        elif event.storage in (CQ, LQ):
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
        for wl in self.ctx.store.list(WL).items:
            outcome = self._operator_workload(wl, queues)
            if outcome is not None:
                cq_name, running = outcome
                counts[cq_name][0 if running else 1] += 1
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

    def _operator_workload(self, wl: Obj, queues: dict[str, Obj]) -> tuple[str, bool] | None:
        """Make a training operator's job follow its Workload; its ClusterQueue and whether it
        runs, or None when the Workload is not an operator job's or has no ClusterQueue."""
        ref = controller_of(wl)
        storage = BY_KIND.get(str((ref or {}).get("kind") or ""))
        if ref is None or storage is None:
            return None
        job = self.ctx.store.get(storage, namespace_of(wl), str(ref.get("name")))
        lq = self.ctx.store.get(LQ, namespace_of(wl), str((wl.get("spec") or {}).get("queueName") or ""))
        cq = queues.get(str(((lq or {}).get("spec") or {}).get("clusterQueue") or ""))
        if job is None or cq is None:
            return None
        policy = (cq.get("spec") or {}).get("stopPolicy", "None")
        active = (wl.get("spec") or {}).get("active", True) is not False
        conditions = list((wl.get("status") or {}).get("conditions") or [])
        status = dict(wl.get("status") or {})
        if not active:
            run = False
            conditions = set_condition(conditions, "Evicted", "True", "InactiveWorkload", DEACTIVATED)
            conditions = set_condition(conditions, "QuotaReserved", "False", "NoReservation", NO_RESERVATION)
            conditions = set_condition(conditions, "Admitted", "False", "NoReservation", NO_RESERVATION)
            conditions = set_condition(conditions, "Requeued", "False", "InactiveWorkload", DEACTIVATED)
            status.pop("admission", None)
        else:
            if any(c.get("type") == "Requeued" and c.get("reason") == "InactiveWorkload" for c in conditions):
                conditions = set_condition(
                    conditions, "Requeued", "True", "Reactivated", "The workload was reactivated"
                )
            run = policy != "HoldAndDrain" and (policy == "None" or not is_suspended(job))
            if run:
                conditions = set_condition(
                    conditions,
                    "QuotaReserved",
                    "True",
                    "QuotaReserved",
                    f"Quota reserved in ClusterQueue {name_of(cq)}",
                )
                conditions = set_condition(
                    conditions, "Admitted", "True", "Admitted", "The workload is admitted"
                )
                status["admission"] = {"clusterQueue": name_of(cq)}
        status["conditions"] = conditions
        if status != (wl.get("status") or {}):
            updated = clone(wl)
            updated["status"] = status
            self.ctx.store.update(WL, updated)
        if is_suspended(job) == run:
            self.ctx.store.update(storage, with_suspend(job, not run))
        return name_of(cq), run

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
