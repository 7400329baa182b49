"""Node state: kube.cordon, kube.uncordon, kube.taint, kube.untaint, kube.annotate,
kube.wait_node_ready.

Every change is a JSON merge patch carrying the resourceVersion it was computed from, so a
concurrent writer (the node controller adds and removes taints too) makes it fail with 409;
the change is then recomputed from a fresh read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.kube.client import ApiStatus, Kube, node_path, pods_path
from activities.kube.common import Deadline, kube_for, kube_module, node_name, pause
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.kube import taints as taint_lists
from pitstop.kube.annotations import (
    CORDON_ANNOTATIONS,
    CORDON_REASON,
    CORDONED_BY,
    MAINTENANCE_FAILED,
    NOT_READY_TAINT,
    UNREACHABLE_TAINT,
    WAS_UNSCHEDULABLE,
)
from pitstop.kube.objects import (
    Obj,
    annotations_of,
    labels_of,
    name_of,
    node_condition,
    node_is_ready,
    node_is_unschedulable,
    node_taints,
    pod_is_active,
    pod_is_ready,
)
from pitstop.kube.selectors import object_selector_matches
from pitstop.module_args.kube import (
    ANNOTATE,
    CORDON,
    TAINT,
    UNCORDON,
    UNTAINT,
    WAIT_NODE_READY,
    AnnotateArgs,
    CordonArgs,
    TaintArgs,
    UncordonArgs,
    UntaintArgs,
    WaitNodeReadyArgs,
)

CONFLICT_ATTEMPTS = 5
Decision = tuple[Obj | None, str]  # (merge patch or None for "nothing to do", message)


def read_node(kube: Kube, name: str) -> Obj:
    node = kube.get_or_none(node_path(name))
    if node is None:
        fail(ErrorType.PRECONDITION_FAILED, f"node {name!r} not found in {kube.name} ({kube.server})")
    return node


def change_node(
    kube: Kube, name: str, decide: Callable[[Obj], Decision], *, check_mode: bool
) -> tuple[Obj, bool, str]:
    """Read the node, let `decide` compute a patch, apply it (not in check mode).
    Returns (node as read or as patched, whether it changes, message)."""
    for _ in range(CONFLICT_ATTEMPTS):
        node = read_node(kube, name)
        patch, message = decide(node)
        if patch is None or check_mode:
            return node, patch is not None, message
        patch.setdefault("metadata", {})["resourceVersion"] = (node.get("metadata") or {}).get(
            "resourceVersion"
        )
        try:
            return kube.patch(node_path(name), patch), True, message
        except ApiStatus as exc:
            if exc.status != 409:
                raise
    fail(
        ErrorType.KUBE_API_ERROR,
        f"node {name} kept changing under us ({CONFLICT_ATTEMPTS} conflicting writes); will retry",
    )


def phrase(message: str, changes: bool, check_mode: bool) -> str:
    """`decide` speaks in the imperative ("cordon x"): "would cordon x" in check mode, "cordoned x"
    once done. Outcomes ("left cordoned: ...") and no-ops read the same either way."""
    if not changes or message.startswith("left "):
        return message
    if check_mode:
        return f"would {message}"
    verb, _, rest = message.partition(" ")
    past = {
        "cordon": "cordoned",
        "record": "recorded",
        "uncordon": "uncordoned",
        "remove": "removed",
        "taint": "tainted",
        "annotate": "annotated",
    }
    return f"{past.get(verb, verb + 'ed')} {rest}"


# --- cordon / uncordon ------------------------------------------------------------------------


@kube_module(CORDON)
def cordon(call: ModuleCall, args: CordonArgs) -> ModuleResult:
    name = node_name(call, args.node)
    kube = kube_for(call)

    def decide(node: Obj) -> Decision:
        notes = annotations_of(node)
        unschedulable = node_is_unschedulable(node)
        if CORDONED_BY in notes:
            if unschedulable:
                return None, f"{name} is already cordoned by pitstop (run {notes[CORDONED_BY]})"
            # Made schedulable behind pitstop's back: cordon again, keep the recorded prior state.
            again: dict[str, Any] = {CORDONED_BY: call.run_id}
            if args.reason:
                again[CORDON_REASON] = args.reason
            return {"spec": {"unschedulable": True}, "metadata": {"annotations": again}}, f"cordon {name}"
        notes_patch: dict[str, Any] = {
            CORDONED_BY: call.run_id,
            WAS_UNSCHEDULABLE: "true" if unschedulable else "false",
        }
        if args.reason:
            notes_patch[CORDON_REASON] = args.reason
        patch: Obj = {"metadata": {"annotations": notes_patch}}
        if unschedulable:
            return patch, (
                f"record that {name} was already unschedulable, so that kube.uncordon leaves it cordoned"
            )
        patch["spec"] = {"unschedulable": True}
        return patch, f"cordon {name}"

    node, changes, message = change_node(kube, name, decide, check_mode=call.check_mode)
    notes = annotations_of(node)
    return ModuleResult(
        changed=changes,
        msg=phrase(message, changes, call.check_mode),
        data={
            "node": name,
            "was_unschedulable": notes.get(
                WAS_UNSCHEDULABLE, "true" if node_is_unschedulable(node) else "false"
            )
            == "true",
            "cordoned_by": notes.get(CORDONED_BY, call.run_id),
        },
    )


@kube_module(UNCORDON)
def uncordon(call: ModuleCall, args: UncordonArgs) -> ModuleResult:
    name = node_name(call, args.node)
    kube = kube_for(call)
    left: dict[str, bool] = {"cordoned": False}

    def decide(node: Obj) -> Decision:
        notes = annotations_of(node)
        unschedulable = node_is_unschedulable(node)
        forget: dict[str, Any] = {k: None for k in CORDON_ANNOTATIONS if k in notes}
        left["cordoned"] = False
        if args.force:
            if not unschedulable and not forget:
                return None, f"{name} is schedulable"
            patch: Obj = {"spec": {"unschedulable": False}}
            if forget:
                patch["metadata"] = {"annotations": forget}
            return patch, f"uncordon {name} (force: true)"
        if notes.get(MAINTENANCE_FAILED) and unschedulable:
            left["cordoned"] = True
            return None, (
                f"left cordoned: {name} is marked {MAINTENANCE_FAILED}: {notes[MAINTENANCE_FAILED]} "
                "(force: true uncordons it)"
            )
        if CORDONED_BY not in notes:
            if not unschedulable:
                return None, f"{name} is schedulable"
            left["cordoned"] = True
            return None, (
                f"left cordoned: pitstop has no record of cordoning {name} (it was cordoned outside "
                "pitstop; force: true uncordons it)"
            )
        if notes.get(WAS_UNSCHEDULABLE) == "true":
            left["cordoned"] = True
            return {"metadata": {"annotations": forget}}, (
                f"left cordoned: it was unschedulable before pitstop cordoned it ({name})"
            )
        return {"spec": {"unschedulable": False}, "metadata": {"annotations": forget}}, f"uncordon {name}"

    node, changes, message = change_node(kube, name, decide, check_mode=call.check_mode)
    return ModuleResult(
        changed=changes,
        msg=phrase(message, changes, call.check_mode),
        data={"node": name, "left_cordoned": left["cordoned"], "unschedulable": node_is_unschedulable(node)},
    )


# --- taints -----------------------------------------------------------------------------------


@kube_module(TAINT)
def taint(call: ModuleCall, args: TaintArgs) -> ModuleResult:
    name = node_name(call, args.node)
    if args.effect == "NoExecute" and not args.allow_noexecute:
        fail(
            ErrorType.POLICY_VIOLATION,
            f"taint {args.key}:NoExecute on {name} refused: NoExecute evicts running pods at once, training "
            "jobs included, without PDBs or checkpoints; use NoSchedule (keeps new pods away), or set "
            "allow_noexecute: true",
        )
    kube = kube_for(call)
    wanted = taint_lists.describe({"key": args.key, "value": args.value, "effect": args.effect})

    def decide(node: Obj) -> Decision:
        new, changed = taint_lists.with_taint(node_taints(node), args.key, args.value, args.effect)
        if not changed:
            return None, f"{name} already has taint {wanted}"
        return {"spec": {"taints": new}}, f"taint {name} with {wanted}"

    _, changes, message = change_node(kube, name, decide, check_mode=call.check_mode)
    return ModuleResult(
        changed=changes, msg=phrase(message, changes, call.check_mode), data={"node": name, "taint": wanted}
    )


@kube_module(UNTAINT)
def untaint(call: ModuleCall, args: UntaintArgs) -> ModuleResult:
    name = node_name(call, args.node)
    kube = kube_for(call)
    gone: list[str] = []

    def decide(node: Obj) -> Decision:
        kept, removed = taint_lists.without_taint(node_taints(node), args.key, args.effect)
        gone[:] = [taint_lists.describe(t) for t in removed]
        if not removed:
            return None, f"{name} has no taint {args.key}{':' + args.effect if args.effect else ''}"
        return {"spec": {"taints": kept}}, f"remove {', '.join(gone)} from {name}"

    _, changes, message = change_node(kube, name, decide, check_mode=call.check_mode)
    return ModuleResult(
        changed=changes, msg=phrase(message, changes, call.check_mode), data={"node": name, "removed": gone}
    )


# --- annotations ------------------------------------------------------------------------------


@kube_module(ANNOTATE)
def annotate(call: ModuleCall, args: AnnotateArgs) -> ModuleResult:
    name = node_name(call, args.node)
    kube = kube_for(call)

    def decide(node: Obj) -> Decision:
        notes = annotations_of(node)
        patch = {
            k: v
            for k, v in args.annotations.items()
            if (v is None and k in notes) or (v is not None and notes.get(k) != v)
        }
        if not patch:
            return None, f"{name} already has these annotations"
        return {"metadata": {"annotations": patch}}, f"annotate {name}: {', '.join(sorted(patch))}"

    _, changes, message = change_node(kube, name, decide, check_mode=call.check_mode)
    return ModuleResult(changed=changes, msg=phrase(message, changes, call.check_mode), data={"node": name})


# --- readiness --------------------------------------------------------------------------------


def _readiness(node: Obj, allow_taints: bool) -> tuple[bool, str]:
    ready = node_condition(node, "Ready") or {}
    if not node_is_ready(node):
        detail = ready.get("message") or ready.get("reason") or "no Ready condition"
        return False, f"Ready={ready.get('status', 'Unknown')} ({detail})"
    blocking = [
        taint_lists.describe(t)
        for t in node_taints(node)
        if t.get("key") in (NOT_READY_TAINT, UNREACHABLE_TAINT)
    ]
    if blocking and not allow_taints:
        return False, f"Ready=True but still tainted {', '.join(blocking)}"
    return True, "Ready"


def _gpus_back(node: Obj, resource: str | None) -> tuple[bool, str]:
    """After a reboot the kubelet advertises no device-plugin GPUs until the plugin registers
    them again: allocatable < capacity. A node whose capacity has no such resource passes."""
    if resource is None:
        return True, ""
    status = node.get("status") or {}
    capacity = _count((status.get("capacity") or {}).get(resource))
    if capacity is None:
        return True, ""
    allocatable = _count((status.get("allocatable") or {}).get(resource)) or 0
    if allocatable < capacity:
        return (
            False,
            f"Ready, but {resource} allocatable {allocatable} of {capacity} "
            "(the device plugin has not re-registered them)",
        )
    return True, f"{allocatable} {resource} allocatable"


def _count(value: Any) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _validator_ready(kube: Kube, node: str, validator: str | None) -> tuple[bool, str]:
    """The validator DaemonSet's pod on the node is Ready (skipped without the DaemonSet)."""
    if validator is None:
        return True, ""
    namespace, name = validator.split("/", 1)
    ds = kube.get_or_none(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")
    if ds is None:
        return True, f"no DaemonSet {validator}"
    selector = (ds.get("spec") or {}).get("selector")
    pods = [
        p
        for p in kube.list(pods_path(namespace), field_selector=f"spec.nodeName={node}")
        if pod_is_active(p) and object_selector_matches(selector, labels_of(p))
    ]
    if not pods:
        return False, f"Ready, but no {validator} pod on the node yet"
    if not any(pod_is_ready(p) for p in pods):
        return False, f"Ready, but {validator} pod {name_of(pods[0])} is not Ready"
    return True, f"{validator} Ready"


@kube_module(WAIT_NODE_READY)
def wait_node_ready(call: ModuleCall, args: WaitNodeReadyArgs) -> ModuleResult:
    name = node_name(call, args.node)
    kube = kube_for(call)
    deadline = Deadline(args.timeout_seconds)
    while True:
        node = kube.get_or_none(node_path(name))
        ok, state = _readiness(node, args.allow_not_ready_taints) if node else (False, "not registered")
        notes: list[str] = []
        if ok and node is not None:
            ok, detail = _gpus_back(node, args.gpu_resource)
            state = detail if not ok else state
            notes += [detail] if ok and detail else []
        if ok:
            ok, detail = _validator_ready(kube, name, args.validator)
            state = detail if not ok else state
            notes += [detail] if ok and detail else []
        if ok:
            return ModuleResult(
                msg=f"{name} is Ready" + (f" ({'; '.join(notes)})" if notes else ""),
                data={"node": name, "waited_s": round(deadline.elapsed(), 3)},
            )
        if call.check_mode:
            return ModuleResult(
                msg=f"would wait for {name} to become Ready (now: {state})", data={"node": name}
            )
        if deadline.passed():
            fail(
                ErrorType.TIMEOUT,
                f"{name} is not Ready after {deadline.elapsed():.0f}s: {state}",
                non_retryable=True,
            )
        pause(min(args.poll_interval_seconds, max(deadline.remaining(), 0.0)), {"node": name, "state": state})
