"""Which pods are training (or other gang) workloads a drain must not evict without a
checkpoint — recognised from the marks real operators put on their pods, and failing closed.

Real training does not carry pitstop's own labels. The operators that run it mark their pods:
- Kubeflow Training Operator (PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob) and
  the MPI Operator: label `training.kubeflow.org/job-name`;
- JobSet (and Kubeflow Trainer v2's TrainJob, which runs on JobSet): label
  `jobset.sigs.k8s.io/jobset-name`;
- Volcano: label `volcano.sh/job-name`, PodGroup annotation `scheduling.k8s.io/group-name`
  (also set by kube-batch and the training operator's gang scheduling) or
  `scheduling.volcano.sh/group-name`;
- scheduler-plugins coscheduling: label `scheduling.x-k8s.io/pod-group` (older:
  `pod-group.scheduling.sigs.k8s.io`); YuniKorn: annotation `yunikorn.apache.org/task-group-name`;
- KubeRay (RayCluster, RayJob): label `ray.io/cluster`;
- LeaderWorkerSet (multi-host serving whose group restarts as one): label
  `leaderworkerset.sigs.k8s.io/name`;
- Kueue: label `kueue.x-k8s.io/pod-group-name` (pod groups) or `kueue.x-k8s.io/queue-name`
  (a queued batch workload).
Controllers are also recognised by the kind of their ownerReference, in case labels were
stripped (`OWNER_KINDS`). Sources: the operators' own label constants and documentation; the
`kubectl get pods -l ...` lines their docs give.

A pod annotated `pitstop.dev/restartable: "true"` by its owner, or one of pitstop's own probe
Jobs (`pitstop.dev/managed-by=pitstop`), is never training. Failing closed: a pod that asks for
accelerators (`nvidia.com/gpu`, MIG slices, AMD and Intel GPUs, Gaudi, Neuron, TPUs, or DRA
resource claims)
and is not restartable serving (controlled by a ReplicaSet, a StatefulSet or a
ReplicationController) is treated as training without a checkpoint protocol: the drain stops
for a human decision and names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pitstop.kube.annotations import MANAGED_BY_LABEL, RESTARTABLE_ANNOTATION
from pitstop.kube.objects import annotations_of, controller_of, labels_of, meta

# (where, key, what it means)
GANG_MARKS: tuple[tuple[str, str, str], ...] = (
    ("label", "training.kubeflow.org/job-name", "Kubeflow training job"),
    ("label", "jobset.sigs.k8s.io/jobset-name", "JobSet"),
    ("label", "volcano.sh/job-name", "Volcano job"),
    ("annotation", "scheduling.k8s.io/group-name", "PodGroup"),
    ("annotation", "scheduling.volcano.sh/group-name", "Volcano PodGroup"),
    ("label", "scheduling.x-k8s.io/pod-group", "coscheduling PodGroup"),
    ("label", "pod-group.scheduling.sigs.k8s.io", "coscheduling PodGroup"),
    ("annotation", "yunikorn.apache.org/task-group-name", "YuniKorn task group"),
    ("label", "ray.io/cluster", "Ray cluster"),
    ("label", "leaderworkerset.sigs.k8s.io/name", "LeaderWorkerSet group"),
    ("label", "kueue.x-k8s.io/pod-group-name", "Kueue pod group"),
    ("label", "kueue.x-k8s.io/queue-name", "Kueue workload"),  # unless restartable serving
)

# ownerReference (group, kind) of controllers that run training or gangs.
OWNER_KINDS: dict[tuple[str, str], str] = {
    **{
        ("kubeflow.org", k): k for k in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")
    },
    ("trainer.kubeflow.org", "TrainJob"): "TrainJob",
    ("jobset.x-k8s.io", "JobSet"): "JobSet",
    ("batch.volcano.sh", "Job"): "Volcano job",
    ("ray.io", "RayCluster"): "Ray cluster",
    ("ray.io", "RayJob"): "Ray job",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "LeaderWorkerSet",
}

# Controllers whose pods are interchangeable replicas: evicting one under a PDB is routine.
RESTARTABLE_CONTROLLERS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController"})

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
# Extended resources of accelerators (device plugins' resource names): NVIDIA GPUs and MIG
# slices, AMD GPUs, Intel GPUs and Gaudi, AWS Neuron and Trainium, Google TPUs.
ACCELERATOR_PREFIXES = (
    "nvidia.com/gpu",
    "nvidia.com/mig-",
    "amd.com/gpu",
    "gpu.intel.com/",
    "habana.ai/gaudi",
    "aws.amazon.com/neuron",
    "google.com/tpu",
)


@dataclass(frozen=True)
class Recognition:
    """Why a pod counts as training: `what` (e.g. "JobSet") and the mark that says so."""

    what: str
    mark: str
    selector: str | None = None  # a label selector finding the rest of its group, if any

    def describe(self) -> str:
        return f"{self.what}: {self.mark}"


def _group_of(ref: Mapping[str, Any]) -> str:
    api_version = str(ref.get("apiVersion") or "")
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def uses_accelerators(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True  # DRA: the claim's device class is not on the pod; assume an accelerator
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = (container or {}).get("resources") or {}
        for section in ("requests", "limits"):
            for name, value in (resources.get(section) or {}).items():
                if name.startswith(ACCELERATOR_PREFIXES) and str(value) not in ("0", ""):
                    return True
    return False


def recognise(pod: Mapping[str, Any]) -> Recognition | None:
    """The training/gang workload this pod belongs to, or None for anything else."""
    labels, notes = labels_of(pod), annotations_of(pod)
    if notes.get(RESTARTABLE_ANNOTATION, "").lower() == "true" or labels.get(MANAGED_BY_LABEL) == "pitstop":
        return None  # its owner's explicit word, or pitstop's own probe Job (re-runnable)
    for where, key, what in GANG_MARKS:
        value = (labels if where == "label" else notes).get(key)
        if key == KUEUE_QUEUE and restartable(pod):
            continue  # Kueue also admits Deployments and StatefulSets: serving replicas
        if value:
            # A queue holds many unrelated jobs: its label groups nothing.
            grouping = where == "label" and key != KUEUE_QUEUE and _selectable(value)
            selector = f"{key}={value}" if grouping else None
            return Recognition(what, f"{where} {key}={value}", selector)
    for ref in meta(pod).get("ownerReferences") or []:
        if not isinstance(ref, dict):
            continue
        owner_kind = OWNER_KINDS.get((_group_of(ref), str(ref.get("kind") or "")))
        if owner_kind:
            return Recognition(owner_kind, f"owned by {ref.get('kind')} {ref.get('name')}")
    if uses_accelerators(pod) and not restartable(pod):
        ref = controller_of(pod)
        owner = f"{ref.get('kind')} {ref.get('name')}" if ref else "no controller"
        return Recognition(
            "unrecognised GPU workload",
            f"asks for GPUs and is not restartable serving ({owner}; annotate "
            f'{RESTARTABLE_ANNOTATION}: "true" if it may be evicted)',
        )
    return None


def restartable(pod: Mapping[str, Any]) -> bool:
    if annotations_of(pod).get(RESTARTABLE_ANNOTATION, "").lower() == "true":
        return True
    ref = controller_of(pod)
    return ref is not None and ref.get("kind") in RESTARTABLE_CONTROLLERS


def _selectable(value: str) -> bool:
    # A label value usable in a selector as is (label values are at most 63 of these).
    return 0 < len(value) <= 63 and all(c.isalnum() or c in "-_." for c in value)
