"""`kube.serving_check`: serving Deployments that a drain or an engine upgrade would interrupt
(the rules and their sources: `pitstop/kube/serving.py`); `kube.wave_replicas`: a wave that
would move too much of one of them at once (`pitstop/kube/wave_replicas.py`). Read-only."""

from __future__ import annotations

from activities.kube.client import Kube
from activities.kube.common import kube_for, kube_module
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.kube.objects import Obj
from pitstop.kube.serving import serving_findings
from pitstop.kube.wave_replicas import wave_shares
from pitstop.module_args.kube_upgrade import SERVING_CHECK, WAVE_REPLICAS, ServingCheckArgs, WaveReplicasArgs


def _listed(kube: Kube, group_path: str, resource: str, namespaces: list[str]) -> list[Obj]:
    if not namespaces:
        return kube.list(f"{group_path}/{resource}")
    return [item for ns in namespaces for item in kube.list(f"{group_path}/namespaces/{ns}/{resource}")]


@kube_module(SERVING_CHECK)
def serving_check(call: ModuleCall, args: ServingCheckArgs) -> ModuleResult:
    kube = kube_for(call)
    deployments = _listed(kube, "/apis/apps/v1", "deployments", args.namespaces)
    pdbs = _listed(kube, "/apis/policy/v1", "poddisruptionbudgets", args.namespaces)
    judged, findings = serving_findings(
        deployments,
        pdbs,
        gpu_only=args.gpu_only,
        min_replicas=args.min_replicas,
        min_grace_seconds=args.min_grace_seconds,
    )
    if findings:
        named = "; ".join(f"{f.deployment}: {', '.join(f.problems)}" for f in findings[: args.max_listed])
        more = f" (and {len(findings) - args.max_listed} more)" if len(findings) > args.max_listed else ""
        msg = (
            f"{len(findings)} of {judged} serving Deployment(s) would drop requests in a drain or "
            f"upgrade: {named}{more}"
        )
    else:
        msg = f"all {judged} serving Deployment(s) roll and drain without dropping requests"
    return ModuleResult(
        changed=False,
        failed=bool(findings) and args.fail_on == "any",
        msg=msg,
        data={"judged": judged, "findings": [f.model_dump() for f in findings]},
    )


@kube_module(WAVE_REPLICAS)
def wave_replicas(call: ModuleCall, args: WaveReplicasArgs) -> ModuleResult:
    kube = kube_for(call)
    deployments = _listed(kube, "/apis/apps/v1", "deployments", args.namespaces)
    replica_sets = _listed(kube, "/apis/apps/v1", "replicasets", args.namespaces)
    # Streamed page by page, keeping only the wave's pods: a 10,000-node cluster's pods never
    # sit in memory at once.
    on_wave = set(args.nodes)
    paths = [f"/api/v1/namespaces/{ns}/pods" for ns in args.namespaces] or ["/api/v1/pods"]
    pods = [
        pod
        for path in paths
        for pod in kube.iterate(path)
        if (pod.get("spec") or {}).get("nodeName") in on_wave
    ]
    shares = wave_shares(
        deployments, replica_sets, pods, args.nodes, max_percent=args.max_percent, gpu_only=args.gpu_only
    )
    over = [s for s in shares if s.over]
    limit = f"{args.max_percent:g}%"
    if over:
        named = "; ".join(
            f"{s.deployment}: {s.on_wave} of {s.replicas} replicas on these nodes (at most {s.allowed})"
            for s in over[: args.max_listed]
        )
        more = f" (and {len(over) - args.max_listed} more)" if len(over) > args.max_listed else ""
        msg = (
            f"{len(over)} serving Deployment(s) would move more than {limit} of their replicas to the "
            f"new version at once on {len(args.nodes)} node(s): {named}{more}. Spread them over "
            "failure domains (topologySpreadConstraints) or split the wave"
        )
    else:
        msg = (
            f"{len(shares)} serving Deployment(s) have replicas on these {len(args.nodes)} node(s), "
            f"none more than {limit}"
        )
    return ModuleResult(
        changed=False,
        failed=bool(over),
        msg=msg,
        data={"limit_percent": args.max_percent, "deployments": [s.model_dump() for s in shares]},
    )
