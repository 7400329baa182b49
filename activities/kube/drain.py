"""kube.drain: evict a cordoned node's pods through the Eviction API, as `kubectl drain` does,
never past a PodDisruptionBudget and never a training pod without an acknowledged checkpoint.

Each round lists the node's pods and classifies them (`pitstop.kube.drain.plan_drain`);
refusals stop the drain before anything is evicted. Then every evictable pod is asked once:
201 evicted, 404/409 already gone, 429 a PDB said no (waited out: the round repeats after a
backoff that resets whenever an eviction succeeds), anything else is raised (5xx and
connection errors are retried by Temporal). Pods being deleted are waited for, never evicted
again, so a retried attempt — after a worker was killed mid-drain — evicts only what is still
running. Progress (evicted pods, PDB waits, start time) travels in the heartbeat details so
that the result of a resumed drain tells the whole story.
"""

from __future__ import annotations

import time
from typing import Any, NoReturn

from pydantic import BaseModel, Field

from activities.kube.client import ApiStatus, Kube, job_path, pdbs_path, pod_path, pods_path
from activities.kube.common import (
    Deadline,
    beat,
    first_details,
    kube_for,
    kube_module,
    node_name,
    pause,
)
from activities.kube.nodes import read_node
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.kube.budgets import budget_uses, pdb_from_refusal
from pitstop.kube.checkpoint import checkpoint_token, owning_job_key
from pitstop.kube.drain import DrainOptions, DrainPlan, plan_drain
from pitstop.kube.objects import Obj, key_of, name_of, namespace_of, node_is_unschedulable, uid_of
from pitstop.module_args.kube import DRAIN, DrainArgs

MULTIPLE_PDBS = "more than one PodDisruptionBudget"
TERMINATION_POLL_S = 1.0
EVICTED, GONE = "evicted", "gone"


class DrainProgress(BaseModel):
    """What a drain has done so far; heartbeated, and read back by a retried attempt."""

    started_at: float = Field(default_factory=time.time)
    evicted: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    pdb_waits: dict[str, int] = Field(default_factory=dict)
    attempts: int = 0

    @classmethod
    def resume(cls, details: Any) -> DrainProgress:
        if isinstance(details, dict):
            try:
                progress = cls.model_validate(details)
            except ValueError:
                progress = cls()
        else:
            progress = cls()
        progress.attempts += 1
        return progress


def owning_jobs(kube: Kube, pods: list[Obj]) -> dict[str, Obj]:
    """The Jobs owning the node's pods (their labels and annotations mark training jobs)."""
    jobs: dict[str, Obj] = {}
    for pod in pods:
        key = owning_job_key(pod)
        if key and key not in jobs:
            ns, _, name = key.partition("/")
            job = kube.get_or_none(job_path(ns, name))
            if job is not None:
                jobs[key] = job
    return jobs


def _plan(kube: Kube, node: str, options: DrainOptions) -> DrainPlan:
    pods = kube.list(pods_path(), field_selector=f"spec.nodeName={node}")
    return plan_drain(pods, owning_jobs(kube, pods), options)


def _budget_notes(kube: Kube, pods: list[Obj]) -> list[str]:
    namespaces = sorted({namespace_of(p) for p in pods})
    pdbs = [pdb for ns in namespaces for pdb in kube.list(pdbs_path(ns))]
    return [use.describe() for use in budget_uses(pods, pdbs)]


def _evict(kube: Kube, pod: Obj, args: DrainArgs) -> str:
    """Evict (or, with disable_eviction, delete) one pod: "evicted", "gone" (already), or the
    `namespace/name` of the PDB that refused."""
    ns, name = namespace_of(pod), name_of(pod)
    options: Obj = {"preconditions": {"uid": uid_of(pod)}}
    if args.grace_period_seconds is not None:
        options["gracePeriodSeconds"] = args.grace_period_seconds
    try:
        if args.disable_eviction:
            kube.delete(pod_path(ns, name), {"apiVersion": "v1", "kind": "DeleteOptions", **options})
        else:
            kube.post(
                f"{pod_path(ns, name)}/eviction",
                {
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": {"name": name, "namespace": ns},
                    "deleteOptions": options,
                },
            )
    except ApiStatus as exc:
        if exc.status in (404, 409):  # gone, or replaced by another pod of the same name
            return GONE
        if exc.status == 429:
            return pdb_from_refusal(ns, exc.causes, f"{ns}/<PDB of {name}>")
        if exc.status == 500 and MULTIPLE_PDBS in exc.message:
            fail(
                ErrorType.POLICY_VIOLATION,
                f"pod {ns}/{name} is covered by more than one PodDisruptionBudget, which the Eviction API "
                "refuses; fix the PDBs (one per pod) and run again",
            )
        raise
    return EVICTED


@kube_module(DRAIN)
def drain_node(call: ModuleCall, args: DrainArgs) -> ModuleResult:
    node = node_name(call, args.node)
    kube = kube_for(call)
    options = DrainOptions(
        ignore_daemonsets=args.ignore_daemonsets,
        delete_emptydir_data=args.delete_emptydir_data,
        evict_unmanaged=args.evict_unmanaged,
        pod_selector=args.pod_selector,
        checkpoint_token=checkpoint_token(call.run_id, node),
    )
    node_obj = read_node(kube, node)
    if call.check_mode:
        return _check(kube, node, node_obj, options, args)
    if not node_is_unschedulable(node_obj):
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"{node} is schedulable: cordon it first (kube.cordon records whether it already was), "
            "otherwise evicted pods may land on it again",
        )
    progress = DrainProgress.resume(first_details())
    deadline = Deadline()
    backoff = args.retry_interval_seconds
    removed = progress.deleted if args.disable_eviction else progress.evicted
    while True:
        plan = _plan(kube, node, options)
        if plan.refused:
            fail(ErrorType.POLICY_VIOLATION, plan.refusal_message(node))
        if plan.done:
            return _result(node, plan, progress, args)
        refused: dict[str, int] = {}
        for pod in plan.evict:
            pdb = _evict(kube, pod, args)
            if pdb == EVICTED:
                if key_of(pod) not in removed:
                    removed.append(key_of(pod))
            elif pdb != GONE:
                refused[pdb] = refused.get(pdb, 0) + 1
                progress.pdb_waits[pdb] = progress.pdb_waits.get(pdb, 0) + 1
            beat(progress.model_dump())
        if deadline.passed():
            _timed_out(node, plan, refused, len(removed))
        evicted_now = len(plan.evict) - sum(refused.values())
        if refused:
            # A PDB said no: wait for replacements to become ready. Back off while nothing moves.
            wait = args.retry_interval_seconds if evicted_now else backoff
            backoff = (
                args.retry_interval_seconds
                if evicted_now
                else min(backoff * 2, args.max_retry_interval_seconds)
            )
        elif plan.terminating:
            wait = min(args.retry_interval_seconds, TERMINATION_POLL_S)
        else:
            wait = 0.0
        pause(min(wait, max(deadline.remaining(), 0.0)), progress.model_dump())


def _timed_out(node: str, plan: DrainPlan, refused: dict[str, int], removed: int) -> NoReturn:
    left = (
        [f"{sum(refused.values())} pods refused by PodDisruptionBudgets ({', '.join(sorted(refused))})"]
        if refused
        else []
    )
    if plan.terminating:
        left.append(f"still terminating: {', '.join(key_of(p) for p in plan.terminating)}")
    fail(
        ErrorType.TIMEOUT,
        f"drain of {node} did not finish before the task's timeout: {'; '.join(left) or 'pods remain'}; "
        f"evicted so far: {removed}",
        non_retryable=True,
    )


def _result(node: str, plan: DrainPlan, progress: DrainProgress, args: DrainArgs) -> ModuleResult:
    removed = progress.deleted if args.disable_eviction else progress.evicted
    verb = "deleted" if args.disable_eviction else "evicted"
    stayed = sum(len(v) for k, v in plan.skipped.items() if k in ("daemonset", "mirror"))
    msg = f"{verb} {len(removed)} pods from {node}" if removed else f"{node} has no pods to evict"
    if progress.pdb_waits:
        msg += f"; waited on PDBs: {', '.join(f'{k} ({n}x)' for k, n in sorted(progress.pdb_waits.items()))}"
    if stayed:
        msg += f"; {stayed} DaemonSet/mirror pods stay"
    return ModuleResult(
        changed=bool(removed),
        msg=msg,
        data={
            "node": node,
            verb: list(removed),
            "pdb_waits": dict(progress.pdb_waits),
            "skipped": plan.skipped,
            "duration_s": round(time.time() - progress.started_at, 3),
            "attempts": progress.attempts,
        },
    )


def _check(kube: Kube, node: str, node_obj: Obj, options: DrainOptions, args: DrainArgs) -> ModuleResult:
    plan = _plan(kube, node, options)
    # In a plan, kube.wait_for_workloads has not asked for checkpoints yet: pods that speak the
    # protocol are not a refusal, they are evicted once they acknowledge.
    awaiting = plan.refused.pop("training-unacknowledged", [])
    if plan.refused:
        fail(ErrorType.POLICY_VIOLATION, plan.refusal_message(node))
    notes = _budget_notes(kube, plan.evict)
    verb = "delete" if args.disable_eviction else "evict"
    parts = [f"would {verb} {len(plan.evict) + len(awaiting)} pods from {node}"]
    if awaiting:
        parts.append(f"{len(awaiting)} training pods once their checkpoint is acknowledged")
    if plan.terminating:
        parts.append(f"{len(plan.terminating)} already terminating")
    parts.extend(notes)
    if not node_is_unschedulable(node_obj):
        parts.append("the node is not cordoned yet (kube.cordon must run first)")
    return ModuleResult(
        changed=bool(plan.evict or awaiting),
        msg="; ".join(parts),
        data={
            "node": node,
            "would_evict": [key_of(p) for p in plan.evict] + awaiting,
            "terminating": [key_of(p) for p in plan.terminating],
            "skipped": plan.skipped,
            "pdbs": notes,
        },
    )
