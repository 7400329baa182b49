"""kube.job: run a Job pinned to the node (validation: DCGM diag, NCCL tests...), wait for it,
return the tail of its pod's log.

The Job's name is `<prefix>-<hash of run id, task path, node>`: a retried attempt finds the
Job its predecessor created and keeps waiting for it instead of starting a second one. The
outcome is heartbeated before the Job is deleted, so an attempt retried after the deletion
returns that outcome rather than running the Job again.
"""

from __future__ import annotations

import time
from typing import Any

from activities.kube.client import ApiStatus, Kube, job_path, jobs_path, pod_path, pods_path
from activities.kube.common import (
    Deadline,
    beat,
    first_details,
    kube_for,
    kube_module,
    node_name,
    pause,
)
from pitstop.contracts import ModuleCall, ModuleResult, bound_text
from pitstop.errors import ErrorType, fail
from pitstop.kube.annotations import (
    HOSTNAME_LABEL,
    JOB_NAME_LABELS,
    MAINTENANCE_TAINT,
    MANAGED_BY_LABEL,
    UNSCHEDULABLE_TAINT,
)
from pitstop.kube.names import job_name
from pitstop.kube.objects import Obj, meta, name_of, pod_phase
from pitstop.kube.pod_diagnosis import diagnose
from pitstop.module_args.kube import JOB, JobArgs

LOG_BYTES = 48 * 1024  # under the 64 KiB a result field may hold in history
CONTAINER = "main"


def job_body(name: str, node: str, args: JobArgs, call: ModuleCall) -> Obj:
    labels = {**args.labels, MANAGED_BY_LABEL: "pitstop"}
    container: Obj = {"name": CONTAINER, "image": args.image}
    if args.command:
        container["command"] = list(args.command)
    if args.args:
        container["args"] = list(args.args)
    if args.env:
        container["env"] = [{"name": k, "value": v} for k, v in sorted(args.env.items())]
    if args.gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": args.gpus}}
    if args.privileged:
        container["securityContext"] = {"privileged": True}
    # The node is usually cordoned and may carry pitstop's maintenance taint: tolerate both.
    tolerations = [
        {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
        {"key": MAINTENANCE_TAINT, "operator": "Exists"},
        *args.tolerations,
    ]
    pod_spec: Obj = {"restartPolicy": "Never", "containers": [container], "tolerations": tolerations}
    if args.pin == "node_name":
        pod_spec["nodeName"] = node
    else:
        pod_spec["nodeSelector"] = {HOSTNAME_LABEL: node}
    if args.service_account:
        pod_spec["serviceAccountName"] = args.service_account
    annotations = {"pitstop.dev/run-id": call.run_id, "pitstop.dev/task": call.task_path}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": args.namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "backoffLimit": args.backoff_limit,
            "activeDeadlineSeconds": max(1, int(args.timeout_seconds)),
            "template": {
                "metadata": {"labels": labels, "annotations": {**args.annotations, **annotations}},
                "spec": pod_spec,
            },
        },
    }


def _outcome(job: Obj) -> str | None:
    """ "succeeded" / "failed" once the Job has finished, else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return "succeeded" if cond["type"] == "Complete" else "failed"
    return None


def _pod_of(kube: Kube, namespace: str, name: str) -> Obj | None:
    """The Job's most recent pod."""
    for label in JOB_NAME_LABELS:
        pods = kube.list(pods_path(namespace), label_selector=f"{label}={name}")
        if pods:
            return max(pods, key=lambda p: str(meta(p).get("creationTimestamp", "")))
    return None


def _logs(kube: Kube, namespace: str, pod: Obj | None, lines: int) -> str:
    if pod is None or pod_phase(pod) == "Pending":
        return ""
    try:
        return kube.text(f"{pod_path(namespace, name_of(pod))}/log", tailLines=lines)
    except ApiStatus as exc:
        return f"[pitstop: the log of {name_of(pod)} could not be read: {exc.message}]"


def _events(kube: Kube, namespace: str, pod: Obj | None) -> list[Obj]:
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


def _delete(kube: Kube, namespace: str, name: str) -> None:
    try:
        kube.delete(job_path(namespace, name), {"propagationPolicy": "Background"})
    except ApiStatus as exc:
        if exc.status != 404:
            raise


@kube_module(JOB)
def run_job(call: ModuleCall, args: JobArgs) -> ModuleResult:
    node = node_name(call, args.node)
    kube = kube_for(call)
    name = job_name(args.name, call.run_id, call.task_path, node)
    data: dict[str, Any] = {"job": name, "namespace": args.namespace, "node": node}
    previous = first_details()
    if isinstance(previous, dict) and previous.get("result") and not call.check_mode:
        # An earlier attempt saw the Job finish and may have deleted it already.
        if not args.keep:
            _delete(kube, args.namespace, name)
        return ModuleResult.model_validate(previous["result"])
    existing = kube.get_or_none(job_path(args.namespace, name))
    if call.check_mode:
        body = job_body(name, node, args, call)
        if existing is None:
            kube.post(jobs_path(args.namespace), body, dry_run=True)  # the server validates it
        state = "exists already" if existing else "would be created"
        return ModuleResult(
            changed=existing is None,
            msg=f"would run Job {args.namespace}/{name} on {node} (image {args.image}); it {state}",
            data=data,
        )
    started = time.monotonic()
    created = existing is None
    job = (
        existing
        if existing is not None
        else kube.post(jobs_path(args.namespace), job_body(name, node, args, call))
    )
    deadline = Deadline(args.timeout_seconds)
    unschedulable_since: float | None = None
    while (outcome := _outcome(job)) is None:
        pod = _pod_of(kube, args.namespace, name)
        seen = diagnose(pod)
        unschedulable_since = (unschedulable_since or time.monotonic()) if seen.unschedulable else None
        stuck = (
            unschedulable_since is not None
            and time.monotonic() - unschedulable_since > args.unschedulable_seconds
        )
        if seen.terminal_reason or stuck or deadline.passed():
            told = diagnose(pod, _events(kube, args.namespace, pod))
            tail = _logs(kube, args.namespace, pod, args.log_lines)
            if not args.keep:
                _delete(kube, args.namespace, name)
            logs = f"; last log lines:\n{bound_text(tail, 4096)}" if tail else ""
            if seen.terminal_reason:
                fail(
                    ErrorType.PRECONDITION_FAILED,
                    f"Job {args.namespace}/{name} on {node} cannot run ({seen.terminal_reason}): "
                    f"{told}{logs}",
                    non_retryable=True,
                )
            if stuck:
                fail(
                    ErrorType.PRECONDITION_FAILED,
                    f"Job {args.namespace}/{name} on {node} was not scheduled within "
                    f"{args.unschedulable_seconds:g}s: {told}",
                    non_retryable=True,
                )
            fail(
                ErrorType.TIMEOUT,
                f"Job {args.namespace}/{name} on {node} did not finish within {deadline.elapsed():.0f}s: "
                f"{told}{logs}",
                non_retryable=True,
            )
        pause(min(args.poll_interval_seconds, max(deadline.remaining(), 0.0)), {"job": name})
        current = kube.get_or_none(job_path(args.namespace, name))
        if current is None:
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"Job {args.namespace}/{name} was deleted while pitstop waited for it",
            )
        job = current
    pod = _pod_of(kube, args.namespace, name)
    logs = _logs(kube, args.namespace, pod, args.log_lines)
    data.update(
        status=outcome, pod=name_of(pod) if pod else None, duration_s=round(time.monotonic() - started, 3)
    )
    why = f": {diagnose(pod, _events(kube, args.namespace, pod))}" if outcome == "failed" else ""
    result = ModuleResult(
        changed=created,
        failed=outcome == "failed",
        msg=f"Job {args.namespace}/{name} {outcome} on {node}{why}",
        rc=0 if outcome == "succeeded" else 1,
        stdout=bound_text(logs, LOG_BYTES),
        data=data,
    )
    beat({"result": result.model_dump(mode="json")})
    if not args.keep:
        _delete(kube, args.namespace, name)
    return result
