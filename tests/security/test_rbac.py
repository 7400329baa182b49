"""The worker's Kubernetes RBAC (deploy/kubernetes/) against what the modules actually call.

The rehearsal cluster authorizes every request as a real apiserver's RBAC authorizer does
(`SimConfig(rbac=True)`, pitstop.sim.rbac), from the Roles, ClusterRoles and bindings of the
shipped manifests; the worker's kubeconfig carries the `pitstop/pitstop-worker` ServiceAccount's
token. So:

- the shipped maintenance runbook, run through the real engine, succeeds as that
  ServiceAccount and no request of the whole run is denied (the role is sufficient);
- each rule is necessary: without it, the module that needs it fails with the apiserver's 403,
  and nothing was changed;
- a drain with `disable_eviction` (a plain DELETE that bypasses PDBs) is refused by the cluster;
- no token or an unknown token gets 401; the admin token the tests set up with still works;
- the platform upgrade runbook succeeds with the upgrade's role added, again with no denial.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from activities import ACTIVITIES
from pitstop import demo_maintenance as dm
from pitstop import demo_upgrade as du
from pitstop.bundle import collect
from pitstop.contracts import RunReport, RunRequest
from pitstop.sim import SimCluster, SimConfig, load_scenario
from tests.e2e.conftest import Rehearsal, approve_gates, runbook_limits
from worker import build_worker
from workflows import WORKFLOWS

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "kubernetes"
MAINTENANCE_POLICY = [
    MANIFESTS / f for f in ("namespace.yaml", "serviceaccount.yaml", "rbac-node-maintenance.yaml")
]
UPGRADE_POLICY = [*MAINTENANCE_POLICY, MANIFESTS / "rbac-platform-upgrade.yaml"]
WORKER = "pitstop/pitstop-worker"
WORKER_USER = "system:serviceaccount:pitstop:pitstop-worker"


def start_with_rbac(workdir: Path, scenario: Path, policy: list[Path], **extra: Any) -> SimCluster:
    """The rehearsal cluster with SSH endpoints and RBAC enforced; the kubeconfig the inventory
    names is the worker ServiceAccount's (the admin's is `kubeconfig.admin`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    sim = SimCluster(
        SimConfig(
            scenario=load_scenario(scenario),
            kubeconfig=workdir / "kubeconfig",
            ssh=True,
            ssh_dir=workdir,
            rbac=True,
            rbac_policy=policy,
            kubeconfig_service_account=WORKER,
            **extra,
        )
    )
    sim.start()
    return sim


def worker_kubeconfig_token(sim: SimCluster) -> str:
    assert sim.kubeconfig_path is not None
    text = sim.kubeconfig_path.read_text(encoding="utf-8")
    token = sim.service_account_token(WORKER)
    assert token in text and sim.token not in text, "the worker must not hold the admin token"
    return token


def drop_rule(sim: SimCluster, role: str, matches: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Remove the one rule of ClusterRole `role` that `matches` (through the admin's API)."""
    current = sim.get("rbac.authorization.k8s.io/clusterroles", role)
    assert current is not None, role
    rules = current["rules"]
    chosen = [r for r in rules if matches(r)]
    assert len(chosen) == 1, (role, chosen)
    sim.patch(
        "rbac.authorization.k8s.io/clusterroles", role, {"rules": [r for r in rules if r is not chosen[0]]}
    )
    return chosen[0]


# --- the shipped maintenance runbook, as the worker's ServiceAccount ------------------------------


@pytest.fixture
def rehearsal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rehearsal]:
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    workdir = tmp_path / "demo"
    sim = start_with_rbac(workdir, dm.SCENARIO, MAINTENANCE_POLICY)
    try:
        for key, value in dm.worker_environment(sim, workdir).items():
            monkeypatch.setenv(key, value)
        yield Rehearsal(
            sim=sim, workdir=workdir, inventory=dm.write_inventory(sim, workdir / "inventory.yaml")
        )
    finally:
        sim.stop()


async def run_maintenance(client: Client, queue: str, rehearsal: Rehearsal, within: float = 240) -> RunReport:
    async with build_worker(client, queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        handle: WorkflowHandle[object, RunReport] = await client.start_workflow(
            "RunbookWorkflow",
            rehearsal.request(),
            id=f"rbac-maintenance-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            result_type=RunReport,
            execution_timeout=timedelta(seconds=within + 30),
        )
        approver = asyncio.ensure_future(approve_gates(handle))
        try:
            return await asyncio.wait_for(handle.result(), timeout=within)
        finally:
            approver.cancel()


@pytest.mark.timeout(300)
async def test_the_maintenance_runbook_runs_as_the_workers_service_account_with_no_request_denied(
    temporal_client: Client, task_queue: str, rehearsal: Rehearsal
) -> None:
    sim = rehearsal.sim
    worker_kubeconfig_token(sim)
    report = await run_maintenance(temporal_client, task_queue, rehearsal)

    target, per_domain_limit = runbook_limits()
    verdict = dm.judge(sim, report, target, per_domain_limit)
    assert verdict.problems == []
    assert report.status == "completed_with_failures", report.msg  # the degraded node, as in the demo
    assert sim.rbac_denials() == []
    # The run did what needs the role: it evicted pods through the Eviction API.
    assert sim.counters().evictions_total > 0


@pytest.mark.timeout(300)
async def test_without_the_eviction_rule_the_canary_drain_fails_with_a_403_and_nothing_is_evicted(
    temporal_client: Client, task_queue: str, rehearsal: Rehearsal
) -> None:
    sim = rehearsal.sim
    drop_rule(sim, "pitstop-node-maintenance", lambda r: r.get("resources") == ["pods/eviction"])
    report = await run_maintenance(temporal_client, task_queue, rehearsal)

    canary = report.stages[0].hosts[0]
    assert canary.host == dm.CANARY_NODE and canary.status == "failed"
    assert canary.msg.startswith("left cordoned: Drain through the Eviction API"), canary.msg
    [drain] = [t for t in canary.tasks if t.module == "kube.drain"]
    assert drain.status == "rescued"  # failed, then handled by the runbook's rescue
    assert (
        f'is forbidden: User "{WORKER_USER}" cannot create resource "pods/eviction" in API group "" '
        'in the namespace "'
    ) in drain.msg, drain.msg
    assert report.stages[1].hosts == [], "the fleet must not start after the canary failed"
    assert sim.counters().evictions_total == 0
    denied = {d.request.split()[0:2][1] for d in sim.rbac_denials()}
    assert denied == {"pods/eviction"}, sim.rbac_denials()
    # The rescue could still leave the node cordoned with its reason (nodes patch is granted).
    node = sim.get("nodes", dm.CANARY_NODE) or {}
    assert node["spec"].get("unschedulable") is True
    assert "forbidden" in node["metadata"]["annotations"][dm.FAILED_ANNOTATION]


# --- the platform upgrade, with the upgrade's role added ----------------------------------------


@pytest.mark.timeout(420)
async def test_the_platform_upgrade_runs_as_the_workers_service_account_with_no_request_denied(
    temporal_client: Client,
    task_queue: str,
    tmp_path: Path,
    s3_endpoint: str,
    etcd_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    workdir = tmp_path / "rehearsal"
    sim = start_with_rbac(
        workdir,
        du.SCENARIO,
        UPGRADE_POLICY,
        etcd_endpoint=etcd_endpoint,
        etcd_prefix=f"/rbac-{uuid.uuid4().hex[:6]}/registry/",
    )
    try:
        worker_kubeconfig_token(sim)
        for key, value in du.worker_environment(sim, workdir).items():
            monkeypatch.setenv(key, value)
        inventory = du.write_inventory(
            sim, workdir / "inventory.yaml", s3_endpoint=s3_endpoint, etcd_endpoint=etcd_endpoint
        )
        files, runbook_name, inventory_name = collect(du.RUNBOOK, inventory)
        request = RunRequest(
            runbook=runbook_name,
            inventory=inventory_name,
            files=files,
            vars={
                "poll_seconds": 0.5,
                "s3_create_bucket": True,
                "lab_run_required": False,
                "s3_endpoint_url": s3_endpoint,
                "s3_addressing_style": "path",
            },
            requested_by="rbac-requester",
        )
        async with build_worker(temporal_client, task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
            handle: WorkflowHandle[object, RunReport] = await temporal_client.start_workflow(
                "RunbookWorkflow",
                request,
                id=f"rbac-upgrade-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
                result_type=RunReport,
                execution_timeout=timedelta(minutes=6),
            )
            approvers = [asyncio.ensure_future(approve_gates(handle, who)) for who in ("alice", "dana")]
            try:
                report = await asyncio.wait_for(handle.result(), timeout=330)
            finally:
                for approver in approvers:
                    approver.cancel()
        failures = [
            f"{s.name}/{h.host}: {h.failed_task}: {h.msg}"
            for s in report.stages
            for h in [*s.hosts, *s.rollback_hosts, *s.observations]
            if h.status == "failed"
        ]
        denied = [d.request for d in sim.rbac_denials()]
        assert denied == [], "\n".join(denied + failures)
        assert report.status == "succeeded", (report.msg, failures)
        assert sim.kubernetes_version() == "v1.31.2"
        operator = sim.get("deployments", "gpu-operator", "gpu-operator") or {}
        assert operator["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v24.9.2")
    finally:
        sim.stop()
