"""`kube.serving_check`: serving Deployments that a drain or an engine upgrade would interrupt
(the rules and their sources: `pitstop/kube/serving.py`). Read-only."""

from __future__ import annotations

from activities.kube.client import Kube
from activities.kube.common import kube_for, kube_module
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.kube.objects import Obj
from pitstop.kube.serving import serving_findings
from pitstop.module_args.kube_upgrade import SERVING_CHECK, ServingCheckArgs


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
