"""Suspending a training job through its own operator: the checkpoint protocol `suspend`.

Most training operators stop a whole job gracefully when its `suspend` field turns true: they
delete every pod of the job (each gets SIGTERM and its grace period, so a trainer that saves on
SIGTERM — or checkpoints periodically — loses at most the steps since its last save) and start
them again when it turns false. That is the framework's own checkpoint hook; a job whose owner
says it may be stopped this way carries `pitstop.dev/checkpoint-protocol: suspend` on the
framework object (the PyTorchJob, JobSet, RayCluster, ...). pitstop then suspends the job as a
whole instead of evicting one member and leaving the others to hang, waits until its pods are
gone, and resumes it once the node is back (`kube.resume_workloads`).

The fields and conditions, from the operators' APIs:
- Kubeflow Training Operator v1 (PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob) and
  the MPI Operator v2beta1: `spec.runPolicy.suspend` ("If a Job is suspended after creation,
  the Job controller will delete all active Pods"); condition `Suspended`, reason
  `<Kind>Suspended`, message "<Kind> <name> is suspended.".
- Kubeflow Trainer v2 TrainJob and JobSet: `spec.suspend` (JobSet: "Suspend suspends all
  running child Jobs"); JobSet's condition `Suspended`, reason `SuspendedJobs`, message
  "jobset is suspended" (jobset pkg/constants).
- KubeRay RayCluster and RayJob (v1.1+): `spec.suspend`; RayCluster condition
  `RayClusterSuspended`.
Volcano jobs (suspended through a bus.volcano.sh Command) and LeaderWorkerSet (no suspend)
are not here: they stay a human decision unless they speak the annotation protocol.

A job Kueue admits (label `kueue.x-k8s.io/queue-name`) has its `suspend` owned by Kueue:
pitstop writing it would race Kueue's admission. Such a job is stopped the Kueue way instead,
by deactivating its Workload (`spec.active: false`, found by Kueue's `kueue.x-k8s.io/job-uid`
label): Kueue evicts it (condition Evicted, reason `InactiveWorkload`) and suspends the job;
made active again, the Workload is requeued (`Reactivated`) and admitted when there is quota.

pitstop keeps two records, so nothing is lost if a worker dies between steps:
- on the framework object, `pitstop.dev/suspended-for: <run>/<node>,...`: every node in flight
  holding the job suspended (the job resumes when the last one lets go; a job its owner had
  suspended before carries no hold and is never resumed by pitstop);
- on the node, `pitstop.dev/suspended-workloads: <apiVersion>/<Kind>/<ns>/<name>,...`: what
  this node suspended, written before the suspension so a resume always finds it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pitstop.kube.annotations import CHECKPOINT_PROTOCOL, SUSPENDED_FOR
from pitstop.kube.objects import annotations_of, labels_of

SUSPEND_PROTOCOL = "suspend"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_MANAGED = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/pod-group-name")

_RUN_POLICY = ("spec", "runPolicy", "suspend")
_SPEC = ("spec", "suspend")


@dataclass(frozen=True)
class Suspendable:
    """A framework kind whose operator suspends and resumes a whole job."""

    kind: str
    plural: str
    field: tuple[str, ...]
    condition: str  # the status condition that says "suspended" once it is True


FRAMEWORKS: dict[tuple[str, str], Suspendable] = {
    **{
        ("kubeflow.org", kind): Suspendable(kind, f"{kind.lower()}s", _RUN_POLICY, "Suspended")
        for kind in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")
    },
    ("trainer.kubeflow.org", "TrainJob"): Suspendable("TrainJob", "trainjobs", _SPEC, "Suspended"),
    ("jobset.x-k8s.io", "JobSet"): Suspendable("JobSet", "jobsets", _SPEC, "Suspended"),
    ("ray.io", "RayCluster"): Suspendable("RayCluster", "rayclusters", _SPEC, "RayClusterSuspended"),
    ("ray.io", "RayJob"): Suspendable("RayJob", "rayjobs", _SPEC, "Suspended"),
}


def group_of(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def suspendable(api_version: str, kind: str) -> Suspendable | None:
    return FRAMEWORKS.get((group_of(api_version), kind))


@dataclass(frozen=True, order=True)
class FrameworkRef:
    """A framework object by apiVersion, kind, namespace and name; written as
    `<group>/<version>/<Kind>/<namespace>/<name>` in the node's record. `uid` is the one the
    pod's ownerReference names (not recorded): the object read must be that very object."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.api_version}/{self.kind}/{self.namespace}/{self.name}"

    @property
    def shown(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def spec(self) -> Suspendable:
        found = suspendable(self.api_version, self.kind)
        if found is None:
            raise ValueError(f"{self.kind} ({self.api_version}) cannot be suspended by pitstop")
        return found

    @classmethod
    def parse(cls, text: str) -> FrameworkRef:
        """An entry of a node's record. The annotation is writable by others (the node's own
        kubelet, anyone who may patch nodes): every part is checked as the apiserver would
        accept it, so a crafted entry can name nothing but a suspendable kind's object."""
        parts = text.strip().split("/")
        valid = (
            len(parts) == 5
            and suspendable(f"{parts[0]}/{parts[1]}", parts[2]) is not None
            and _VERSION.fullmatch(parts[1]) is not None
            and _DNS_LABEL.fullmatch(parts[3]) is not None
            and len(parts[4]) <= 253
            and _DNS_SUBDOMAIN.fullmatch(parts[4]) is not None
        )
        if not valid:
            raise ValueError(
                f"not a suspendable framework object {text!r} "
                "(expected <group>/<version>/<Kind>/<namespace>/<name>)"
            )
        return cls(f"{parts[0]}/{parts[1]}", parts[2], parts[3], parts[4])


_VERSION = re.compile(r"v[0-9]+((alpha|beta)[0-9]+)?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def parse_refs(text: str | None) -> list[FrameworkRef]:
    """The node's record; an entry that is not ours is an error, never silently skipped."""
    refs, bad = read_refs(text)
    if bad:
        FrameworkRef.parse(bad[0])  # raises, naming it
    return refs


def read_refs(text: str | None) -> tuple[list[FrameworkRef], list[str]]:
    """The node's record read leniently: the valid entries, and the others to report (one bad
    entry must not keep the jobs after it suspended)."""
    refs: set[FrameworkRef] = set()
    bad: list[str] = []
    for item in (text or "").split(","):
        if not item.strip():
            continue
        try:
            refs.add(FrameworkRef.parse(item))
        except ValueError:
            bad.append(item.strip())
    return sorted(refs), bad


def join_refs(refs: set[FrameworkRef] | list[FrameworkRef]) -> str | None:
    return ",".join(str(r) for r in sorted(set(refs))) or None


def speaks_suspend(obj: Mapping[str, Any]) -> bool:
    return annotations_of(obj).get(CHECKPOINT_PROTOCOL, "").strip().lower() == SUSPEND_PROTOCOL


def speaks_annotation(obj: Mapping[str, Any]) -> bool:
    """The annotation protocol: any value but `suspend`, which an operator may copy down from
    the job onto its Jobs and pods (Trainer's TrainJob does) without them answering requests."""
    value = annotations_of(obj).get(CHECKPOINT_PROTOCOL, "").strip().lower()
    return bool(value) and value != SUSPEND_PROTOCOL


def kueue_managed(obj: Mapping[str, Any]) -> bool:
    return any(key in labels_of(obj) for key in KUEUE_MANAGED)


def suspend_field(obj: Mapping[str, Any], spec: Suspendable) -> bool:
    current: Any = obj
    for part in spec.field:
        if not isinstance(current, Mapping):
            return False
        current = current.get(part)
    return current is True


def suspend_patch(spec: Suspendable, value: bool) -> dict[str, Any]:
    """The JSON merge patch that sets the suspend field (custom resources take no strategic merge)."""
    patch: dict[str, Any] = {spec.field[-1]: value}
    for part in reversed(spec.field[:-1]):
        patch = {part: patch}
    return patch


def holds_of(obj: Mapping[str, Any]) -> set[str]:
    raw = annotations_of(obj).get(SUSPENDED_FOR, "")
    return {h for h in (x.strip() for x in raw.split(",")) if h}


def suspended_condition(obj: Mapping[str, Any], spec: Suspendable) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == spec.condition:
            return condition
    return None


def describe_suspended(obj: Mapping[str, Any], spec: Suspendable) -> str:
    """What the operator says about the suspension (its condition), for the result."""
    found = suspended_condition(obj, spec)
    if found is None or str(found.get("status")) != "True":
        return "suspend requested; the operator has not reported it yet"
    reason, message = found.get("reason") or "", found.get("message") or ""
    return f"{spec.condition}=True ({reason}: {message})" if reason or message else f"{spec.condition}=True"
