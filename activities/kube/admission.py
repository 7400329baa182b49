"""kube.stop_admission / kube.resume_admission: keep new work off the cluster (Kueue
ClusterQueues on Hold) or off one node (a NoSchedule taint where Kueue is absent), and put
back exactly what was there before."""

from __future__ import annotations

from typing import Any

from activities.kube.client import KUEUE_GROUP, Kube, cluster_queue_path
from activities.kube.common import kube_for, kube_module, node_name
from activities.kube.nodes import change_node, phrase
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.kube import taints as taint_lists
from pitstop.kube.annotations import (
    ADMISSION_HOLDS,
    ADMISSION_STOPPED_BY,
    MAINTENANCE_TAINT,
    PRIOR_STOP_POLICY,
)
from pitstop.kube.objects import Obj, annotations_of, name_of, node_taints
from pitstop.module_args.kube import (
    RESUME_ADMISSION,
    STOP_ADMISSION,
    ResumeAdmissionArgs,
    StopAdmissionArgs,
)


def _queues(kube: Kube, names: list[str]) -> list[Obj]:
    if not kube.serves_group(KUEUE_GROUP):
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"ClusterQueues {', '.join(names)} named, but {kube.name} does not serve the {KUEUE_GROUP} API "
            "(Kueue is not installed); leave cluster_queues empty to taint the node instead",
        )
    found: list[Obj] = []
    for name in names:
        queue = kube.get_or_none(cluster_queue_path(name))
        if queue is None:
            known = ", ".join(sorted(name_of(q) for q in kube.list(cluster_queue_path()))) or "none"
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"ClusterQueue {name!r} not found in {kube.name} (ClusterQueues: {known})",
            )
        found.append(queue)
    return found


def _policy(queue: Obj) -> str:
    return str((queue.get("spec") or {}).get("stopPolicy") or "None")


def _patch_queue(kube: Kube, queue: Obj, policy: str, notes: dict[str, Any]) -> None:
    kube.patch(
        cluster_queue_path(name_of(queue)),
        {
            "metadata": {
                "annotations": notes,
                "resourceVersion": (queue.get("metadata") or {}).get("resourceVersion"),
            },
            "spec": {"stopPolicy": policy},
        },
    )


@kube_module(STOP_ADMISSION)
def stop_admission(call: ModuleCall, args: StopAdmissionArgs) -> ModuleResult:
    kube = kube_for(call)
    if not args.cluster_queues:
        return _taint_node(call, kube, node_name(call, args.node))
    changed: list[str] = []
    token = hold_token(call)
    for queue in _queues(kube, args.cluster_queues):
        notes = annotations_of(queue)
        current = _policy(queue)
        ours = ADMISSION_STOPPED_BY in notes
        holds = holders(notes)
        if ours and current == args.stop_policy and token in holds:
            continue
        shown = (
            f"already {current}, recorded"
            if current == args.stop_policy
            else f"{current} -> {args.stop_policy}"
        )
        changed.append(f"{name_of(queue)} ({shown})")
        if call.check_mode:
            continue
        # The policy before pitstop's first stop is the one to restore, not our own Hold; every
        # node in flight holds the queue, and it is released when the last one resumes.
        prior = notes.get(PRIOR_STOP_POLICY, current) if ours else current
        _patch_queue(
            kube,
            queue,
            args.stop_policy,
            {
                PRIOR_STOP_POLICY: prior,
                ADMISSION_STOPPED_BY: call.run_id,
                ADMISSION_HOLDS: ",".join(sorted({*holds, token})),
            },
        )
    data = {"cluster_queues": args.cluster_queues, "changed": changed, "mode": "kueue"}
    if not changed:
        return ModuleResult(
            msg=f"ClusterQueues already {args.stop_policy}: {', '.join(args.cluster_queues)}", data=data
        )
    verb = "would set" if call.check_mode else "set"
    return ModuleResult(changed=True, msg=f"{verb} stopPolicy on {', '.join(changed)}", data=data)


@kube_module(RESUME_ADMISSION)
def resume_admission(call: ModuleCall, args: ResumeAdmissionArgs) -> ModuleResult:
    kube = kube_for(call)
    if not args.cluster_queues:
        return _untaint_node(call, kube, node_name(call, args.node))
    changed: list[str] = []
    untouched: list[str] = []
    held: list[str] = []
    token = hold_token(call)
    for queue in _queues(kube, args.cluster_queues):
        notes = annotations_of(queue)
        current = _policy(queue)
        others = holders(notes) - {token}
        if ADMISSION_STOPPED_BY in notes and others and not args.force:
            # Another node in flight still needs the queue held: only this node's hold goes.
            held.append(f"{name_of(queue)} (still held for {', '.join(sorted(others))})")
            if not call.check_mode and token in holders(notes):
                _patch_queue(kube, queue, current, {ADMISSION_HOLDS: ",".join(sorted(others))})
            continue
        if ADMISSION_STOPPED_BY in notes:
            target = notes.get(PRIOR_STOP_POLICY) or "None"
        elif args.force and current != "None":
            target = "None"
        else:
            if current != "None":
                untouched.append(f"{name_of(queue)} ({current}: not stopped by pitstop)")
            continue
        changed.append(f"{name_of(queue)} ({current} -> {target})")
        if not call.check_mode:
            _patch_queue(
                kube,
                queue,
                target,
                {PRIOR_STOP_POLICY: None, ADMISSION_STOPPED_BY: None, ADMISSION_HOLDS: None},
            )
    data = {
        "cluster_queues": args.cluster_queues,
        "changed": changed,
        "left": untouched,
        "held": held,
        "mode": "kueue",
    }
    msg = (
        f"{'would restore' if call.check_mode else 'restored'} stopPolicy on {', '.join(changed)}"
        if changed
        else ("nothing to resume")
    )
    if held:
        msg += f"; {'; '.join(held)}"
    if untouched:
        msg += f"; left as they are: {', '.join(untouched)} (force: true sets None)"
    return ModuleResult(changed=bool(changed), msg=msg, data=data)


def hold_token(call: ModuleCall) -> str:
    """Who holds a queue: this run on this host (each node in flight holds it once)."""
    return f"{call.run_id}/{call.host}"


def holders(notes: dict[str, str]) -> set[str]:
    raw = notes.get(ADMISSION_HOLDS)
    if raw is None:
        # Held before holds were counted: one holder, the run that stopped it.
        return {notes[ADMISSION_STOPPED_BY]} if ADMISSION_STOPPED_BY in notes else set()
    return {h for h in raw.split(",") if h}


def _taint_node(call: ModuleCall, kube: Kube, node: str) -> ModuleResult:
    def decide(obj: Obj) -> tuple[Obj | None, str]:
        new, changed = taint_lists.with_taint(node_taints(obj), MAINTENANCE_TAINT, None, "NoSchedule")
        if not changed:
            return None, f"{node} already has taint {MAINTENANCE_TAINT}:NoSchedule"
        return {"spec": {"taints": new}}, f"taint {node} with {MAINTENANCE_TAINT}:NoSchedule"

    _, changes, message = change_node(kube, node, decide, check_mode=call.check_mode)
    return ModuleResult(
        changed=changes,
        msg=phrase(message, changes, call.check_mode)
        + " (no ClusterQueue named: admission stopped on the node)",
        data={"node": node, "mode": "taint", "taint": f"{MAINTENANCE_TAINT}:NoSchedule"},
    )


def _untaint_node(call: ModuleCall, kube: Kube, node: str) -> ModuleResult:
    def decide(obj: Obj) -> tuple[Obj | None, str]:
        kept, removed = taint_lists.without_taint(node_taints(obj), MAINTENANCE_TAINT)
        if not removed:
            return None, f"{node} has no {MAINTENANCE_TAINT} taint"
        return {"spec": {"taints": kept}}, f"remove taint {MAINTENANCE_TAINT} from {node}"

    _, changes, message = change_node(kube, node, decide, check_mode=call.check_mode)
    return ModuleResult(
        changed=changes,
        msg=phrase(message, changes, call.check_mode),
        data={"node": node, "mode": "taint"},
    )
