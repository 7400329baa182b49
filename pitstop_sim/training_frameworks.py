"""How real operators mark the pods of a training job, for the rehearsal cluster's seeds.

Each framework's pods carry the labels, annotations and ownerReference its operator writes
(from the operators' sources and docs, the same facts `pitstop.kube.training` reads, but written
down here separately so the simulator does not learn them from pitstop):
- `pytorchjob`: Kubeflow Training Operator v1 — ownerReference kubeflow.org/v1 PyTorchJob;
  labels `training.kubeflow.org/job-name`, `operator-name: pytorchjob-controller`,
  `replica-type: master|worker`, `replica-index`; pods `<job>-master-0`, `<job>-worker-<i>`.
- `jobset`: JobSet — a batch Job per replicated job (`<jobset>-workers-0`), owned by
  jobset.x-k8s.io/v1alpha2 JobSet, its pods labelled `jobset.sigs.k8s.io/jobset-name`,
  `replicatedjob-name`, `job-index` (seeded by the Job path of the seeder).
- `volcano`: Volcano batch.volcano.sh/v1alpha1 Job — labels `volcano.sh/job-name`,
  `volcano.sh/queue-name`, annotation `scheduling.k8s.io/group-name: <job>-<uid>` (its
  PodGroup), schedulerName `volcano`; pods `<job>-worker-<i>`.
- `raycluster`: KubeRay ray.io/v1 RayCluster — labels `ray.io/cluster`, `ray.io/node-type:
  head|worker`, `ray.io/group`; pods `<cluster>-head-<x>`, `<cluster>-worker-<x>`.
- `lws`: LeaderWorkerSet — pods of a StatefulSet owned by the LWS, labelled
  `leaderworkerset.sigs.k8s.io/name`, `group-index`, `worker-index`.
- `unlabelled`: a GPU pod owned by a controller nobody here knows (example.com/v1 Experiment),
  with no marks at all: only failing closed protects it.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


@dataclass
class PodMarks:
    name: str
    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    owner: Obj | None = None
    scheduler: str | None = None


def owner(api_version: str, kind: str, name: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{api_version}/{kind}/{name}")),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def direct_pod_marks(framework: str, job: str, index: int, suffix: str) -> PodMarks:
    """The marks of pod `index` of a framework whose controller owns pods directly."""
    if framework == "pytorchjob":
        role = "master" if index == 0 else "worker"
        number = 0 if index == 0 else index - 1
        return PodMarks(
            name=f"{job}-{role}-{number}",
            labels={
                "training.kubeflow.org/job-name": job,
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": role,
                "training.kubeflow.org/replica-index": str(number),
            },
            owner=owner("kubeflow.org/v1", "PyTorchJob", job),
        )
    if framework == "volcano":
        ref = owner("batch.volcano.sh/v1alpha1", "Job", job)
        return PodMarks(
            name=f"{job}-worker-{index}",
            labels={"volcano.sh/job-name": job, "volcano.sh/queue-name": "default"},
            annotations={
                "scheduling.k8s.io/group-name": f"{job}-{ref['uid']}",
                "volcano.sh/task-spec": "worker",
            },
            owner=ref,
            scheduler="volcano",
        )
    if framework == "raycluster":
        role = "head" if index == 0 else "worker"
        return PodMarks(
            name=f"{job}-{role}-{suffix}",
            labels={
                "ray.io/cluster": job,
                "ray.io/node-type": role,
                "ray.io/group": "headgroup" if index == 0 else "workergroup",
            },
            owner=owner("ray.io/v1", "RayCluster", job),
        )
    if framework == "lws":
        return PodMarks(
            name=f"{job}-0-{index}" if index else f"{job}-0",
            labels={
                "leaderworkerset.sigs.k8s.io/name": job,
                "leaderworkerset.sigs.k8s.io/group-index": "0",
                "leaderworkerset.sigs.k8s.io/worker-index": str(index),
            },
            owner=owner("apps/v1", "StatefulSet", job if index == 0 else f"{job}-0"),
        )
    if framework == "unlabelled":
        return PodMarks(
            name=f"{job}-{index}-{suffix}", labels={}, owner=owner("example.com/v1", "Experiment", job)
        )
    raise ValueError(f"no direct pod marks for framework {framework!r}")


def jobset_job(jobset: str) -> tuple[str, dict[str, str], Obj]:
    """The batch Job a JobSet makes for its one replicated job: name, labels, ownerReference."""
    labels = {
        "jobset.sigs.k8s.io/jobset-name": jobset,
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/job-index": "0",
    }
    return f"{jobset}-workers-0", labels, owner("jobset.x-k8s.io/v1alpha2", "JobSet", jobset)


# --- the operators' own objects -------------------------------------------------------------
# Each is stored with the uid its pods' (or child Job's) ownerReference names, and with the
# spec and status fields the real operator writes (Training Operator v1 `PyTorchJob`, JobSet
# v1alpha2, KubeRay v1 `RayCluster`). `pitstop_sim.controllers.frameworks` suspends and resumes
# them as their operators do.

FRAMEWORK_STORAGE = {
    "pytorchjob": ("kubeflow.org", "pytorchjobs", "kubeflow.org/v1", "PyTorchJob"),
    "jobset": ("jobset.x-k8s.io", "jobsets", "jobset.x-k8s.io/v1alpha2", "JobSet"),
    "raycluster": ("ray.io", "rayclusters", "ray.io/v1", "RayCluster"),
}


def _template(labels: dict[str, str], container: Obj, extra: Obj) -> Obj:
    return {"metadata": {"labels": dict(labels)}, "spec": {"containers": [dict(container)], **extra}}


def framework_object(
    framework: str,
    name: str,
    pods: int,
    container: Obj,
    extra: Obj,
    labels: dict[str, str],
    notes: dict[str, str],
) -> Obj:
    """The PyTorchJob, JobSet or RayCluster of a seeded training job, running."""
    _, _, api_version, kind = FRAMEWORK_STORAGE[framework]
    ref = owner(api_version, kind, name)
    metadata: Obj = {"name": name, "uid": ref["uid"], "labels": dict(labels)}
    if notes:
        metadata["annotations"] = dict(notes)
    template = _template({"app": name}, container, extra)
    if framework == "pytorchjob":
        replica_specs: Obj = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template}}
        if pods > 1:
            replica_specs["Worker"] = {
                "replicas": pods - 1,
                "restartPolicy": "OnFailure",
                "template": template,
            }
        spec: Obj = {
            "runPolicy": {"cleanPodPolicy": "None", "suspend": False},
            "pytorchReplicaSpecs": replica_specs,
        }
    elif framework == "jobset":
        spec = {
            "suspend": False,
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": pods,
                            "completions": pods,
                            "completionMode": "Indexed",
                            "template": template,
                        }
                    },
                }
            ],
        }
    else:
        spec = {
            "rayVersion": "2.40.0",
            "suspend": False,
            "headGroupSpec": {"rayStartParams": {}, "template": template},
            "workerGroupSpecs": [
                {
                    "groupName": "workergroup",
                    "replicas": pods - 1,
                    "minReplicas": pods - 1,
                    "maxReplicas": pods - 1,
                    "rayStartParams": {},
                    "template": template,
                }
            ],
        }
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def framework_pod_count(obj: Obj) -> int:
    """How many pods the object's spec asks for (PyTorchJob replicas, Ray head + workers)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PyTorchJob":
        return sum(int(r.get("replicas", 1)) for r in (spec.get("pytorchReplicaSpecs") or {}).values())
    if obj.get("kind") == "RayCluster":
        return 1 + sum(int(g.get("replicas", 0)) for g in spec.get("workerGroupSpecs") or [])
    return 0


def framework_template(obj: Obj, index: int) -> Obj:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PyTorchJob":
        specs = spec.get("pytorchReplicaSpecs") or {}
        chosen = specs.get("Master") if index == 0 else specs.get("Worker", specs.get("Master"))
        return dict((chosen or {}).get("template") or {})
    if index == 0:
        return dict((spec.get("headGroupSpec") or {}).get("template") or {})
    return dict(((spec.get("workerGroupSpecs") or [{}])[0]).get("template") or {})


def volcano_objects(name: str, pods: int, container: Obj) -> tuple[Obj, Obj]:
    """A running Volcano batch.volcano.sh/v1alpha1 Job and its scheduling.volcano.sh/v1beta1
    PodGroup (`<job>-<job uid>`, the name the pods' `scheduling.k8s.io/group-name` annotation
    gives), with the status fields Volcano's controllers write (job `state.phase`, `running`,
    `minAvailable`; PodGroup `phase`, `running`, condition `Scheduled`). Volcano has no suspend
    field (it aborts and resumes jobs through bus.volcano.sh Commands), so they stay as seeded."""
    ref = owner("batch.volcano.sh/v1alpha1", "Job", name)
    template = _template({"app": name}, container, {"restartPolicy": "Never"})
    job: Obj = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "uid": ref["uid"]},
        "spec": {
            "minAvailable": pods,
            "schedulerName": "volcano",
            "queue": "default",
            "tasks": [{"name": "worker", "replicas": pods, "template": template}],
        },
        "status": {"state": {"phase": "Running"}, "minAvailable": pods, "running": pods, "version": 1},
    }
    group: Obj = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": f"{name}-{ref['uid']}", "ownerReferences": [ref]},
        "spec": {"minMember": pods, "minTaskMember": {"worker": pods}, "queue": "default"},
        "status": {
            "phase": "Running",
            "running": pods,
            "conditions": [
                {
                    "type": "Scheduled",
                    "status": "True",
                    "reason": "tasks in gang are ready to be scheduled",
                    "transitionID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"podgroup/{name}")),
                }
            ],
        },
    }
    return job, group


def kueue_workload(job: Obj, queue: str, cluster_queue: str | None, pods: int) -> Obj:
    """The Workload Kueue makes for a job it admits: named `<kind>-<job>-<hash>`, labelled
    `kueue.x-k8s.io/job-uid` with the job's uid (how clients find it: the name's hash is
    Kueue's own), owned by the job, admitted (QuotaReserved and Admitted True)."""
    uid = job["metadata"]["uid"]
    digest = hashlib.sha1(f"{job['metadata']['name']}{job['kind']}{uid}".encode()).hexdigest()[:5]
    admitted = cluster_queue is not None
    conditions = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
         "message": f"Quota reserved in ClusterQueue {cluster_queue}"},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"},
    ] if admitted else []  # fmt: skip
    body: Obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": f"{str(job['kind']).lower()}-{job['metadata']['name']}-{digest}",
            "labels": {"kueue.x-k8s.io/job-uid": uid},
            "ownerReferences": [
                {
                    "apiVersion": job["apiVersion"],
                    "kind": job["kind"],
                    "name": job["metadata"]["name"],
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"active": True, "queueName": queue, "podSets": [{"name": "main", "count": pods}]},
        "status": {"conditions": conditions},
    }
    if admitted:
        body["status"]["admission"] = {"clusterQueue": cluster_queue}
    return body
