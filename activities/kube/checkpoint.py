"""kube.wait_for_workloads: the checkpoint protocol (see `WaitForWorkloadsArgs` and
`pitstop.kube.checkpoint`). Ask every training workload affected by the node — each member
of a gang with a pod on it, wherever that member runs — to checkpoint, then wait until each
acknowledges the token or finishes."""

from __future__ import annotations

from activities.kube.client import ApiStatus, Kube, job_path, pod_path, pods_path
from activities.kube.common import Deadline, kube_for, kube_module, node_name, pause
from activities.kube.drain import owning_jobs
from activities.kube.suspend import attach_frameworks, suspend_jobs
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.kube import selectors
from pitstop.kube.annotations import CHECKPOINT_REQUESTED, GANG_LABEL, MIRROR_POD_ANNOTATION
from pitstop.kube.checkpoint import Workload, checkpoint_token, owning_job_key
from pitstop.kube.drain import NEVER_FORCE
from pitstop.kube.objects import (
    annotations_of,
    is_daemonset_pod,
    key_of,
    labels_of,
    name_of,
    namespace_of,
    pod_is_active,
)
from pitstop.module_args.kube import WAIT_FOR_WORKLOADS, WaitForWorkloadsArgs


def _affected(kube: Kube, node: str, args: WaitForWorkloadsArgs) -> list[Workload]:
    pods = [
        p
        for p in kube.list(pods_path(), field_selector=f"spec.nodeName={node}")
        if pod_is_active(p) and not is_daemonset_pod(p) and MIRROR_POD_ANNOTATION not in annotations_of(p)
    ]
    jobs = owning_jobs(kube, pods)
    chosen: dict[str, Workload] = {}
    for pod in pods:
        job_key = owning_job_key(pod)
        work = Workload(pod, jobs.get(job_key) if job_key else None)
        wanted = (
            selectors.matches(args.pod_selector, labels_of(pod)) if args.pod_selector else work.is_training
        )
        if wanted:
            chosen[key_of(pod)] = work
    # A gang is one job: a node hosting one member affects all of them.
    gangs = sorted({(namespace_of(w.pod), w.gang) for w in chosen.values() if w.gang})
    for ns, gang in gangs:
        members = [
            p for p in kube.list(pods_path(ns), label_selector=f"{GANG_LABEL}={gang}") if pod_is_active(p)
        ]
        member_jobs = owning_jobs(kube, members)
        for pod in members:
            if key_of(pod) not in chosen:
                job_key = owning_job_key(pod)
                chosen[key_of(pod)] = Workload(pod, member_jobs.get(job_key) if job_key else None)
    # Pods a real operator groups (a JobSet, a PyTorchJob, a Ray cluster) are one job too.
    groups = sorted(
        {
            (namespace_of(w.pod), found.selector)
            for w in list(chosen.values())
            if (found := w.recognition) is not None and found.selector
        }
    )
    for ns, selector in groups:
        siblings = [p for p in kube.list(pods_path(ns), label_selector=selector) if pod_is_active(p)]
        sibling_jobs = owning_jobs(kube, siblings)
        for pod in siblings:
            if key_of(pod) not in chosen:
                job_key = owning_job_key(pod)
                chosen[key_of(pod)] = Workload(pod, sibling_jobs.get(job_key) if job_key else None)
    return attach_frameworks(kube, [chosen[k] for k in sorted(chosen)])


def _request(kube: Kube, workloads: list[Workload], token: str) -> list[str]:
    """Write the token on each holder not yet asked for it; the objects asked."""
    asked: list[str] = []
    seen: set[str] = set()
    for work in workloads:
        holder = work.holder_object()
        if holder is None or work.holder == "framework" or work.requested(token) or work.answered(token):
            continue
        if work.holder == "job":
            path = job_path(namespace_of(holder), name_of(holder))
            label = f"job {key_of(holder)}"
        else:
            path = pod_path(namespace_of(holder), name_of(holder))
            label = f"pod {key_of(holder)}"
        if label in seen:
            continue
        seen.add(label)
        try:
            kube.patch(path, {"metadata": {"annotations": {CHECKPOINT_REQUESTED: token}}})
        except ApiStatus as exc:
            # A member listed a moment ago is gone (another node's drain evicted it after its
            # checkpoint, or it finished): nothing of it is left to checkpoint.
            if exc.status != 404:
                raise
            continue
        asked.append(label)
    return asked


def _refresh(kube: Kube, work: Workload) -> Workload | None:
    """The workload as it is now; None once its pod has finished or is gone."""
    pod = kube.get_or_none(pod_path(namespace_of(work.pod), name_of(work.pod)))
    if pod is None or not pod_is_active(pod):
        return None
    job = work.job
    if job is not None and work.holder == "job":
        job = kube.get_or_none(job_path(namespace_of(job), name_of(job))) or job
    # A suspended job's answer is its pods going away: its operator's object is not read again.
    return Workload(pod, job, work.framework)


@kube_module(WAIT_FOR_WORKLOADS)
def wait_for_workloads(call: ModuleCall, args: WaitForWorkloadsArgs) -> ModuleResult:
    node = node_name(call, args.node)
    kube = kube_for(call)
    token = args.token or checkpoint_token(call.run_id, node)
    deadline = Deadline(args.timeout_seconds)
    workloads = _affected(kube, node, args)
    if not workloads:
        what = f"pods matching {args.pod_selector!r}" if args.pod_selector else "training workloads"
        return ModuleResult(msg=f"no {what} on {node}", data={"node": node, "token": token, "workloads": []})
    silent = [w for w in workloads if w.holder is None]
    if silent and args.on_no_protocol == "fail":
        names = ", ".join(f"{key_of(w.pod)} ({w.why()})" for w in silent)
        fail(
            ErrorType.POLICY_VIOLATION,
            f"workloads on {node} without a checkpoint protocol: {names} — {NEVER_FORCE} "
            "(or set on_no_protocol: wait_for_completion to wait for them to finish)",
        )
    gangs = sorted({f"{namespace_of(w.pod)}/{w.gang}" for w in workloads if w.gang})
    data: dict[str, object] = {
        "node": node,
        "token": token,
        "workloads": [key_of(w.pod) for w in workloads],
        "gangs": gangs,
        "without_protocol": [key_of(w.pod) for w in silent],
    }
    suspending = sorted(
        {
            f"{w.framework.get('kind')} {key_of(w.framework)}"
            for w in workloads
            if w.holder == "framework" and w.framework is not None
        }
    )
    data["suspend"] = suspending
    if call.check_mode:
        to_ask = [w for w in workloads if w.holder not in (None, "framework") and not w.answered(token)]
        msg = f"would request checkpoint {token} from {len(to_ask)} workloads"
        if suspending:
            msg += f"; would suspend {', '.join(suspending)} through their operators"
        if gangs:
            msg += f" (gangs: {', '.join(gangs)})"
        if silent:
            msg += f"; would wait for {len(silent)} pods without the protocol to finish"
        return ModuleResult(changed=bool(to_ask or suspending), msg=msg, data=data)
    asked = [*_request(kube, workloads, token), *suspend_jobs(kube, node, workloads, token)]
    pending = workloads
    while True:
        current = [(w, _refresh(kube, w)) for w in pending]
        pending = [now for _, now in current if now is not None and not (now.holder and now.satisfied(token))]
        if not pending:
            break
        if deadline.passed():
            fail(
                ErrorType.TIMEOUT,
                f"after {deadline.elapsed():.0f}s, workloads on {node} have neither acknowledged checkpoint "
                f"{token} nor finished: {', '.join(key_of(w.pod) for w in pending)}",
                non_retryable=True,
            )
        pause(
            min(args.poll_interval_seconds, max(deadline.remaining(), 0.0)),
            {"node": node, "pending": [key_of(w.pod) for w in pending]},
        )
    msg = f"{len(workloads)} workloads acknowledged checkpoint {token} or finished"
    if gangs:
        msg += f" (gangs: {', '.join(gangs)})"
    return ModuleResult(
        changed=bool(asked),
        msg=msg,
        data={**data, "requested": asked, "waited_s": round(deadline.elapsed(), 3)},
    )
