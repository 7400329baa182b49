"""kube.wait_rollout: wait until workloads have rolled out, with `kubectl rollout status`'s
verdict (`pitstop.kube.rollout`). The workloads are those of the manifests in `src` (the ones a
kube.apply put there) and those named in `objects`. Read-only: check mode reports where each
stands now without waiting."""

from __future__ import annotations

from typing import Any

from activities.kube.apply import read_manifests
from activities.kube.common import Deadline, api_errors, kube_for, kube_module, pause
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.kube.rollout import RolloutFailed, status_of
from pitstop.module_args.kube_upgrade import WAIT_ROLLOUT, ApplyArgs, WaitRolloutArgs

ROLLED_OUT_KINDS = {
    "Deployment": "deployments",
    "DaemonSet": "daemonsets",
    "StatefulSet": "statefulsets",
}


def _workloads(call: ModuleCall, args: WaitRolloutArgs) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of every workload to wait for, in order, once each."""
    found: dict[tuple[str, str, str], None] = {}
    if args.src:
        manifests = read_manifests(
            ApplyArgs(src=args.src, namespace=args.namespace, recursive=args.recursive), call
        )
        for m in manifests:
            if m.api_version == "apps/v1" and m.kind in ROLLED_OUT_KINDS:
                meta = m.obj.get("metadata") or {}
                found[(m.kind, str(meta.get("namespace") or args.namespace), str(meta["name"]))] = None
    for item in args.objects:
        kind, rest = item.split(" ", 1)
        namespace, name = rest.split("/", 1)
        found[(kind, namespace, name)] = None
    return list(found)


def _path(kind: str, namespace: str, name: str) -> str:
    return f"/apis/apps/v1/namespaces/{namespace}/{ROLLED_OUT_KINDS[kind]}/{name}"


@kube_module(WAIT_ROLLOUT)
def wait_rollout(call: ModuleCall, args: WaitRolloutArgs) -> ModuleResult:
    kube = kube_for(call)
    workloads = _workloads(call, args)
    if not workloads:
        fail(
            ErrorType.INVALID_ARGS,
            f"kube.wait_rollout: {', '.join(args.src or [])} hold no Deployment, "
            "DaemonSet or StatefulSet to wait for",
        )
    deadline = Deadline(args.timeout_seconds)
    waiting: dict[str, str] = {}
    done: dict[str, str] = {}
    while True:
        waiting = {}
        for kind, namespace, name in workloads:
            label = f"{kind} {namespace}/{name}"
            if label in done:
                continue
            with api_errors(f"kube.wait_rollout: {label}"):
                obj = kube.get_or_none(_path(kind, namespace, name))
            if obj is None:
                waiting[label] = "not found"
                continue
            try:
                state = status_of(obj)
            except RolloutFailed as exc:
                fail(ErrorType.PRECONDITION_FAILED, f"kube.wait_rollout: {label}: {exc}", non_retryable=True)
            if state.done:
                done[label] = state.message
            else:
                waiting[label] = state.message
        data: dict[str, Any] = {"rolled_out": sorted(done), "waiting": waiting}
        if not waiting:
            return ModuleResult(
                msg=f"{len(done)} workloads rolled out",
                data={**data, "waited_s": round(deadline.elapsed(), 3)},
            )
        if call.check_mode:
            return ModuleResult(
                msg=f"{len(waiting)} of {len(workloads)} workloads still rolling out", data=data
            )
        if deadline.passed():
            fail(
                ErrorType.TIMEOUT,
                f"kube.wait_rollout: after {deadline.elapsed():.0f}s, not rolled out: "
                + "; ".join(f"{label}: {why}" for label, why in sorted(waiting.items())),
                non_retryable=True,
            )
        pause(min(args.poll_interval_seconds, max(deadline.remaining(), 0.0)), {"waiting": sorted(waiting)})
