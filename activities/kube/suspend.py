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
from pitstop.kube.objects import Obj, annotations_of, meta
from pitstop.kube.suspend import (
    FrameworkRef,
    describe_suspended,
    holds_of,
    join_refs,
    kueue_managed,
    parse_refs,
    suspend_field,
    suspend_patch,
)
from pitstop.module_args.kube import RESUME_WORKLOADS, ResumeWorkloadsArgs

CONFLICT_ATTEMPTS = 8  # another node of the same job in flight wrote the holds meanwhile


def framework_path(ref: FrameworkRef) -> str:
    return namespaced(api_base(ref.api_version), ref.spec.plural, ref.namespace, ref.name)


def attach_frameworks(kube: Kube, workloads: Iterable[Workload]) -> list[Workload]:
    """Each workload with its operator's object, when one that can be suspended controls it
    (read once per object)."""
    cache: dict[FrameworkRef, Obj | None] = {}
    out: list[Workload] = []
    for work in workloads:
        ref = framework_ref(work.pod, work.job)
        if ref is None:
            out.append(work)
            continue
        if ref not in cache:
            cache[ref] = kube.get_or_none(framework_path(ref))
        out.append(Workload(work.pod, work.job, cache[ref]))
    return out


def _ref_of(work: Workload) -> FrameworkRef:
    ref = framework_ref(work.pod, work.job)
    assert ref is not None  # a framework holder always has one
    return ref


def refuse_kueue_managed(node: str, workloads: list[Workload]) -> None:
    """Kueue suspends and resumes the jobs it admits: refused before anything is written."""
    managed = sorted(
        {
            _ref_of(w).shown
            for w in workloads
            if w.holder == "framework" and w.framework is not None and kueue_managed(w.framework)
        }
    )
    if managed:
        fail(
            ErrorType.POLICY_VIOLATION,
            f"cannot suspend {', '.join(managed)} for {node}: Kueue admits them and owns their suspend "
            "field. Stop their ClusterQueue with kube.stop_admission stop_policy: HoldAndDrain, or "
            "deactivate their Workload (spec.active: false), before this node's maintenance",
        )


def _patch_holds(kube: Kube, ref: FrameworkRef, change: str, token: str) -> tuple[Obj | None, bool]:
    """Add (`change` "hold") or drop ("release") this node's hold on the job, suspending it on
    the first hold and resuming it when the last one goes. The job as written (None if it is
    gone) and whether pitstop changed its suspend field."""
    path = framework_path(ref)
    for _ in range(CONFLICT_ATTEMPTS):
        obj = kube.get_or_none(path)
        if obj is None:
            return None, False
        holds = holds_of(obj)
        suspended = suspend_field(obj, ref.spec)
        if change == "hold":
            if token in holds:
                return obj, False
            if suspended and not holds:
                return obj, False  # its owner (or someone else) suspended it: not ours to resume
            remaining, flip = holds | {token}, not suspended
        else:
            if token not in holds:
                return obj, False
            remaining = holds - {token}
            flip = not remaining and suspended
        patch: Obj = {
            "metadata": {
                "resourceVersion": meta(obj).get("resourceVersion"),
                "annotations": {SUSPENDED_FOR: ",".join(sorted(remaining)) or None},
            }
        }
        if flip:
            patch.update(suspend_patch(ref.spec, change == "hold"))
        try:
            return kube.patch(path, patch), flip
        except ApiStatus as exc:
            if exc.status == 404:
                return None, False
            if exc.status != 409:
                raise
    fail(
        ErrorType.KUBE_API_ERROR,
        f"{ref.shown} kept changing while pitstop wrote its suspend hold ({CONFLICT_ATTEMPTS} conflicts)",
        non_retryable=False,
    )


def _record_on_node(kube: Kube, node: str, refs: set[FrameworkRef], *, add: bool) -> None:
    """The node's list of what its maintenance suspended. Only this node's run writes it, and a
    merge patch of one annotation leaves the others alone."""
    current = set(parse_refs(annotations_of(kube.get(node_path(node))).get(SUSPENDED_WORKLOADS)))
    wanted = current | refs if add else current - refs
    if wanted != current:
        kube.patch(node_path(node), {"metadata": {"annotations": {SUSPENDED_WORKLOADS: join_refs(wanted)}}})


def suspend_jobs(kube: Kube, node: str, workloads: list[Workload], token: str) -> list[str]:
    """Suspend every job of a framework holder (recorded on the node first); the jobs asked."""
    refs = {_ref_of(w) for w in workloads if w.holder == "framework"}
    if not refs:
        return []
    recorded = set(parse_refs(annotations_of(kube.get(node_path(node))).get(SUSPENDED_WORKLOADS)))
    _record_on_node(kube, node, refs, add=True)
    asked: list[str] = []
    held: set[FrameworkRef] = set()
    try:
        for ref in sorted(refs):
            obj, flipped = _patch_holds(kube, ref, "hold", token)
            if obj is not None and token in holds_of(obj):
                held.add(ref)
            if flipped:
                asked.append(f"suspended {ref.shown}")
    except BaseException:
        # Refused (RBAC, a webhook) or cut short: the node keeps no record of a job it does
        # not hold, so nothing is left behind that this attempt did not do.
        _record_on_node(kube, node, refs - held - recorded, add=False)
        raise
    return asked


@kube_module(RESUME_WORKLOADS)
def resume_workloads(call: ModuleCall, args: ResumeWorkloadsArgs) -> ModuleResult:
    node = node_name(call, args.node)
    kube = kube_for(call)
    token = args.token or checkpoint_token(call.run_id, node)
    refs = parse_refs(annotations_of(kube.get(node_path(node))).get(SUSPENDED_WORKLOADS))
    data: dict[str, object] = {"node": node, "token": token, "workloads": [str(r) for r in refs]}
    if not refs:
        return ModuleResult(msg=f"no training job suspended for {node}", data=data)
    if call.check_mode:
        return ModuleResult(
            changed=True, msg=f"would release {node}'s hold on {', '.join(r.shown for r in refs)}", data=data
        )
    resumed: list[str] = []
    held: list[str] = []
    gone: list[str] = []
    for ref in refs:
        obj, flipped = _patch_holds(kube, ref, "release", token)
        if obj is None:
            gone.append(ref.shown)
        elif flipped:
            resumed.append(ref.shown)
        elif suspend_field(obj, ref.spec):
            others = sorted(holds_of(obj))
            held.append(
                f"{ref.shown} ({describe_suspended(obj, ref.spec)}; still held by {', '.join(others)})"
                if others
                else f"{ref.shown} (suspended by its owner: left suspended)"
            )
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
        msg="; ".join(parts) or f"nothing of {node}'s to resume",
        data={**data, "resumed": resumed, "left_suspended": held, "gone": gone},
    )
