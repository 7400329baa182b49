"""The one wait for a probe Job: `kube.job` (and the `gpu.*` modules that run through it) and
`acceptance.check`'s NCCL/DCGM/Xid/benchmark Jobs all wait here.

Each poll looks at the Job's conditions and diagnoses its pod (`pitstop.kube.pod_diagnosis`): a
pod that cannot run (ImagePullBackOff, CreateContainerConfigError, CrashLoopBackOff, ...) ends
the wait at once, one the scheduler keeps refusing ends it after `unschedulable_seconds`, and the
timeout ends it with the same diagnosis rather than a bare "did not finish". The wait neither
fails nor deletes the Job: the caller decides what an end means (kube.job fails the task,
acceptance fails the check) and deletes the Job once it has recorded the outcome.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from activities.kube.client import ApiStatus, Kube, job_path, pod_path, pods_path
from activities.kube.common import Deadline, pause
from pitstop.contracts import bound_text
from pitstop.errors import ErrorType, fail
from pitstop.kube.annotations import JOB_NAME_LABELS
from pitstop.kube.objects import Obj, meta, name_of, pod_phase
from pitstop.kube.pod_diagnosis import Diagnosis, diagnose

Status = Literal["succeeded", "failed", "cannot_run", "unschedulable", "timed_out"]
LOG_IN_MESSAGE = 4096  # bytes of the log tail quoted in a message about a Job that did not finish


def outcome(job: Obj) -> str | None:
    """ "succeeded" / "failed" once the Job has finished, else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return "succeeded" if cond["type"] == "Complete" else "failed"
    return None


def pod_of(kube: Kube, namespace: str, name: str) -> Obj | None:
    """The Job's most recent pod."""
    for label in JOB_NAME_LABELS:
        pods = kube.list(pods_path(namespace), label_selector=f"{label}={name}")
        if pods:
            return max(pods, key=lambda p: str(meta(p).get("creationTimestamp", "")))
    return None


def pod_logs(kube: Kube, namespace: str, pod: Obj | None, lines: int) -> str:
    if pod is None or pod_phase(pod) == "Pending":
        return ""
    try:
        return kube.text(f"{pod_path(namespace, name_of(pod))}/log", tailLines=lines)
    except ApiStatus as exc:
        return f"[pitstop: the log of {name_of(pod)} could not be read: {exc.message}]"


def pod_events(kube: Kube, namespace: str, pod: Obj | None) -> list[Obj]:
    """The events about the pod (kubectl describe's list); none when they cannot be read."""
    if pod is None:
        return []
    try:
        return kube.list(
            f"/api/v1/namespaces/{namespace}/events",
            field_selector=f"involvedObject.kind=Pod,involvedObject.name={name_of(pod)}",
        )
    except ApiStatus:
        return []


def delete_job(kube: Kube, namespace: str, name: str) -> None:
    try:
        kube.delete(job_path(namespace, name), {"propagationPolicy": "Background"})
    except ApiStatus as exc:
        if exc.status != 404:
            raise


@dataclass(frozen=True)
class JobEnd:
    """How the wait for a Job ended. `finished`: the Job itself succeeded or failed (its log is
    the tool's output); otherwise pitstop stopped waiting, `diagnosis` says why and `log` is
    whatever the pod had written by then."""

    namespace: str
    name: str
    status: Status
    pod: Obj | None
    log: str
    diagnosis: Diagnosis | None  # with the pod's events; None for a Job that succeeded
    elapsed: float  # seconds waited
    unschedulable_seconds: float

    @property
    def finished(self) -> bool:
        return self.status in ("succeeded", "failed")

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def describe(self, node: str, log_bytes: int = LOG_IN_MESSAGE) -> str:
        """The message kube.job reports for this end; a Job that did not finish is described with
        the last `log_bytes` of its log."""
        job = f"Job {self.namespace}/{self.name}"
        told = str(self.diagnosis) if self.diagnosis is not None else ""
        if self.finished:
            return f"{job} {self.status} on {node}" + (f": {told}" if told else "")
        logs = f"; last log lines:\n{bound_text(self.log, log_bytes)}" if self.log else ""
        if self.status == "cannot_run":
            reason = self.diagnosis.terminal_reason if self.diagnosis is not None else None
            return f"{job} on {node} cannot run ({reason}): {told}{logs}"
        if self.status == "unschedulable":
            return f"{job} on {node} was not scheduled within {self.unschedulable_seconds:g}s: {told}"
        return f"{job} on {node} did not finish within {self.elapsed:.0f}s: {told}{logs}"


def wait_for_job(
    kube: Kube,
    namespace: str,
    name: str,
    job: Obj,
    *,
    timeout_seconds: float,
    poll_interval_seconds: float,
    unschedulable_seconds: float,
    log_lines: int,
    heartbeat: Any,
) -> JobEnd:
    """Wait for the Job (`job` as last read or created) to finish, to be found unable to run, or
    for the timeout; heartbeat `heartbeat` at every poll (what a retried attempt resumes from).
    A Job deleted by someone else while waiting fails the task (PreconditionFailed)."""
    deadline = Deadline(timeout_seconds)
    unschedulable_since: float | None = None
    while (finished := outcome(job)) is None:
        pod = pod_of(kube, namespace, name)
        seen = diagnose(pod)
        unschedulable_since = (unschedulable_since or time.monotonic()) if seen.unschedulable else None
        stuck = (
            unschedulable_since is not None and time.monotonic() - unschedulable_since > unschedulable_seconds
        )
        if seen.terminal_reason or stuck or deadline.passed():
            status: Status = (
                "cannot_run" if seen.terminal_reason else "unschedulable" if stuck else "timed_out"
            )
            told = diagnose(pod, pod_events(kube, namespace, pod))
            return JobEnd(
                namespace,
                name,
                status,
                pod,
                pod_logs(kube, namespace, pod, log_lines),
                told,
                deadline.elapsed(),
                unschedulable_seconds,
            )
        pause(min(poll_interval_seconds, max(deadline.remaining(), 0.0)), heartbeat)
        current = kube.get_or_none(job_path(namespace, name))
        if current is None:
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"Job {namespace}/{name} was deleted while pitstop waited for it",
            )
        job = current
    pod = pod_of(kube, namespace, name)
    logs = pod_logs(kube, namespace, pod, log_lines)
    why = diagnose(pod, pod_events(kube, namespace, pod)) if finished == "failed" else None
    return JobEnd(
        namespace,
        name,
        "succeeded" if finished == "succeeded" else "failed",
        pod,
        logs,
        why,
        deadline.elapsed(),
        unschedulable_seconds,
    )
