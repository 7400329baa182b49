"""The checkpoint protocol between pitstop and training workloads.

A training pod is a member of a gang (label `pitstop.dev/gang`, on the pod or on the Job that
owns it), is annotated `pitstop.dev/training: "true"` (pod or Job), or is recognised as
training from the marks of the operator that runs it, failing closed for GPU pods that are not
restartable serving (`pitstop.kube.training`). It speaks the protocol
when it (or its Job) carries `pitstop.dev/checkpoint-protocol`. pitstop asks for a checkpoint
by writing `pitstop.dev/checkpoint-requested: <token>` on the object that speaks it; the
workload answers `pitstop.dev/checkpoint-done: <token>` once its state is safe. A drain only
evicts a training pod whose checkpoint is acknowledged (done == requested).

A job whose operator can suspend it (a PyTorchJob, JobSet, RayCluster, ...:
`pitstop.kube.suspend`) may instead carry `pitstop.dev/checkpoint-protocol: suspend` on that
framework object: pitstop suspends the whole job and waits until its pods are gone, so there
is nothing left on the node to evict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pitstop.kube.annotations import (
    CHECKPOINT_DONE,
    CHECKPOINT_REQUESTED,
    GANG_LABEL,
    TRAINING_ANNOTATION,
)
from pitstop.kube.objects import Obj, annotations_of, controller_of, labels_of, namespace_of
from pitstop.kube.suspend import (
    FrameworkRef,
    holds_of,
    speaks_annotation,
    speaks_suspend,
    suspend_field,
    suspendable,
)
from pitstop.kube.training import Recognition, recognise

CheckpointState = Literal["not-training", "no-protocol", "not-requested", "requested", "acknowledged"]


def checkpoint_token(run_id: str, node: str) -> str:
    """One token per run and node: a gang spanning two nodes is asked once for each."""
    return f"{run_id}/{node}"


def owning_job_key(pod: Mapping[str, Any]) -> str | None:
    """`namespace/name` of the Job controlling the pod, if a Job does."""
    ref = controller_of(pod)
    if ref is None or ref.get("kind") != "Job":
        return None
    return f"{namespace_of(pod)}/{ref.get('name', '')}"


def framework_ref(pod: Mapping[str, Any], job: Mapping[str, Any] | None) -> FrameworkRef | None:
    """The suspendable operator object controlling the pod directly (a PyTorchJob, a
    RayCluster) or through its Job (a JobSet's child Job), if any."""
    for obj in (pod, job):
        if obj is None:
            continue
        ref = controller_of(obj)
        if ref is not None and suspendable(str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")):
            return FrameworkRef(
                str(ref["apiVersion"]),
                str(ref["kind"]),
                namespace_of(obj),
                str(ref.get("name")),
                str(ref.get("uid") or ""),
            )
    return None


@dataclass(frozen=True)
class Workload:
    """A pod, the Job that owns it (None when no Job does, or it is gone) and the training
    operator's object that controls it, when that object can be suspended (else None)."""

    pod: Obj
    job: Obj | None = None
    framework: Obj | None = None

    def _both(self) -> list[Mapping[str, Any]]:
        return [self.pod] if self.job is None else [self.pod, self.job]

    @property
    def gang(self) -> str | None:
        for obj in self._both():
            value = labels_of(obj).get(GANG_LABEL)
            if value:
                return value
        return None

    @property
    def marked(self) -> bool:
        """Marked as training with pitstop's own label or annotation."""
        if self.gang is not None:
            return True
        return any(annotations_of(o).get(TRAINING_ANNOTATION, "").lower() == "true" for o in self._both())

    @property
    def recognition(self) -> Recognition | None:
        """What a real operator's marks say this pod is (pitstop.kube.training), unless pitstop's
        own marks already say it."""
        return None if self.marked else recognise(self.pod)

    @property
    def is_training(self) -> bool:
        return self.marked or self.recognition is not None

    def why(self) -> str:
        """Why this pod counts as training, for the person reading a refusal."""
        found = self.recognition
        if found is not None:
            return found.describe()
        if self.gang is not None:
            return f"gang {self.gang} (label {GANG_LABEL})"
        return f'annotation {TRAINING_ANNOTATION}: "true"'

    @property
    def holder(self) -> Literal["pod", "job", "framework"] | None:
        """Which object speaks the protocol: the pod itself, else its Job (the annotation
        protocol), else its operator's object (protocol suspend), else none."""
        if speaks_annotation(self.pod):
            return "pod"
        if self.job is not None and speaks_annotation(self.job):
            return "job"
        if self.framework is not None and speaks_suspend(self.framework):
            return "framework"
        return None

    def holder_object(self) -> Obj | None:
        kind = self.holder
        if kind == "pod":
            return self.pod
        if kind == "job":
            return self.job
        if kind == "framework":
            return self.framework
        return None

    def state(self) -> CheckpointState:
        if not self.is_training:
            return "not-training"
        obj = self.holder_object()
        if obj is None:
            return "no-protocol"
        if self.holder == "framework":
            # The operator's answer is the pods going away; while one is here it is not safe.
            spec = suspendable(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
            return "requested" if spec is not None and suspend_field(obj, spec) else "not-requested"
        notes = annotations_of(obj)
        requested = notes.get(CHECKPOINT_REQUESTED)
        if not requested:
            return "not-requested"
        return "acknowledged" if notes.get(CHECKPOINT_DONE) == requested else "requested"

    def answered(self, token: str) -> bool:
        """The holder acknowledged exactly this token."""
        obj = self.holder_object()
        return obj is not None and annotations_of(obj).get(CHECKPOINT_DONE) == token

    def satisfied(self, token: str) -> bool:
        """Our checkpoint is safe: acknowledged, or superseded by a later request that was.

        Two nodes of one gang in flight at once both ask its members to checkpoint; the later
        token overwrites the earlier one. A checkpoint taken for the later request was taken
        after ours, so it protects our drain just as well."""
        if self.answered(token):
            return True
        return not self.requested(token) and self.state() == "acknowledged"

    def requested(self, token: str) -> bool:
        obj = self.holder_object()
        if obj is not None and self.holder == "framework":
            return token in holds_of(obj)
        return obj is not None and annotations_of(obj).get(CHECKPOINT_REQUESTED) == token
