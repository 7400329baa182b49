"""Which pods a drain evicts, waits for, skips or refuses — decided before evicting anything.

Rules, in order, for each pod on the node (kubectl drain's, plus pitstop's training rule):
  mirror/static pods (annotation kubernetes.io/config.mirror)   skipped: the kubelet owns them
  finished pods (Succeeded/Failed)                               skipped: they hold nothing
  pods not matching `pod_selector`                               skipped
  DaemonSet pods                                                 skipped with ignore_daemonsets,
                                                                 refused otherwise
  pods being deleted                                             waited for, never evicted again
  training pods (see pitstop.kube.checkpoint and                 refused unless their checkpoint
  pitstop.kube.training: real operators' marks, and GPU pods     is acknowledged; the refusal
  that are not restartable serving)                              says why each is training
  pods without a controller                                      refused unless evict_unmanaged
  pods with emptyDir volumes                                     refused unless delete_emptydir_data
  everything else                                                evicted
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pitstop.kube import selectors
from pitstop.kube.annotations import MIRROR_POD_ANNOTATION
from pitstop.kube.checkpoint import Workload, owning_job_key
from pitstop.kube.objects import (
    Obj,
    annotations_of,
    controller_of,
    is_daemonset_pod,
    is_terminating,
    key_of,
    labels_of,
    pod_is_finished,
    uses_empty_dir,
)

NEVER_FORCE = (
    "a long training job without a checkpoint protocol is never force-drained: that becomes a human decision"
)

# Why a pod blocks the drain, and what to do about it (shown in the PolicyViolation).
REFUSALS: dict[str, str] = {
    "training-no-protocol": f"training pods without a checkpoint protocol ({NEVER_FORCE})",
    "training-unacknowledged": (
        "training pods whose checkpoint is not acknowledged (run kube.wait_for_workloads first)"
    ),
    "daemonset": "DaemonSet pods (set ignore_daemonsets: true to leave them)",
    "unmanaged": "pods without a controller, which nothing would recreate (set evict_unmanaged: true)",
    "emptydir": "pods with emptyDir data that eviction deletes (set delete_emptydir_data: true)",
}


@dataclass(frozen=True)
class DrainOptions:
    ignore_daemonsets: bool = True
    delete_emptydir_data: bool = False
    evict_unmanaged: bool = False
    pod_selector: str | None = None
    # The checkpoint token this drain's kube.wait_for_workloads asked for (run id / node).
    checkpoint_token: str | None = None


@dataclass
class DrainPlan:
    evict: list[Obj] = field(default_factory=list)
    terminating: list[Obj] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)
    refused: dict[str, list[str]] = field(default_factory=dict)
    # Why a refused training pod counts as training (pod key -> e.g. "JobSet: label ...").
    why: dict[str, str] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return not self.evict and not self.terminating

    def refusal_message(self, node: str) -> str:
        def named(pod: str) -> str:
            return f"{pod} ({self.why[pod]})" if pod in self.why else pod

        parts = [
            f"{REFUSALS[reason]}: {', '.join(named(p) for p in pods)}"
            for reason, pods in self.refused.items()
        ]
        return f"drain of {node} refused before evicting anything: " + "; ".join(parts)


def plan_drain(pods: Iterable[Obj], jobs: Mapping[str, Obj], options: DrainOptions) -> DrainPlan:
    """Classify the node's pods. `jobs` maps `namespace/name` to the Jobs owning some of them."""
    plan = DrainPlan()

    def note(bucket: dict[str, list[str]], reason: str, pod: Obj) -> None:
        bucket.setdefault(reason, []).append(key_of(pod))

    for pod in sorted(pods, key=key_of):
        if MIRROR_POD_ANNOTATION in annotations_of(pod):
            note(plan.skipped, "mirror", pod)
        elif pod_is_finished(pod):
            note(plan.skipped, "finished", pod)
        elif not selectors.matches(options.pod_selector, labels_of(pod)):
            note(plan.skipped, "not selected", pod)
        elif is_daemonset_pod(pod):
            note(plan.skipped if options.ignore_daemonsets else plan.refused, "daemonset", pod)
        elif is_terminating(pod):
            plan.terminating.append(pod)
        else:
            reason = _refusal(pod, jobs, options)
            if reason is None:
                plan.evict.append(pod)
            else:
                note(plan.refused, reason, pod)
                if reason.startswith("training"):
                    job_key = owning_job_key(pod)
                    plan.why[key_of(pod)] = Workload(pod, jobs.get(job_key) if job_key else None).why()
    return plan


def _refusal(pod: Obj, jobs: Mapping[str, Obj], options: DrainOptions) -> str | None:
    job_key = owning_job_key(pod)
    workload = Workload(pod, jobs.get(job_key) if job_key else None)
    state = workload.state()
    if state == "no-protocol":
        return "training-no-protocol"
    if state == "requested" and options.checkpoint_token and workload.answered(options.checkpoint_token):
        # Our own checkpoint was taken; a later request pending on the same job comes from
        # another node of the gang in flight at the same time, and protects that node's drain.
        state = "acknowledged"
    if state in ("not-requested", "requested"):
        return "training-unacknowledged"
    if controller_of(pod) is None and not options.evict_unmanaged:
        return "unmanaged"
    if uses_empty_dir(pod) and not options.delete_emptydir_data:
        return "emptydir"
    return None
