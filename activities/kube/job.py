"""kube.job: run a Job pinned to the node (validation: DCGM diag, NCCL tests...), wait for it
(`activities.kube.job_wait`, the wait every probe Job shares), return the tail of its pod's log.

The Job's name is `<prefix>-<hash of run id, task path, node>`: a retried attempt finds the
Job its predecessor created and keeps waiting for it instead of starting a second one. The
outcome is heartbeated before the Job is deleted, so an attempt retried after the deletion
returns that outcome rather than running the Job again.
"""

from __future__ import annotations

import time
from typing import Any

from activities.kube.client import job_path, jobs_path
from activities.kube.common import beat, first_details, kube_for, kube_module, node_name
from activities.kube.job_wait import delete_job, wait_for_job
from pitstop.contracts import ModuleCall, ModuleResult, bound_text
from pitstop.errors import ErrorType, fail
from pitstop.kube.annotations import (
    HOSTNAME_LABEL,
    MAINTENANCE_TAINT,
    MANAGED_BY_LABEL,
    UNSCHEDULABLE_TAINT,
)
from pitstop.kube.names import job_name
from pitstop.kube.objects import Obj, name_of
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
    volumes = [
        {"name": f"config-{i}", "configMap": {"name": mount.name}} for i, mount in enumerate(args.config_maps)
    ]
    if volumes:
        container["volumeMounts"] = [
            {"name": f"config-{i}", "mountPath": mount.mount_path, "readOnly": True}
            for i, mount in enumerate(args.config_maps)
        ]
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
    if volumes:
        pod_spec["volumes"] = volumes
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
            delete_job(kube, args.namespace, name)
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
    end = wait_for_job(
        kube,
        args.namespace,
        name,
        job,
        timeout_seconds=args.timeout_seconds,
        poll_interval_seconds=args.poll_interval_seconds,
        unschedulable_seconds=args.unschedulable_seconds,
        log_lines=args.log_lines,
        heartbeat={"job": name},
    )
    if not end.finished:
        if not args.keep:
            delete_job(kube, args.namespace, name)
        fail(
            ErrorType.TIMEOUT if end.status == "timed_out" else ErrorType.PRECONDITION_FAILED,
            end.describe(node),
            non_retryable=True,
        )
    data.update(
        status=end.status,
        pod=name_of(end.pod) if end.pod else None,
        duration_s=round(time.monotonic() - started, 3),
    )
    result = ModuleResult(
        changed=created,
        failed=not end.succeeded,
        msg=end.describe(node),
        rc=0 if end.succeeded else 1,
        stdout=bound_text(end.log, LOG_BYTES),
        data=data,
    )
    beat({"result": result.model_dump(mode="json")})
    if not args.keep:
        delete_job(kube, args.namespace, name)
    return result
