"""The worker's Kubernetes RBAC (deploy/kubernetes/) against what the modules actually call.

The rehearsal cluster authorizes every request as a real apiserver's RBAC authorizer does
(`SimConfig(rbac=True)`, pitstop_sim.rbac), from the Roles, ClusterRoles and bindings of the
shipped manifests; the kubeconfig registered with the worker for the cluster the inventory names
carries the `pitstop/pitstop-worker` ServiceAccount's token (`SimCluster.register` registers the
kubeconfig the cluster hands out, checked by `registered_worker_token`). So:

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
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError

from activities import ACTIVITIES
from activities.kube.admission import stop_admission
from activities.kube.capacity import capacity_check
from activities.kube.checkpoint import wait_for_workloads
from activities.kube.client import ApiStatus, Kube, api_client
from activities.kube.drain import drain_node
from activities.kube.job import run_job
from activities.kube.nodes import cordon, wait_node_ready
from activities.kube.serving import wave_replicas
from activities.observe import observe
from pitstop.bundle import collect
from pitstop.contracts import ModuleResult, RunReport, RunRequest
from pitstop.demo import maintenance as dm
from pitstop.demo import upgrade as du
from pitstop.kube.annotations import CHECKPOINT_PROTOCOL, CHECKPOINT_REQUESTED
from pitstop.policy import current_policy
from pitstop.policy.clusters import cluster_rule
from pitstop.runbook.inventory import ClusterConfig
from pitstop.worker_app import build_worker
from pitstop_sim import SimCluster, SimConfig, load_scenario
from pitstop_sim.rbac_policy import load_policy
from tests.e2e.conftest import Rehearsal, approve_gates, run_to_end, runbook_limits
from tests.integration.kube.conftest import ModuleRunner
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
    """The rehearsal cluster with SSH endpoints and RBAC enforced; its kubeconfig, the one
    registered with the worker, is the worker ServiceAccount's (the admin's is `kubeconfig.admin`)."""
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


def registered_worker_token(sim: SimCluster, name: str) -> str:
    """The kubeconfig the worker uses for cluster `name` (the one registered with it, which the
    inventory only names) carries the ServiceAccount's token, never the admin's: otherwise every
    request would be allowed and no test here could see a 403."""
    kubeconfig = cluster_rule(name, "rbac test").kubeconfig
    assert kubeconfig is not None, name
    text = kubeconfig.read_text(encoding="utf-8")
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
    return await run_to_end(client, queue, rehearsal.request(), "rbac-maintenance", within)


@pytest.mark.timeout(300)
async def test_the_maintenance_runbook_runs_as_the_workers_service_account_with_no_request_denied(
    temporal_client: Client, task_queue: str, rehearsal: Rehearsal
) -> None:
    sim = rehearsal.sim
    registered_worker_token(sim, "rehearsal")
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
    registered_worker_token(sim, "rehearsal")
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
        registered_worker_token(sim, "rehearsal")
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
                "accept_unprotected_serving": du.ACCEPTED_UNPROTECTED,
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
            # The start request is unsigned, so the four-eyes canary gate needs two verified
            # approvers (alice and bob); dana answers the lab gate.
            approvers = [
                asyncio.ensure_future(approve_gates(handle, who)) for who in ("alice", "bob", "dana")
            ]
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


# --- each rule of the maintenance roles is necessary ----------------------------------------------

SMALL = REPO / "runbooks" / "scenarios" / "small-gpu-cluster.yaml"
QUEUE = "gpu-cluster-queue"
JOB_IMAGE = "registry.local/probe:1.0"


SUSPENDABLE = REPO / "runbooks" / "scenarios" / "training-suspend.yaml"


@contextlib.contextmanager
def rbac_cluster(workdir: Path, scenario: Path) -> Iterator[SimCluster]:
    """`scenario` with the maintenance RBAC enforced; the kubeconfig is the worker's."""
    workdir.mkdir(parents=True, exist_ok=True)
    sim = SimCluster(
        SimConfig(
            scenario=load_scenario(scenario),
            kubeconfig=workdir / "kubeconfig",
            rbac=True,
            rbac_policy=MAINTENANCE_POLICY,
            kubeconfig_service_account=WORKER,
            time_scale=600,
        )
    )
    sim.start()
    try:
        worker_kubeconfig_token(sim)
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SimCluster]:
    """small-gpu-cluster (a PDB-covered inference service, a checkpointing gang, a Kueue
    ClusterQueue) with the maintenance RBAC enforced; the kubeconfig is the worker's."""
    with rbac_cluster(tmp_path, SMALL) as sim:
        yield sim


def _pods(sim: SimCluster, namespace: str) -> list[dict[str, Any]]:
    return [p for p in sim.list("pods", namespace) if p["spec"].get("nodeName")]


def serving_node(sim: SimCluster) -> str:
    """A schedulable node running inference pods and no training pod; cordoned for the drain."""
    training = {p["spec"]["nodeName"] for p in _pods(sim, "training")}
    node = sorted({p["spec"]["nodeName"] for p in _pods(sim, "serving")} - training - {"gpu-node-006"})[0]
    sim.patch("nodes", node, {"spec": {"unschedulable": True}})
    return node


def training_node(sim: SimCluster) -> str:
    return sorted(
        p["spec"]["nodeName"] for p in _pods(sim, "training") if "llm-pretrain" in p["metadata"]["name"]
    )[0]


def checkpoint_requested(sim: SimCluster) -> list[str]:
    marked = [*sim.list("pods", "training"), *sim.list("jobs", "training")]
    return [
        m["metadata"]["name"]
        for m in marked
        if CHECKPOINT_REQUESTED in (m["metadata"].get("annotations") or {})
    ]


def job_only_protocol(sim: SimCluster) -> None:
    """The gang answers checkpoint requests on its Job, not its pods: the Job is then written."""
    for pod in sim.list("pods", "training"):
        notes = pod["metadata"].get("annotations") or {}
        if CHECKPOINT_PROTOCOL in notes:
            sim.patch(
                "pods",
                pod["metadata"]["name"],
                {"metadata": {"annotations": {CHECKPOINT_PROTOCOL: None}}},
                "training",
            )


TRAINING_OPERATORS = [
    "pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs", "trainjobs", "jobsets",
    "rayclusters", "rayjobs",
]  # fmt: skip


def suspended_jobs(sim: SimCluster) -> list[str]:
    """Operator objects pitstop suspended or holds, and any record of them on a node."""
    found = [
        f"{storage}/{o['metadata']['name']}"
        for storage in ("kubeflow.org/pytorchjobs", "jobset.x-k8s.io/jobsets", "ray.io/rayclusters")
        for o in sim.list(storage, "training")
        if (o["spec"].get("runPolicy") or o["spec"]).get("suspend")
        or "pitstop.dev/suspended-for" in (o["metadata"].get("annotations") or {})
    ]
    return found + [
        name
        for name in sim.gpu_node_names()
        if "pitstop.dev/suspended-workloads"
        in ((sim.get("nodes", name) or {})["metadata"].get("annotations") or {})
    ]


@dataclass(frozen=True)
class RuleCase:
    """Without `rule` of ClusterRole `role`, `module` fails with a 403 saying `denied`, and
    `unchanged` still holds."""

    role: str
    resources: list[str]
    module: Callable[..., ModuleResult]
    args: Callable[[SimCluster], dict[str, Any]]
    host: Callable[[SimCluster], str]
    denied: str  # "<verb> resource \"<resource>\" in API group \"<group>\" <scope>"
    unchanged: Callable[[SimCluster], bool] = lambda sim: True
    prepare: Callable[[SimCluster], None] = lambda sim: None
    in_output: bool = False  # the module reports the refusal in its output instead of failing
    scenario: Path = SMALL  # the rehearsal cluster the case needs (small-gpu-cluster unless said)


@pytest.fixture
def runner() -> ModuleRunner:
    return ModuleRunner()


def _first_node(sim: SimCluster) -> str:
    return "gpu-node-001"


def _drain_args(sim: SimCluster) -> dict[str, Any]:
    return {"retry_interval_seconds": 0.2}


def _wait_args(sim: SimCluster) -> dict[str, Any]:
    return {"timeout_seconds": 20, "poll_interval_seconds": 0.2}


def _observe_args(sim: SimCluster) -> dict[str, Any]:
    return {"nodes": [_first_node(sim)]}


def _queue_args(sim: SimCluster) -> dict[str, Any]:
    return {"cluster_queues": [QUEUE]}


def _job_args(sim: SimCluster) -> dict[str, Any]:
    return {"image": JOB_IMAGE, "timeout_seconds": 30, "poll_interval_seconds": 0.2}


def _stop_policy(sim: SimCluster) -> Any:
    return (sim.get("kueue.x-k8s.io/clusterqueues", QUEUE) or {})["spec"].get("stopPolicy")


RULE_CASES = {
    "nodes": RuleCase(
        "pitstop-node-maintenance", ["nodes"], cordon, lambda sim: {"reason": "rbac test"}, _first_node,
        'get resource "nodes" in API group "" at the cluster scope',
        unchanged=lambda sim: not (sim.get("nodes", "gpu-node-001") or {})["spec"].get("unschedulable"),
    ),
    "pods": RuleCase(
        "pitstop-node-maintenance", ["pods"], drain_node, _drain_args, serving_node,
        'list resource "pods" in API group "" at the cluster scope',
        unchanged=lambda sim: sim.counters().evictions_total == 0,
    ),
    "pods/eviction": RuleCase(
        "pitstop-node-maintenance", ["pods/eviction"], drain_node, _drain_args, serving_node,
        'create resource "pods/eviction" in API group "" in the namespace "serving"',
        unchanged=lambda sim: sim.counters().evictions_total == 0,
    ),
    "events": RuleCase(
        "pitstop-node-maintenance", ["events"], observe, _observe_args, _first_node,
        'list resource "events" in API group "" at the cluster scope',
    ),
    "poddisruptionbudgets": RuleCase(
        "pitstop-node-maintenance", ["poddisruptionbudgets"], capacity_check, lambda sim: {}, _first_node,
        'list resource "poddisruptionbudgets" in API group "policy" at the cluster scope',
    ),
    "jobs (read)": RuleCase(
        "pitstop-node-maintenance", ["jobs"], wait_for_workloads,
        _wait_args, training_node,
        'get resource "jobs" in API group "batch" in the namespace "training"',
        unchanged=lambda sim: checkpoint_requested(sim) == [],
    ),
    "validator daemonset": RuleCase(
        "pitstop-node-maintenance", ["daemonsets"], wait_node_ready, lambda sim: {"timeout_seconds": 5},
        _first_node,
        'get resource "daemonsets" in API group "apps" in the namespace "gpu-operator"',
    ),
    "serving deployments": RuleCase(
        "pitstop-node-maintenance", ["deployments", "replicasets"], wave_replicas,
        _observe_args, _first_node,
        'list resource "deployments" in API group "apps" at the cluster scope',
    ),
    "clusterqueues": RuleCase(
        "pitstop-node-maintenance", ["clusterqueues"], stop_admission, _queue_args, _first_node,
        'get resource "clusterqueues" in API group "kueue.x-k8s.io" at the cluster scope',
        unchanged=lambda sim: _stop_policy(sim) in (None, "None"),
    ),
    "validation jobs": RuleCase(
        "pitstop-validation-jobs", ["jobs"], run_job,
        _job_args, _first_node,
        'create resource "jobs" in API group "batch" in the namespace "default"',
        unchanged=lambda sim: sim.list("jobs", "default") == [],
    ),
    "validation logs": RuleCase(
        "pitstop-validation-jobs", ["pods/log"], run_job,
        _job_args, _first_node,
        'get resource "pods/log" in API group "" in the namespace "default"',
        in_output=True,
    ),
    "checkpoint on pods": RuleCase(
        "pitstop-checkpoint-requests", ["pods"], wait_for_workloads,
        _wait_args, training_node,
        'patch resource "pods" in API group "" in the namespace "training"',
        unchanged=lambda sim: checkpoint_requested(sim) == [],
    ),
    "checkpoint on jobs": RuleCase(
        "pitstop-checkpoint-requests", ["jobs"], wait_for_workloads,
        _wait_args, training_node,
        'patch resource "jobs" in API group "batch" in the namespace "training"',
        unchanged=lambda sim: checkpoint_requested(sim) == [],
        prepare=job_only_protocol,
    ),
    "training operators (read)": RuleCase(
        "pitstop-node-maintenance", TRAINING_OPERATORS, wait_for_workloads,
        _wait_args, _first_node,
        'get resource "pytorchjobs" in API group "kubeflow.org" in the namespace "training"',
        unchanged=lambda sim: suspended_jobs(sim) == [],
        scenario=SUSPENDABLE,
    ),
    "suspend on training operators": RuleCase(
        "pitstop-checkpoint-requests", TRAINING_OPERATORS, wait_for_workloads,
        _wait_args, _first_node,
        'patch resource "jobsets" in API group "jobset.x-k8s.io" in the namespace "training"',
        unchanged=lambda sim: suspended_jobs(sim) == [],
        scenario=SUSPENDABLE,
    ),
    "kueue workloads": RuleCase(
        "pitstop-checkpoint-requests", ["workloads"], wait_for_workloads,
        _wait_args, _first_node,
        'list resource "workloads" in API group "kueue.x-k8s.io" in the namespace "training"',
        unchanged=lambda sim: suspended_jobs(sim) == [],
        scenario=SUSPENDABLE,
    ),
}  # fmt: skip


def test_every_rule_of_the_maintenance_roles_has_a_case() -> None:
    """A rule added to the manifests without a case here (proving it is needed) fails this."""
    rules = {
        (role["metadata"]["name"], tuple(rule["resources"]))
        for role in load_policy(MAINTENANCE_POLICY)
        if role["kind"] == "ClusterRole"
        for rule in role["rules"]
    }
    assert rules == {(c.role, tuple(c.resources)) for c in RULE_CASES.values()}


@pytest.mark.parametrize("case", RULE_CASES.values(), ids=RULE_CASES.keys())
def test_without_a_rule_the_module_that_needs_it_gets_the_apiservers_403(
    tmp_path: Path, runner: ModuleRunner, case: RuleCase
) -> None:
    with rbac_cluster(tmp_path, case.scenario) as cluster:
        _refused_without_the_rule(cluster, runner, case)


def _refused_without_the_rule(cluster: SimCluster, runner: ModuleRunner, case: RuleCase) -> None:
    registered_worker_token(cluster, runner.cluster(cluster).name)
    case.prepare(cluster)
    host = case.host(cluster)
    drop_rule(cluster, case.role, lambda r: r.get("resources") == case.resources)
    expected = f'is forbidden: User "{WORKER_USER}" cannot {case.denied}'
    if case.in_output:
        result = runner(case.module, cluster, case.args(cluster), host=host, timeout=60)
        assert expected in (result.stdout or ""), result
    else:
        with pytest.raises(ApplicationError) as refused:
            runner(case.module, cluster, case.args(cluster), host=host, timeout=60)
        assert refused.value.type == "Unauthorized"
        assert expected in refused.value.message, refused.value.message
        assert "(HTTP 403; check the credentials and RBAC of the kubeconfig)" in refused.value.message
    assert case.unchanged(cluster), "the refused call changed the cluster"
    # The refusal came from the cluster's RBAC, and only for the rule that was taken away.
    denials = cluster.rbac_denials()
    assert denials and all(expected in d.message for d in denials), denials


def test_with_every_rule_in_place_the_same_module_calls_are_not_refused(
    cluster: SimCluster, runner: ModuleRunner, tmp_path: Path
) -> None:
    """The control for the cases above: with the roles as shipped, none of those calls meets a
    401 or 403 (a module may still say no for its own reasons: a capacity check on a full
    cluster refuses)."""
    registered_worker_token(cluster, runner.cluster(cluster).name)
    refusals: dict[str, str] = {}
    with rbac_cluster(tmp_path / "suspendable", SUSPENDABLE) as suspendable:
        registered_worker_token(suspendable, runner.cluster(suspendable).name)
        for name, case in RULE_CASES.items():
            if case.prepare is job_only_protocol:
                continue  # changes the gang; "checkpoint on pods" calls the same module
            sim = cluster if case.scenario == SMALL else suspendable
            try:
                runner(case.module, sim, case.args(sim), host=case.host(sim), timeout=60)
            except ApplicationError as exc:
                refusals[name] = f"{exc.type}: {exc.message}"
        assert suspendable.rbac_denials() == []
        # The suspension went through: the operators' objects are suspended and held (the
        # Kueue-admitted one through its Workload), and the node records them.
        assert len(suspended_jobs(suspendable)) == 5
    assert not [r for r in refusals.values() if r.startswith("Unauthorized")], refusals
    assert cluster.rbac_denials() == []


def test_a_drain_that_bypasses_the_eviction_api_is_refused_by_the_cluster(
    cluster: SimCluster, runner: ModuleRunner
) -> None:
    """`disable_eviction: true` deletes pods past their PDBs; the worker's role has no `delete
    pods`, so whatever a runbook says, the cluster refuses and no pod is deleted."""
    registered_worker_token(cluster, runner.cluster(cluster).name)
    node = serving_node(cluster)
    with pytest.raises(ApplicationError) as refused:
        runner(
            drain_node,
            cluster,
            {"disable_eviction": True, "retry_interval_seconds": 0.2},
            host=node,
            timeout=60,
        )
    assert refused.value.type == "Unauthorized"
    assert (
        f'is forbidden: User "{WORKER_USER}" cannot delete resource "pods" in API group ""'
        in refused.value.message
    )
    counters = cluster.counters()
    assert (
        counters.deletions_total == 0
        and counters.forced_deletions_total == 0
        and counters.evictions_total == 0
    )


# --- what the worker is given ---------------------------------------------------------------------


def test_the_cluster_registered_with_the_worker_is_the_service_accounts(cluster: SimCluster) -> None:
    """Registering the cluster (what `pitstop sim serve`, the demo and the fixtures do) gives the
    worker the kubeconfig the cluster hands out: the ServiceAccount's, never the admin's."""
    name = f"rbac-{uuid.uuid4().hex[:8]}"
    directory = cluster.register(name)
    try:
        assert cluster.kubeconfig_path is not None and cluster.admin_kubeconfig_path is not None
        registered = YAML(typ="safe").load((directory / "kubeconfig").read_text())
        assert registered == YAML(typ="safe").load(cluster.kubeconfig_path.read_text())
        assert registered != YAML(typ="safe").load(cluster.admin_kubeconfig_path.read_text())
        assert registered_worker_token(cluster, name) == cluster.service_account_token(WORKER)
        # What the worker's client does with it: the worker's identity, not the admin's.
        kube = Kube(api_client(ClusterConfig(name=name)))
        assert kube.get_or_none("/api/v1/nodes/gpu-node-001") is not None
        with pytest.raises(ApiStatus) as denied:
            kube.get_or_none("/api/v1/namespaces/default/secrets/x")
        assert denied.value.status == 403 and f'User "{WORKER_USER}"' in denied.value.message
    finally:
        shutil.rmtree(directory)


def test_sim_serve_with_a_service_account_registers_that_service_accounts_kubeconfig(tmp_path: Path) -> None:
    """`pitstop sim serve --rbac deploy/kubernetes --service-account ...`: the cluster registered
    with the worker authenticates as the ServiceAccount (the admin's kubeconfig is only written
    next to the one it prints)."""
    name = f"rbac-serve-{uuid.uuid4().hex[:8]}"
    kubeconfig = tmp_path / "kubeconfig"
    registered = current_policy().clusters_dir.path / name / "kubeconfig"
    argv = [sys.executable, "-m", "pitstop.cli.sim", "serve", "--nodes", "1", "--domains", "1", "--no-ssh"]
    argv += ["--kubeconfig", str(kubeconfig), "--name", name, "--service-account", WORKER]
    argv += [arg for path in MAINTENANCE_POLICY for arg in ("--rbac", str(path))]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "250"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not registered.is_file():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the cluster was not registered"
            time.sleep(0.1)
        shown = YAML(typ="safe").load(registered.read_text())
        assert shown == YAML(typ="safe").load(kubeconfig.read_text())
        admin = YAML(typ="safe").load(kubeconfig.with_name("kubeconfig.admin").read_text())
        [user] = shown["users"]
        assert user["name"] == "pitstop-sim-pitstop-pitstop-worker"
        assert user["user"]["token"] != admin["users"][0]["user"]["token"]
        server = shown["clusters"][0]["cluster"]["server"]
        status, _ = _get_url(server + "/api/v1/namespaces/default/secrets", user["user"]["token"])
        assert status == 403
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        shutil.rmtree(registered.parent, ignore_errors=True)
    assert proc.returncode == 0


# --- authentication -------------------------------------------------------------------------------


def _get(sim: SimCluster, path: str, token: str | None) -> tuple[int, dict[str, Any]]:
    return _get_url(sim.url + path, token)


def _get_url(url: str, token: str | None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_no_token_or_an_unknown_one_is_401_and_the_admin_token_still_works(cluster: SimCluster) -> None:
    unauthorized = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "Unauthorized", "reason": "Unauthorized", "code": 401}  # fmt: skip
    for token in (None, "not-a-token", cluster.service_account_token(WORKER) + "x"):
        for path in ("/api/v1/nodes", "/version", "/api/v1/namespaces/default/secrets"):
            assert _get(cluster, path, token) == (401, unauthorized), (token, path)
    # The admin token (tests and the demo set up and inspect the cluster with it) can do anything.
    status, secrets = _get(cluster, "/api/v1/secrets", cluster.token)
    assert status == 200 and secrets["kind"] == "SecretList"
    # The worker can read nodes but not a single Secret.
    worker = cluster.service_account_token(WORKER)
    assert _get(cluster, "/api/v1/nodes", worker)[0] == 200
    status, body = _get(cluster, "/api/v1/namespaces/default/secrets/x", worker)
    assert status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        f'secrets "x" is forbidden: User "{WORKER_USER}" cannot get resource "secrets" in API group "" '
        'in the namespace "default"'
    )
    assert body["details"] == {"name": "x", "kind": "secrets"}


def test_deleting_the_service_account_revokes_its_token(cluster: SimCluster) -> None:
    worker = cluster.service_account_token(WORKER)
    assert _get(cluster, "/api/v1/nodes", worker)[0] == 200
    cluster.delete("serviceaccounts", "pitstop-worker", "pitstop")
    assert _get(cluster, "/api/v1/nodes", worker)[0] == 401
