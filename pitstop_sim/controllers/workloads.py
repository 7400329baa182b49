"""Workload controllers: Deployments own ReplicaSets, ReplicaSets keep their pod count (a
deleted or evicted pod is replaced after `timing.recreate_delay_seconds`), DaemonSets keep
one pod per eligible node, Jobs run pods to completion (honouring `suspend`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pitstop.kube.objects import (
    controller_of,
    is_terminating,
    labels_of,
    meta,
    name_of,
    namespace_of,
    pod_is_active,
    pod_is_ready,
    pod_node,
    pod_phase,
)
from pitstop_sim.admission import prepare_create
from pitstop_sim.clock import rfc3339
from pitstop_sim.controllers.base import Controller, key_of
from pitstop_sim.events import EventRecorder
from pitstop_sim.objects import (
    GENERATE_NAME_ATTEMPTS,
    node_affinity_matches,
    owner_ref,
    random_suffix,
    redraw_suffix,
    set_condition,
    untolerated,
)
from pitstop_sim.store import ObjectExists, WatchEvent, clone

Obj = dict[str, Any]
Key = tuple[str, str]

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
REVISION_LABEL = "controller-revision-hash"  # which template a DaemonSet pod was made from

# Tolerations the DaemonSet controller adds to its pods.
DAEMONSET_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)


def template_hash(template: Obj) -> str:
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()
    return "".join(_NAME_CHARS[b % len(_NAME_CHARS)] for b in digest[:10])


def pod_from_template(
    owner: Obj, template: Obj, name: str, extra_labels: dict[str, str] | None = None
) -> Obj:
    template_meta = template.get("metadata") or {}
    labels = {**(template_meta.get("labels") or {}), **(extra_labels or {})}
    pod_meta: Obj = {
        "name": name,
        "namespace": namespace_of(owner),
        "labels": labels,
        "ownerReferences": [owner_ref(owner)],
    }
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_meta,
        "spec": clone(template.get("spec") or {}),
    }


class _Owned(Controller):
    """Controllers whose objects own pods: a pod event marks its owner dirty."""

    storage = ""
    owner_kind = ""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.dirty: set[Key] = set()
        self.events = EventRecorder(self.ctx.store)
        self._creating: dict[str, int] = {}  # owner uid -> pods being created after the delay

    def observe(self, event: WatchEvent) -> None:
        if event.storage == self.storage and event.type != "DELETED":
            self.dirty.add(key_of(event.obj))
        elif event.storage == "pods":
            ref = controller_of(event.obj)
            if ref is not None and ref.get("kind") == self.owner_kind:
                self.dirty.add((namespace_of(event.obj), ref["name"]))

    def pending(self) -> bool:
        return bool(self.dirty)

    def resync(self) -> None:
        self.dirty.update(key_of(o) for o in self.ctx.store.list(self.storage).items)

    def sync(self) -> None:
        dirty, self.dirty = self.dirty, set()
        for ns, name in sorted(dirty):
            obj = self.ctx.store.get(self.storage, ns, name)
            if obj is not None and not is_terminating(obj):
                self.reconcile(obj)

    def reconcile(self, obj: Obj) -> None:
        raise NotImplementedError

    def owned_pods(self, owner: Obj) -> list[Obj]:
        return [o for s, o in self.ctx.store.dependents(meta(owner).get("uid", "")) if s == "pods"]

    def create_pods_later(self, owner: Obj, count: int, build: Any) -> None:
        """Create `count` pods after the recreate delay (a replacement is not instant)."""
        uid = meta(owner).get("uid", "")
        self._creating[uid] = self._creating.get(uid, 0) + count
        key = key_of(owner)

        def create() -> None:
            self._creating[uid] = max(0, self._creating.get(uid, 0) - count)
            current = self.ctx.store.get(self.storage, key[0], key[1])
            if current is None or meta(current).get("uid") != uid or is_terminating(current):
                return
            self.dirty.add(key)  # re-check the count with the pods that exist now
            for _ in range(count):
                pod = build(current)
                if pod is None:
                    continue
                self.create_pod(current, pod)

        self.later(self.ctx.scenario.timing.recreate_delay_seconds, create)

    def in_flight(self, owner: Obj) -> int:
        return self._creating.get(meta(owner).get("uid", ""), 0)

    def create_pod(self, owner: Obj, pod: Obj) -> Obj | None:
        pods = self.ctx.rt("", "pods")
        prepared = prepare_create(pods, pod, namespace_of(owner), self.ctx.rng, fresh=True)
        # The name ends in generateName's random suffix: on a clash another is drawn, as the
        # apiserver retries generateName (likely once an owner has thousands of pods).
        stored: Obj | None = None
        for _ in range(GENERATE_NAME_ATTEMPTS):
            try:
                stored = self.ctx.store.create("pods", prepared)
                break
            except ObjectExists:
                prepared["metadata"]["name"] = redraw_suffix(name_of(prepared), self.ctx.rng)
        if stored is None:
            return None
        self.events.record(
            owner,
            "Normal",
            "SuccessfulCreate",
            f"Created pod: {name_of(stored)}",
            f"{self.owner_kind.lower()}-controller",
        )
        return stored

    def write_status(self, obj: Obj, status: Obj) -> None:
        if (obj.get("status") or {}) == status:
            return
        updated = clone(obj)
        updated["status"] = status
        self.ctx.store.update(self.storage, updated)


class ReplicaSetController(_Owned):
    name = "replicaset"
    storage = "replicasets"
    owner_kind = "ReplicaSet"

    def reconcile(self, rs: Obj) -> None:
        spec = rs.get("spec") or {}
        want = int(spec.get("replicas", 1))
        pods = self.owned_pods(rs)
        active = [p for p in pods if pod_is_active(p)]
        missing = want - len(active) - self.in_flight(rs)
        if missing > 0:
            template = spec.get("template") or {}
            self.create_pods_later(
                rs,
                missing,
                lambda owner: pod_from_template(
                    owner, template, f"{name_of(owner)}-{random_suffix(self.ctx.rng)}"
                ),
            )
        elif len(active) > want:
            # Scale down: unscheduled and not-ready pods go first, then the newest.
            ranked = sorted(
                active,
                key=lambda p: (bool(pod_node(p)), pod_is_ready(p), meta(p).get("creationTimestamp", "")),
            )
            for pod in ranked[: len(active) - want]:
                self.manager.kubelet.terminate(pod)
        ready = sum(1 for p in active if pod_is_ready(p))
        self.write_status(
            rs,
            {
                "replicas": len(active),
                "fullyLabeledReplicas": len(active),
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": meta(rs).get("generation", 1),
            },
        )


class DeploymentController(_Owned):
    name = "deployment"
    storage = "deployments"
    owner_kind = "Deployment"

    def observe(self, event: WatchEvent) -> None:
        if event.storage == "deployments" and event.type != "DELETED":
            self.dirty.add(key_of(event.obj))
        elif event.storage == "replicasets":
            ref = controller_of(event.obj)
            if ref is not None and ref.get("kind") == "Deployment":
                self.dirty.add((namespace_of(event.obj), ref["name"]))

    def reconcile(self, deploy: Obj) -> None:
        spec = deploy.get("spec") or {}
        want = int(spec.get("replicas", 1))
        template = clone(spec.get("template") or {})
        pod_hash = template_hash(template)
        owned = [o for s, o in self.ctx.store.dependents(meta(deploy).get("uid", "")) if s == "replicasets"]
        current = next((rs for rs in owned if labels_of(rs).get("pod-template-hash") == pod_hash), None)
        if current is None:
            current = self._new_replicaset(deploy, template, pod_hash, want)
        elif int((current.get("spec") or {}).get("replicas", 0)) != want:
            scaled = clone(current)
            scaled["spec"]["replicas"] = want
            current = self.ctx.store.update("replicasets", scaled)
        # By uid: `current` may be the copy just written by the scale above.
        current_uid = meta(current).get("uid") if current else None
        others = [rs for rs in owned if meta(rs).get("uid") != current_uid]
        for rs in others:
            if int((rs.get("spec") or {}).get("replicas", 0)) != 0:
                # New template: the old ReplicaSet scales to zero (a Recreate-style rollout).
                old = clone(rs)
                old["spec"]["replicas"] = 0
                self.ctx.store.update("replicasets", old)
        sets = [current, *others]
        replicas = sum(int((rs.get("status") or {}).get("replicas", 0)) for rs in sets if rs)
        ready = sum(int((rs.get("status") or {}).get("readyReplicas", 0)) for rs in sets if rs)
        updated = int(((current or {}).get("status") or {}).get("replicas", 0))
        conditions = list((deploy.get("status") or {}).get("conditions") or [])
        conditions = set_condition(
            conditions,
            "Available",
            "True" if ready >= want - max(0, want // 4) else "False",
            "MinimumReplicasAvailable" if ready >= want - max(0, want // 4) else "MinimumReplicasUnavailable",
            "Deployment has minimum availability."
            if ready >= want - max(0, want // 4)
            else "Deployment does not have minimum availability.",
        )
        conditions = set_condition(
            conditions,
            "Progressing",
            "True",
            "NewReplicaSetAvailable" if ready >= want else "ReplicaSetUpdated",
            f'ReplicaSet "{name_of(current) if current else ""}" has successfully progressed.'
            if ready >= want
            else f'ReplicaSet "{name_of(current) if current else ""}" is progressing.',
        )
        status: Obj = {
            "observedGeneration": meta(deploy).get("generation", 1),
            "replicas": replicas,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": conditions,
        }
        if want - ready > 0:
            status["unavailableReplicas"] = want - ready
        old_status = deploy.get("status") or {}
        if {k: v for k, v in old_status.items() if k != "conditions"} != {
            k: v for k, v in status.items() if k != "conditions"
        } or [(c["type"], c["status"]) for c in old_status.get("conditions") or []] != [
            (c["type"], c["status"]) for c in conditions
        ]:
            self.write_status(deploy, status)

    def _new_replicaset(self, deploy: Obj, template: Obj, pod_hash: str, replicas: int) -> Obj | None:
        template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = pod_hash
        owned = [o for s, o in self.ctx.store.dependents(meta(deploy).get("uid", "")) if s == "replicasets"]
        notes = [meta(rs).get("annotations") or {} for rs in owned]
        revisions = [int(v) for n in notes if (v := n.get("deployment.kubernetes.io/revision", "")).isdigit()]
        revision = max(revisions, default=0) + 1
        selector = clone((deploy.get("spec") or {}).get("selector") or {})
        selector.setdefault("matchLabels", {})["pod-template-hash"] = pod_hash
        rs = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{name_of(deploy)}-{pod_hash}",
                "namespace": namespace_of(deploy),
                "labels": {**(template["metadata"].get("labels") or {})},
                "annotations": {
                    "deployment.kubernetes.io/desired-replicas": str(replicas),
                    "deployment.kubernetes.io/revision": str(revision),
                },
                "ownerReferences": [owner_ref(deploy)],
            },
            "spec": {"replicas": replicas, "selector": selector, "template": template},
        }
        prepared = prepare_create(self.ctx.rt("apps", "replicasets"), rs, namespace_of(deploy), self.ctx.rng)
        try:
            stored = self.ctx.store.create("replicasets", prepared)
        except ObjectExists:
            return None
        self.events.record(
            deploy,
            "Normal",
            "ScalingReplicaSet",
            f"Scaled up replica set {name_of(stored)} to {replicas}",
            "deployment-controller",
        )
        return stored


class DaemonSetController(_Owned):
    name = "daemonset"
    storage = "daemonsets"
    owner_kind = "DaemonSet"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._dirty_nodes: set[str] = set()  # nodes whose labels or taints changed
        self._in_flight_nodes: dict[str, set[str]] = {}  # DaemonSet uid -> nodes getting a pod

    def observe(self, event: WatchEvent) -> None:
        if event.storage == "nodes":
            old = event.old or {}
            if event.type != "MODIFIED":
                # A node came or went: every DaemonSet's desired count changes.
                self.dirty.update(key_of(ds) for ds in self._daemonsets())
            elif labels_of(old) != labels_of(event.obj) or (old.get("spec") or {}).get("taints") != (
                event.obj.get("spec") or {}
            ).get("taints"):
                self._dirty_nodes.add(name_of(event.obj))
            return
        super().observe(event)

    def _daemonsets(self) -> list[Obj]:
        return self.ctx.store.list("daemonsets").items

    def pending(self) -> bool:
        return bool(self.dirty) or bool(self._dirty_nodes)

    def sync(self) -> None:
        nodes, self._dirty_nodes = self._dirty_nodes, set()
        if nodes:
            for ds in self._daemonsets():
                if not is_terminating(ds):
                    self._converge_nodes(ds, nodes)
        super().sync()

    def _converge_nodes(self, ds: Obj, names: set[str]) -> None:
        """Only the changed nodes: add or remove this DaemonSet's pod where eligibility changed."""
        uid = meta(ds).get("uid", "")
        missing: list[str] = []
        changed = False
        for name in sorted(names):
            node = self.ctx.store.get("nodes", None, name)
            if node is None:
                continue
            mine = [
                p
                for p in self.ctx.pods_on_node(name)
                if pod_is_active(p) and (controller_of(p) or {}).get("uid") == uid
            ]
            if mine and not self.should_run(ds, node, existing=True):
                for pod in mine:
                    self.manager.kubelet.terminate(pod)
                    changed = True
            elif not mine and self.should_run(ds, node):
                missing.append(name)
        if missing:
            self._create_on(ds, missing)
        if missing or changed:
            self.dirty.add(key_of(ds))

    def should_run(self, ds: Obj, node: Obj, *, existing: bool = False) -> bool:
        """Whether the DaemonSet wants a pod on `node`. An existing pod only has to tolerate the
        node's NoExecute taints (a NoSchedule taint, e.g. unreachable during a reboot, keeps new
        pods away but does not remove running ones)."""
        template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        probe = {"spec": template_spec}
        if not node_affinity_matches(probe, labels_of(node)):
            return False
        tolerations = list(template_spec.get("tolerations") or []) + list(DAEMONSET_TOLERATIONS)
        taints = (node.get("spec") or {}).get("taints") or []
        effects = ("NoExecute",) if existing else ("NoSchedule", "NoExecute")
        return not untolerated(tolerations, taints, effects)

    def reconcile(self, ds: Obj) -> None:
        nodes = self.ctx.store.list("nodes").items
        pods = self.owned_pods(ds)
        by_node: dict[str, list[Obj]] = {}
        for pod in pods:
            if pod_is_active(pod):
                by_node.setdefault(pod_node(pod), []).append(pod)
        desired = 0
        missing: list[str] = []
        for node in nodes:
            node_name = name_of(node)
            mine = by_node.get(node_name, [])
            if mine and not self.should_run(ds, node, existing=True):
                for pod in mine:
                    self.manager.kubelet.terminate(pod)
            elif mine:
                desired += 1
            elif self.should_run(ds, node):
                desired += 1
                missing.append(node_name)
        if missing:
            self._create_on(ds, missing)
        scheduled = [p for group in by_node.values() for p in group]
        ready = sum(1 for p in scheduled if pod_is_ready(p))
        revision = template_hash((ds.get("spec") or {}).get("template") or {})
        outdated = [p for p in scheduled if labels_of(p).get(REVISION_LABEL) != revision]
        self._roll(ds, outdated, desired - ready, desired)
        status = {
            "currentNumberScheduled": len(by_node) - (1 if "" in by_node else 0),
            "desiredNumberScheduled": desired,
            "numberMisscheduled": 0,
            "numberReady": ready,
            "numberAvailable": ready,
            "updatedNumberScheduled": len(scheduled) - len(outdated),
            "observedGeneration": meta(ds).get("generation", 1),
        }
        if desired - ready > 0:
            status["numberUnavailable"] = desired - ready
        self.write_status(ds, status)

    def _roll(self, ds: Obj, outdated: list[Obj], unavailable: int, desired: int) -> None:
        """RollingUpdate: replace pods of an older template, at most `maxUnavailable` (default 1)
        ready pods at a time; outdated pods that are not ready go first, for free. OnDelete
        leaves them until someone deletes them."""
        strategy = (ds.get("spec") or {}).get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate" or not outdated:
            return
        budget = _max_unavailable(strategy, desired) - max(0, unavailable)
        for pod in sorted(outdated, key=pod_is_ready):
            if pod_is_ready(pod):
                if budget <= 0:
                    break
                budget -= 1
            self.manager.kubelet.terminate(pod)

    def _create_on(self, ds: Obj, nodes: list[str]) -> None:
        """Create the DaemonSet's pod on `nodes` after the recreate delay (once per node)."""
        uid = meta(ds).get("uid", "")
        in_flight = self._in_flight_nodes.setdefault(uid, set())
        todo = [n for n in nodes if n not in in_flight]
        if not todo:
            return
        in_flight.update(todo)
        template = (ds.get("spec") or {}).get("template") or {}
        key = key_of(ds)

        def create() -> None:
            in_flight.difference_update(todo)
            current = self.ctx.store.get("daemonsets", *key)
            if current is None or meta(current).get("uid") != uid:
                return
            self.dirty.add(key)
            existing = {pod_node(p) for p in self.owned_pods(current) if pod_is_active(p)}
            revision = template_hash(template)
            for node_name in todo:
                if node_name not in existing:
                    self.create_pod(current, daemon_pod(current, template, node_name, self.ctx.rng, revision))

        self.later(self.ctx.scenario.timing.recreate_delay_seconds, create)


def _max_unavailable(strategy: Obj, desired: int) -> int:
    value = (strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1)
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return max(1, desired * int(value[:-1]) // 100)
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def daemon_pod(ds: Obj, template: Obj, node: str, rng: Any, revision: str | None = None) -> Obj:
    """The DaemonSet's pod for `node`; `revision` is `template_hash(template)` if known already."""
    pod = pod_from_template(
        ds,
        template,
        f"{name_of(ds)}-{random_suffix(rng)}",
        {REVISION_LABEL: revision or template_hash(template)},
    )
    spec = pod["spec"]
    spec["nodeName"] = node
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        }
    }
    tolerations = list(spec.get("tolerations") or [])
    for toleration in DAEMONSET_TOLERATIONS:
        if toleration not in tolerations:
            tolerations.append(dict(toleration))
    spec["tolerations"] = tolerations
    return pod


COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


class JobController(_Owned):
    name = "job"
    storage = "jobs"
    owner_kind = "Job"

    def reconcile(self, job: Obj) -> None:
        spec = job.get("spec") or {}
        status = clone(job.get("status") or {})
        conditions = list(status.get("conditions") or [])
        pods = self.owned_pods(job)
        active = [p for p in pods if pod_is_active(p)]
        succeeded = sum(1 for p in pods if pod_phase(p) == "Succeeded")
        failed = sum(1 for p in pods if pod_phase(p) == "Failed")
        _count_finished_pods(status, succeeded, failed)
        if _holds(conditions, "Complete") or _holds(conditions, "Failed"):
            self._terminate(active)
            status.pop("active", None)
            status["ready"] = 0
            self.write_status(job, status)
            return
        if spec.get("suspend"):
            self._terminate(active)
            conditions = set_condition(conditions, "Suspended", "True", "JobSuspended", "Job suspended")
            self._write_stopped(job, status, conditions)
            return
        if _holds(conditions, "Suspended"):
            conditions = set_condition(conditions, "Suspended", "False", "JobResumed", "Job resumed")
        status.setdefault("startTime", rfc3339())
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        target = int(completions) if completions is not None else 1
        if succeeded >= target and not active:
            self._complete(job, status, conditions)
            return
        if failed > int(spec.get("backoffLimit", 6)):
            self._fail(job, status, conditions, active)
            return
        want = min(parallelism, target - succeeded) - len(active) - self.in_flight(job)
        if want > 0:
            self._start_pods(job, pods, want, target)
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if pod_is_ready(p))
        status["terminating"] = sum(1 for p in pods if is_terminating(p))
        status["conditions"] = conditions
        if not status["conditions"]:
            status.pop("conditions")
        self.write_status(job, status)

    def _terminate(self, pods: list[Obj]) -> None:
        for pod in pods:
            self.manager.kubelet.terminate(pod)

    def _write_stopped(self, job: Obj, status: Obj, conditions: list[Obj], **more: Any) -> None:
        """The status of a Job that runs no pods any more (suspended, complete or failed)."""
        status.update({"conditions": conditions, **more, "ready": 0})
        status.pop("active", None)
        self.write_status(job, status)

    def _complete(self, job: Obj, status: Obj, conditions: list[Obj]) -> None:
        stamp = rfc3339()
        message = "Reached expected number of succeeded pods"
        for kind in ("SuccessCriteriaMet", "Complete"):
            conditions = set_condition(conditions, kind, "True", "CompletionsReached", message)
        self._write_stopped(job, status, conditions, completionTime=stamp)
        self.events.record(job, "Normal", "Completed", "Job completed", "job-controller")

    def _fail(self, job: Obj, status: Obj, conditions: list[Obj], active: list[Obj]) -> None:
        message = "Job has reached the specified backoff limit"
        for kind in ("FailureTarget", "Failed"):
            conditions = set_condition(conditions, kind, "True", "BackoffLimitExceeded", message)
        self._terminate(active)
        self._write_stopped(job, status, conditions)
        self.events.record(job, "Warning", "BackoffLimitExceeded", message, "job-controller")

    def _start_pods(self, job: Obj, pods: list[Obj], want: int, target: int) -> None:
        """`want` more pods: at once for a Job's first, after the recreate delay for replacements;
        an Indexed Job's pods take the completion indexes not yet running or done."""
        spec = job.get("spec") or {}
        indexed = spec.get("completionMode") == "Indexed"
        taken = {
            meta(p).get("annotations", {}).get(COMPLETION_INDEX)
            for p in pods
            if pod_is_active(p) or pod_phase(p) == "Succeeded"
        }
        free_indexes = [str(i) for i in range(target) if str(i) not in taken]
        template = spec.get("template") or {}

        def build(owner: Obj) -> Obj | None:
            if indexed:
                if not free_indexes:
                    return None
                index = free_indexes.pop(0)
                pod = pod_from_template(
                    owner,
                    template,
                    f"{name_of(owner)}-{index}-{random_suffix(self.ctx.rng)}",
                    {COMPLETION_INDEX: index},
                )
                pod["metadata"].setdefault("annotations", {})[COMPLETION_INDEX] = index
                return pod
            return pod_from_template(owner, template, f"{name_of(owner)}-{random_suffix(self.ctx.rng)}")

        if not pods:
            for _ in range(want):
                first = build(job)
                if first is not None:
                    self.create_pod(job, first)
        else:
            self.create_pods_later(job, want, build)


def _holds(conditions: list[Obj], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _count_finished_pods(status: Obj, succeeded: int, failed: int) -> None:
    """status.succeeded/failed never go down (finished pods may be gone); zero is left out."""
    if succeeded:
        status["succeeded"] = max(int(status.get("succeeded", 0)), succeeded)
    if failed:
        status["failed"] = max(int(status.get("failed", 0)), failed)
    for key in ("succeeded", "failed"):
        if not status.get(key):
            status.pop(key, None)
