"""The training operators' controllers, as far as pitstop meets them: status, suspend, resume.

- Kubeflow Training Operator v1 (PyTorchJob): conditions `Created` and `Running` (reasons
  `PyTorchJobCreated`/`PyTorchJobRunning`), `replicaStatuses` per replica type. On
  `spec.runPolicy.suspend: true` it deletes every pod of the job, sets `Suspended` True
  (`PyTorchJobSuspended`, "PyTorchJob <name> is suspended."), `Running` False, and clears
  `startTime`; on false it sets `Suspended` False (`PyTorchJobResumed`) and creates the pods
  again (`<job>-master-0`, `<job>-worker-<i>`), which the scheduler places.
- JobSet v1alpha2: `spec.suspend` is passed to its child Jobs (whose controller stops and
  starts the pods); condition `Suspended` True `SuspendedJobs` "jobset is suspended" / False
  `ResumeJobs` "jobset is resumed"; `replicatedJobsStatus` counts the child Jobs.
- KubeRay v1 RayCluster: on `spec.suspend` it deletes every pod; `RayClusterSuspending` then,
  once they are gone, `RayClusterSuspended` True; on resume it creates the head and the
  workers again. `readyWorkerReplicas`/`availableWorkerReplicas`/`desiredWorkerReplicas`.
Sources: kubeflow/training-operator pkg/controller.v1 (common job controller, suspend),
kubernetes-sigs/jobset pkg/constants and controllers, ray-project/kuberay raycluster_types.go.
"""

from __future__ import annotations

import contextlib
from typing import Any

from pitstop.kube.objects import (
    controller_of,
    is_terminating,
    meta,
    name_of,
    namespace_of,
    pod_is_active,
    pod_is_ready,
)
from pitstop_sim.admission import prepare_create
from pitstop_sim.clock import rfc3339
from pitstop_sim.controllers.base import Controller, key_of
from pitstop_sim.objects import random_suffix, set_condition
from pitstop_sim.store import ObjectExists, WatchEvent, clone
from pitstop_sim.training_frameworks import (
    FRAMEWORK_STORAGE,
    direct_pod_marks,
    framework_pod_count,
    framework_template,
)

Obj = dict[str, Any]
STORAGES = {f"{group}/{plural}": kind for group, plural, _, kind in FRAMEWORK_STORAGE.values()}
BY_KIND = {kind: storage for storage, kind in STORAGES.items()}
DIRECT = {"PyTorchJob": "pytorchjob", "RayCluster": "raycluster"}  # operators owning pods themselves


def is_suspended(obj: Obj) -> bool:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PyTorchJob":
        return bool((spec.get("runPolicy") or {}).get("suspend"))
    return bool(spec.get("suspend"))


def with_suspend(obj: Obj, value: bool) -> Obj:
    """A copy of the operator's object with its suspend field set (Kueue writes it so)."""
    updated: Obj = clone(obj)
    spec = updated.setdefault("spec", {})
    if obj.get("kind") == "PyTorchJob":
        spec.setdefault("runPolicy", {})["suspend"] = value
    else:
        spec["suspend"] = value
    return updated


class FrameworkController(Controller):
    name = "frameworks"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.dirty: set[tuple[str, str, str]] = set()  # (storage, namespace, name)
        self._creating: set[str] = set()  # uids whose pods are being created after the delay

    def observe(self, event: WatchEvent) -> None:
        if event.storage in STORAGES and event.type != "DELETED":
            self.dirty.add((event.storage, *key_of(event.obj)))
        elif event.storage in ("pods", "jobs"):
            ref = controller_of(event.obj)
            storage = BY_KIND.get(str((ref or {}).get("kind") or ""))
            if ref is not None and storage is not None:
                self.dirty.add((storage, namespace_of(event.obj), str(ref.get("name"))))

    def pending(self) -> bool:
        return bool(self.dirty)

    def resync(self) -> None:
        for storage in STORAGES:
            with contextlib.suppress(KeyError):
                self.dirty.update((storage, *key_of(o)) for o in self.ctx.store.list(storage).items)

    def sync(self) -> None:
        dirty, self.dirty = self.dirty, set()
        for storage, ns, name in sorted(dirty):
            try:
                obj = self.ctx.store.get(storage, ns, name)
            except KeyError:
                continue  # the CRD is not installed
            if obj is None or is_terminating(obj):
                continue
            if obj.get("kind") == "JobSet":
                self._jobset(storage, obj)
            else:
                self._direct(storage, obj)

    # --- PyTorchJob, RayCluster: the operator owns the pods ----------------------------------

    def _pods(self, obj: Obj) -> list[Obj]:
        return [o for s, o in self.ctx.store.dependents(meta(obj).get("uid", "")) if s == "pods"]

    def _direct(self, storage: str, obj: Obj) -> None:
        pods = self._pods(obj)
        active = [p for p in pods if pod_is_active(p)]
        status = clone(obj.get("status") or {})
        conditions = list(status.get("conditions") or [])
        kind, name = str(obj.get("kind")), name_of(obj)
        if is_suspended(obj):
            for pod in active:
                self.manager.kubelet.terminate(pod)
            if kind == "PyTorchJob":
                message = f"PyTorchJob {name} is suspended."
                conditions = set_condition(conditions, "Suspended", "True", "PyTorchJobSuspended", message)
                conditions = set_condition(conditions, "Running", "False", "PyTorchJobSuspended", message)
                status.pop("startTime", None)
            else:
                gone = not pods
                conditions = set_condition(
                    conditions, "RayClusterSuspending", "False" if gone else "True", "RayClusterSuspending"
                )
                if gone:
                    conditions = set_condition(
                        conditions, "RayClusterSuspended", "True", "RayClusterSuspended"
                    )
        else:
            was_suspended = any(
                c.get("type") in ("Suspended", "RayClusterSuspended") and c.get("status") == "True"
                for c in conditions
            )
            if kind == "PyTorchJob":
                if was_suspended:
                    message = f"PyTorchJob {name} is resumed."
                    conditions = set_condition(conditions, "Suspended", "False", "PyTorchJobResumed", message)
                conditions = set_condition(
                    conditions, "Created", "True", "PyTorchJobCreated", f"PyTorchJob {name} is created."
                )
                if active and all(pod_is_ready(p) for p in active):
                    conditions = set_condition(
                        conditions, "Running", "True", "PyTorchJobRunning", f"PyTorchJob {name} is running."
                    )
                status.setdefault("startTime", rfc3339())
            elif was_suspended:
                conditions = set_condition(conditions, "RayClusterSuspended", "False", "RayClusterResumed")
            self._start_missing(obj, pods)
        status["conditions"] = conditions
        self._counts(obj, status, active)
        if status != (obj.get("status") or {}):
            updated = clone(obj)
            updated["status"] = status
            self.ctx.store.update(storage, updated)

    def _counts(self, obj: Obj, status: Obj, active: list[Obj]) -> None:
        if obj.get("kind") == "PyTorchJob":
            roles: dict[str, list[Obj]] = {}
            for pod in active:
                role = (meta(pod).get("labels") or {}).get("training.kubeflow.org/replica-type", "worker")
                roles.setdefault(role.capitalize(), []).append(pod)
            specs = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
            status["replicaStatuses"] = {role: {"active": len(roles.get(role, []))} for role in specs}
            return
        workers = [p for p in active if (meta(p).get("labels") or {}).get("ray.io/node-type") == "worker"]
        ready = sum(1 for p in workers if pod_is_ready(p))
        status["desiredWorkerReplicas"] = max(framework_pod_count(obj) - 1, 0)
        status["readyWorkerReplicas"] = ready
        status["availableWorkerReplicas"] = ready
        head_ready = any(
            pod_is_ready(p) for p in active if (meta(p).get("labels") or {}).get("ray.io/node-type") == "head"
        )
        status["state"] = "ready" if head_ready and ready == status["desiredWorkerReplicas"] else ""
        if not status["state"]:
            status.pop("state")

    def _start_missing(self, obj: Obj, pods: list[Obj]) -> None:
        """Create the pods the spec asks for and that do not exist, after the recreate delay."""
        uid = meta(obj).get("uid", "")
        want = framework_pod_count(obj)
        if uid in self._creating or len([p for p in pods if not is_terminating(p)]) >= want:
            return
        self._creating.add(uid)
        storage = BY_KIND[str(obj.get("kind"))]
        ns, name = namespace_of(obj), name_of(obj)

        def create() -> None:
            self._creating.discard(uid)
            current = self.ctx.store.get(storage, ns, name)
            if current is None or meta(current).get("uid") != uid or is_suspended(current):
                return
            live = [p for p in self._pods(current) if not is_terminating(p)]
            taken = {name_of(p) for p in self._pods(current)}
            kind = str(current.get("kind"))
            if kind == "PyTorchJob":
                indexes = list(range(framework_pod_count(current)))
            else:
                roles = [(meta(p).get("labels") or {}).get("ray.io/node-type") for p in live]
                workers = max(framework_pod_count(current) - 1, 0)
                indexes = [0] if "head" not in roles else []
                indexes += list(range(1, 1 + max(0, workers - roles.count("worker"))))
            for index in indexes:
                marks = direct_pod_marks(DIRECT[kind], name, index, random_suffix(self.ctx.rng))
                if marks.name not in taken:  # a namesake still terminating: again once it is gone
                    self._create_pod(current, index, marks.name, marks.labels, marks.owner)
            self.dirty.add((storage, ns, name))

        self.later(self.ctx.scenario.timing.recreate_delay_seconds, create)

    def _create_pod(
        self, obj: Obj, index: int, pod_name: str, labels: dict[str, str], owner: Obj | None
    ) -> None:
        template = framework_template(obj, index)
        spec = clone(template.get("spec") or {})
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.pop("nodeName", None)
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": namespace_of(obj),
                "labels": {**((template.get("metadata") or {}).get("labels") or {}), **labels},
                "ownerReferences": [owner] if owner else [],
            },
            "spec": spec,
        }
        prepared = prepare_create(self.ctx.rt("", "pods"), pod, namespace_of(obj), self.ctx.rng, fresh=True)
        with contextlib.suppress(ObjectExists):
            self.ctx.store.create("pods", prepared)

    # --- JobSet: the operator owns Jobs -------------------------------------------------------

    def _jobset(self, storage: str, obj: Obj) -> None:
        suspend = is_suspended(obj)
        jobs = [o for s, o in self.ctx.store.dependents(meta(obj).get("uid", "")) if s == "jobs"]
        for job in jobs:
            if bool((job.get("spec") or {}).get("suspend")) != suspend:
                updated = clone(job)
                updated["spec"]["suspend"] = suspend
                self.ctx.store.update("jobs", updated)
        status = clone(obj.get("status") or {})
        conditions = list(status.get("conditions") or [])
        if suspend:
            conditions = set_condition(
                conditions, "Suspended", "True", "SuspendedJobs", "jobset is suspended"
            )
        elif any(c.get("type") == "Suspended" for c in conditions):
            conditions = set_condition(conditions, "Suspended", "False", "ResumeJobs", "jobset is resumed")
        if conditions:
            status["conditions"] = conditions
        counts: dict[str, int] = {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
        for job in jobs:
            job_status = job.get("status") or {}
            if (job.get("spec") or {}).get("suspend"):
                counts["suspended"] += 1
            elif job_status.get("active"):
                counts["active"] += 1
            if job_status.get("ready") and job_status.get("ready") == (job.get("spec") or {}).get(
                "parallelism"
            ):
                counts["ready"] += 1
        status["replicatedJobsStatus"] = [{"name": "workers", **counts}]
        status.setdefault("restarts", 0)
        if status != (obj.get("status") or {}):
            updated = clone(obj)
            updated["status"] = status
            self.ctx.store.update(storage, updated)
