"""kube.capacity_check: can these nodes leave? The arithmetic is `pitstop.kube.capacity`; this
reads nodes, pods and PDBs, and fails with the numbers when the answer is no, after looking again
for up to `wait_seconds` (a sibling node mid-drain gives its PDB headroom back once its evicted
pods are Ready elsewhere). Read-only: check mode answers for this moment without waiting."""

from __future__ import annotations

from typing import Any

from activities.kube.client import pdbs_path, pods_path
from activities.kube.common import Deadline, kube_for, kube_module, node_name, pause
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.kube import selectors
from pitstop.kube.capacity import CapacityReport, assess
from pitstop.kube.objects import Obj, labels_of, name_of
from pitstop.module_args.kube import CAPACITY_CHECK, CapacityCheckArgs

# Finished pods hold nothing; the apiserver filters them out of the list.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def _data(report: CapacityReport) -> dict[str, Any]:
    data: dict[str, Any] = {"leaving": list(report.leaving), "ok": report.ok}
    if report.gpus is not None:
        g = report.gpus
        data["gpus"] = {
            "needed": g.needed,
            "free": g.free,
            "free_after": g.free_after,
            "margin": g.margin,
            "receiving_nodes": g.receiving_nodes,
            "largest_free": g.largest_free,
            "pods_to_move": [{"pod": p, "gpus": n} for p, n in g.moving],
            "unplaced": [{"pod": p, "gpus": n} for p, n in g.unplaced],
            "training_waiting": list(g.waiting),
            # Unplaced for topology spread or pod (anti-)affinity, and which rule held them off.
            "blocked": [{"pod": p, "why": why} for p, why in g.blocked],
        }
    data["pdbs"] = [
        {
            "pdb": b.pdb,
            "disruptions_allowed": b.allowed,
            "pods_to_evict": b.needed,
            "current_healthy": b.healthy,
            "desired_healthy": b.desired,
            "exceeds": b.exceeds,
        }
        for b in report.budgets
    ]
    data["unprotected_serving"] = [
        {"workload": w, "why": why, "acknowledged": w in report.acknowledged}
        for w, why in sorted(report.unprotected.items())
    ]
    return data


@kube_module(CAPACITY_CHECK)
def capacity_check(call: ModuleCall, args: CapacityCheckArgs) -> ModuleResult:
    leaving = args.nodes or [node_name(call, None)]
    kube = kube_for(call)
    deadline = Deadline(args.wait_seconds)

    def eligible(node: Obj) -> bool:
        return selectors.matches(args.node_selector, labels_of(node))

    while True:
        nodes = kube.list("/api/v1/nodes")
        known = {name_of(n) for n in nodes}
        missing = [n for n in leaving if n not in known]
        if missing:
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"capacity check: nodes not found in {kube.name}: {', '.join(missing)}",
            )
        pods = kube.list(pods_path(), field_selector=ACTIVE_PODS)
        pdbs = kube.list(pdbs_path()) if args.check_pdbs else []
        report = assess(
            nodes,
            pods,
            pdbs,
            leaving,
            resource=args.gpu_resource,
            margin=args.min_spare_gpus,
            eligible=eligible,
            check_gpus=args.check_gpus,
            check_pdbs=args.check_pdbs,
            pdb_headroom=args.pdb_headroom,
            acknowledged=args.acknowledge_unprotected,
        )
        waited = round(deadline.elapsed(), 3)
        if report.ok:
            return ModuleResult(msg=report.describe(), data={**_data(report), "waited_s": waited})
        # Check mode reports the answer of this moment; it has nothing to wait for.
        if call.check_mode or deadline.passed():
            after = (
                f" (still, after waiting {waited:.0f}s)" if args.wait_seconds and not call.check_mode else ""
            )
            fail(ErrorType.PRECONDITION_FAILED, report.describe() + after)
        pause(
            min(args.poll_interval_seconds, max(deadline.remaining(), 0.0)),
            {"leaving": leaving, "short": report.describe()[:500]},
        )
