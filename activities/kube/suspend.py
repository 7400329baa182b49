"""The checkpoint protocol `suspend` (`pitstop.kube.suspend`): suspend whole training jobs
through their operators for a node's maintenance, and `kube.resume_workloads` to give them
back. Both are idempotent and keep their records in the cluster (on the node and on the
framework object), so a retried or restarted attempt carries on from what is there."""

from __future__ import annotations

from collections.abc import Iterable

from activities.kube.client import ApiStatus, Kube, api_base, namespaced, node_path
from activities.kube.common import kube_for, kube_module, node_name
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.kube.annotations import SUSPENDED_FOR, SUSPENDED_WORKLOADS
from pitstop.kube.checkpoint import Workload, checkpoint_token, framework_ref
from pitstop.kube.objects import (
    Obj,
    annotations_of,
    controller_of,
    is_terminating,
    meta,
    name_of,
    namespace_of,
)
from pitstop.kube.suspend import (
    FrameworkRef,
    describe_suspended,
    holds_of,
    kueue_managed,
    read_refs,
    suspend_field,
    suspend_patch,
    suspendable,
)
from pitstop.module_args.kube import RESUME_WORKLOADS, ResumeWorkloadsArgs

KUEUE_API = "/apis/kueue.x-k8s.io/v1beta1"
KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"  # Kueue's label on a Workload: the uid of its job
CONFLICT_ATTEMPTS = 8  # another node of the same job in flight wrote the holds meanwhile


def framework_path(ref: FrameworkRef) -> str:
    return namespaced(api_base(ref.api_version), ref.spec.plural, ref.namespace, ref.name)


def attach_frameworks(kube: Kube, workloads: Iterable[Workload]) -> list[Workload]:
    """Each workload with its operator's object, when one that can be suspended controls it
    (read once per object). The object must be the one the ownerReference names (same uid: a
    pod cannot point pitstop at someone else's job by name), and a JobSet or RayCluster that a
    TrainJob or RayJob controls gives way to that owner, whose controller would undo a suspend
    written on its child."""
    cache: dict[FrameworkRef, Obj | None] = {}
    out: list[Workload] = []
    for work in workloads:
        ref = framework_ref(work.pod, work.job)
        if ref is None:
            out.append(work)
            continue
        if ref not in cache:
            cache[ref] = _top(kube, ref)
        out.append(Workload(work.pod, work.job, cache[ref]))
    return out


def _top(kube: Kube, ref: FrameworkRef) -> Obj | None:
    obj = _read(kube, ref)
    parent = controller_of(obj) if obj is not None else None
    if obj is None or parent is None:
        return obj
    api_version, kind = str(parent.get("apiVersion") or ""), str(parent.get("kind") or "")
    if suspendable(api_version, kind) is None:
        return obj
    up = FrameworkRef(api_version, kind, ref.namespace, str(parent.get("name")), str(parent.get("uid") or ""))
    return _read(kube, up)


def _read(kube: Kube, ref: FrameworkRef) -> Obj | None:
    obj = kube.get_or_none(framework_path(ref))
    if obj is not None and ref.uid and meta(obj).get("uid") != ref.uid:
        return None  # a namesake, not the object the ownerReference names
    return obj


def _ref_of(work: Workload) -> FrameworkRef:
    obj = work.framework
    assert obj is not None  # a framework holder always has one
    return FrameworkRef(str(obj.get("apiVersion")), str(obj.get("kind")), namespace_of(obj), name_of(obj))


def _workload_of(kube: Kube, ref: FrameworkRef, obj: Obj) -> Obj:
    """The Kueue Workload admitting a Kueue-managed job: found by the `kueue.x-k8s.io/job-uid`
    label Kueue puts on it (its name carries a hash that is Kueue's own), controlled by the
    job itself and not being deleted; anything else is refused rather than guessed."""
    uid = str(meta(obj).get("uid") or "")
    listed = kube.list(
        namespaced(KUEUE_API, "workloads", ref.namespace), label_selector=f"{KUEUE_JOB_UID}={uid}"
    )
    found = [w for w in listed if (controller_of(w) or {}).get("uid") == uid and not is_terminating(w)]
    if len(found) != 1:
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"{ref.shown} is queued by Kueue but "
            + ("has no Workload" if not found else f"has {len(found)} Workloads")
            + f" controlled by it (label {KUEUE_JOB_UID}={uid}): is Kueue's controller running?",
        )
    return found[0]


def _stopped(kube: Kube, ref: FrameworkRef, obj: Obj) -> tuple[bool, Obj | None]:
    """Whether the job is stopped, and its Workload when Kueue admits it: Kueue owns the job's
    `suspend`, so such a job is stopped through its Workload (`spec.active: false`, Kueue's
    deactivation: it evicts the job and requeues it when made active again)."""
    if not kueue_managed(obj):
        return suspend_field(obj, ref.spec), None
    workload = _workload_of(kube, ref, obj)
    return (workload.get("spec") or {}).get("active") is False, workload


def _set_active(kube: Kube, workload: Obj, active: bool, *, dry_run: bool = False) -> None:
    path = namespaced(KUEUE_API, "workloads", namespace_of(workload), name_of(workload))
    kube.patch(path, {"spec": {"active": active}}, dry_run=dry_run)


def _patch_holds(
    kube: Kube, ref: FrameworkRef, change: str, token: str, node: str
) -> tuple[Obj | None, bool]:
    """Add (`change` "hold") or drop ("release") this node's hold on the job, stopping it on
    the first hold and starting it again when the last one goes. The job as written (None if it
    is gone) and whether pitstop stopped or started it.

    A release drops every hold of this node (`*/<node>`), so a hold an aborted earlier run left
    is given back by the next run on the node instead of keeping the job stopped for ever.

    A plain job's holds and suspend field change in one patch. For a Kueue-managed job the
    Workload is a second object, so the order makes a retry finish what an interrupted attempt
    began: the hold is written before the Workload is deactivated (a held job is always made
    inactive), and the Workload is reactivated before the last hold is dropped (and made
    inactive again if another node's hold arrived meanwhile)."""
    path = framework_path(ref)
    for _ in range(CONFLICT_ATTEMPTS):
        obj = kube.get_or_none(path)
        if obj is None:
            return None, False
        holds = holds_of(obj)
        ours = {h for h in holds if h == token or h.endswith(f"/{node}")}
        if change == "release" and not ours:
            return obj, False  # not ours: nothing read beyond the job (no Kueue lookups)
        stopped, workload = _stopped(kube, ref, obj)
        if change == "hold":
            if token in holds:
                if workload is not None and not stopped:
                    _set_active(kube, workload, False)  # an attempt cut short after its hold
                    return obj, True
                return obj, False
            if stopped and not holds:
                return obj, False  # its owner (or someone else) stopped it: not ours to resume
            remaining, flip = holds | {token}, not stopped
        else:
            remaining = holds - ours
            # The last hold going means "give it back", even if an earlier attempt of ours
            # already reactivated the Workload before it was cut short (or met a conflict).
            flip = not remaining
            if workload is not None and flip and stopped:
                _set_active(kube, workload, True)
            elif workload is not None and remaining and not stopped:
                _set_active(kube, workload, False)  # another node's hold came in meanwhile
        patch: Obj = {
            "metadata": {
                "resourceVersion": meta(obj).get("resourceVersion"),
                "annotations": {SUSPENDED_FOR: ",".join(sorted(remaining)) or None},
            }
        }
        if flip and workload is None and stopped == (change == "release"):
            patch.update(suspend_patch(ref.spec, change == "hold"))
        try:
            written = kube.patch(path, patch)
        except ApiStatus as exc:
            if exc.status == 404:
                return None, False
            if exc.status != 409:
                raise
            continue
        if flip and change == "hold":
            if workload is not None:
                _set_active(kube, workload, False)
            elif not suspend_field(written, ref.spec):
                # The apiserver dropped the field: a CRD from before the operator could suspend.
                fail(
                    ErrorType.PRECONDITION_FAILED,
                    f"{ref.shown} did not keep {'.'.join(ref.spec.field)}: true (its CRD prunes the "
                    "field; an operator release before suspend support?) - it cannot be suspended",
                )
        return written, flip
    fail(
        ErrorType.KUBE_API_ERROR,
        f"{ref.shown} kept changing while pitstop wrote its suspend hold ({CONFLICT_ATTEMPTS} conflicts)",
        non_retryable=False,
    )


def _record_on_node(kube: Kube, node: str, refs: set[FrameworkRef], *, add: bool) -> None:
    """The node's list of what its maintenance suspended. Only this node's run writes it, and a
    merge patch of one annotation leaves the others alone; entries pitstop cannot read are kept
    as they are (reported by the resume, never dropped unseen)."""
    current, bad = read_refs(annotations_of(kube.get(node_path(node))).get(SUSPENDED_WORKLOADS))
    wanted = set(current) | refs if add else set(current) - refs
    if wanted != set(current):
        text = ",".join([*(str(r) for r in sorted(wanted)), *bad]) or None
        kube.patch(node_path(node), {"metadata": {"annotations": {SUSPENDED_WORKLOADS: text}}})


def _preflight(kube: Kube, refs: set[FrameworkRef], token: str) -> None:
    """Every read, and every write as a server-side dry run, before the first real write: a
    refusal (RBAC, an admission webhook, no Workload) stops the suspension with nothing done."""
    for ref in sorted(refs):
        obj = kube.get_or_none(framework_path(ref))
        if obj is None:
            continue
        _, workload = _stopped(kube, ref, obj)
        kube.patch(framework_path(ref), {"metadata": {"annotations": {SUSPENDED_FOR: token}}}, dry_run=True)
        if workload is not None:
            _set_active(kube, workload, False, dry_run=True)


def suspend_jobs(kube: Kube, node: str, workloads: list[Workload], token: str) -> list[str]:
    """Suspend every job of a framework holder (recorded on the node first); the jobs asked.

    The node's record is never taken back on an error: a PATCH whose answer was lost may have
    been applied, and the job's pods then no longer show on the node for a retry to find it.
    A record without a hold costs nothing (the resume skips it)."""
    refs = {_ref_of(w) for w in workloads if w.holder == "framework"}
    if not refs:
        return []
    _preflight(kube, refs, token)
    _record_on_node(kube, node, refs, add=True)
    asked: list[str] = []
    for ref in sorted(refs):
        _, flipped = _patch_holds(kube, ref, "hold", token, node)
        if flipped:
            asked.append(f"suspended {ref.shown}")
    return asked


@kube_module(RESUME_WORKLOADS)
def resume_workloads(call: ModuleCall, args: ResumeWorkloadsArgs) -> ModuleResult:
    node = node_name(call, args.node)
    kube = kube_for(call)
    token = args.token or checkpoint_token(call.run_id, node)
    refs, bad = read_refs(annotations_of(kube.get(node_path(node))).get(SUSPENDED_WORKLOADS))
    data: dict[str, object] = {
        "node": node,
        "token": token,
        "workloads": [str(r) for r in refs],
        "unreadable": bad,
    }
    ignored = f"; ignored entries that name no suspendable object: {', '.join(bad)}" if bad else ""
    if not refs:
        return ModuleResult(msg=f"no training job suspended for {node}{ignored}", data=data)
    if call.check_mode:
        return ModuleResult(
            changed=True,
            msg=f"would release {node}'s hold on {', '.join(r.shown for r in refs)}{ignored}",
            data=data,
        )
    resumed: list[str] = []
    held: list[str] = []
    gone: list[str] = []
    for ref in refs:
        obj, flipped = _patch_holds(kube, ref, "release", token, node)
        if obj is None:
            gone.append(ref.shown)
        elif flipped:
            resumed.append(ref.shown)
        elif others := sorted(holds_of(obj)):
            held.append(
                f"{ref.shown} ({describe_suspended(obj, ref.spec)}; still held by {', '.join(others)})"
            )
        elif _owner_stopped(kube, ref, obj):
            held.append(f"{ref.shown} (suspended by its owner: left suspended)")
    _record_on_node(kube, node, set(refs), add=False)
    parts = []
    if resumed:
        parts.append(f"resumed {', '.join(resumed)}")
    if held:
        parts.append(f"left suspended {', '.join(held)}")
    if gone:
        parts.append(f"gone: {', '.join(gone)}")
    return ModuleResult(
        changed=bool(resumed),
        msg=("; ".join(parts) or f"nothing of {node}'s to resume") + ignored,
        data={**data, "resumed": resumed, "left_suspended": held, "gone": gone},
    )


def _owner_stopped(kube: Kube, ref: FrameworkRef, obj: Obj) -> bool:
    """Whether a job pitstop holds no more is stopped by someone else (for the report only: a
    refused Kueue lookup makes it unknown, not a failure of the resume)."""
    try:
        return _stopped(kube, ref, obj)[0]
    except ApiStatus:
        return False
