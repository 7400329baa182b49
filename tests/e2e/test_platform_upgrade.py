"""The platform upgrade runbook on the rehearsal cluster, end to end, with an in-process worker:

- 1.30 -> 1.31 passes every stage with approvals and leaves a complete change record in S3;
- 1.30 -> 1.32 is refused in preflight, citing the skew rule, with nothing changed;
- a canary regression injected by the scenario rolls the canary stage back automatically,
  and the change record says why.

Outcomes are read from the simulator (its /version, nodes, images, packages) and from the
change record in S3, not only from the run's own account of itself."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from ruamel.yaml import YAML
from temporalio.client import Client, WorkflowHandle

from activities import ACTIVITIES
from pitstop.bundle import collect
from pitstop.contracts import RunReport, RunRequest
from pitstop.demo import upgrade as du
from pitstop.keys import load_key
from pitstop.proofs import sign_request
from pitstop.worker_app import build_worker
from pitstop_sim import SimCluster
from tests.e2e.conftest import approve_gates
from tests.policy_site import PolicyLayer
from workflows import WORKFLOWS

pytestmark = pytest.mark.integration

RECORD_BUCKET = "pitstop-change-records"
SECTIONS_13 = (
    "goal_and_risk",
    "version_diff",
    "compatibility_sources",
    "canary_scope",
    "validation_results",
    "observation_window",
    "rollback_triggers",
    "failures_and_follow_ups",
)


@dataclass
class Upgrade:
    sim: SimCluster
    inventory: Path
    s3_endpoint: str

    def request(self, **vars: Any) -> RunRequest:
        files, runbook_name, inventory_name = collect(du.RUNBOOK, self.inventory)
        return RunRequest(
            runbook=runbook_name,
            inventory=inventory_name,
            files=files,
            vars={
                "poll_seconds": 0.5,
                # One look per observe window (its interval is 10s): enough to show the window
                # runs after every wave, without the rehearsal waiting out a real one.
                "observe_window": "10s",
                "s3_create_bucket": True,
                "lab_run_required": False,  # the lab run itself; production names its lab run
                "s3_endpoint_url": self.s3_endpoint,
                "s3_addressing_style": "path",
                "accept_unprotected_serving": du.ACCEPTED_UNPROTECTED,
                **vars,
            },
            requested_by="e2e-requester",
        )

    def record(self, report: RunReport) -> tuple[dict[str, Any], str]:
        """The change record the run linked, read back from S3 (JSON and Markdown)."""
        uris = [a.uri for a in report.artifacts if a.name == "change record"]
        assert len(uris) == 1, report.artifacts
        md_key = uris[0].removeprefix(f"s3://{RECORD_BUCKET}/")
        s3 = boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        markdown = s3.get_object(Bucket=RECORD_BUCKET, Key=md_key)["Body"].read().decode()
        json_key = md_key.removesuffix(".md") + ".json"
        record = json.loads(s3.get_object(Bucket=RECORD_BUCKET, Key=json_key)["Body"].read())
        return record, markdown

    def run_report(self, report: RunReport) -> str:
        """The run's own report (records.run_report, beside the change record), its HTML."""
        uris = [a.uri for a in report.artifacts if a.name == "run report"]
        assert len(uris) == 1, report.artifacts
        key = uris[0].removeprefix(f"s3://{RECORD_BUCKET}/")
        assert key.startswith("run-reports/") and key.endswith(".html"), key
        s3 = boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        html: str = s3.get_object(Bucket=RECORD_BUCKET, Key=key)["Body"].read().decode()
        assert report.run_id in html and 'src="data:image/png;base64,' in html
        return html


def _start(
    tmp_path: Path, scenario: Path, s3_endpoint: str, etcd_endpoint: str, cluster: str = "rehearsal"
) -> Iterator[Upgrade]:
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    workdir = tmp_path / cluster
    sim = du.start_cluster(
        workdir, scenario, etcd_endpoint=etcd_endpoint, etcd_prefix=f"/e2e-{uuid.uuid4().hex[:6]}/registry/"
    )
    try:
        inventory = du.write_inventory(
            sim,
            workdir / "inventory.yaml",
            s3_endpoint=s3_endpoint,
            etcd_endpoint=etcd_endpoint,
            cluster_name=cluster,
        )
        yield Upgrade(sim=sim, inventory=inventory, s3_endpoint=s3_endpoint)
    finally:
        sim.stop()


def _served(
    scenario: Path, tmp_path: Path, s3_endpoint: str, etcd_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Upgrade]:
    """The cluster being upgraded, with the in-process worker's environment pointing at it."""
    for up in _start(tmp_path, scenario, s3_endpoint, etcd_endpoint):
        for key, value in du.worker_environment(up.sim, tmp_path / "rehearsal").items():
            monkeypatch.setenv(key, value)
        yield up


@pytest.fixture
def upgrade(
    tmp_path: Path, s3_endpoint: str, etcd_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Upgrade]:
    yield from _served(du.SCENARIO, tmp_path, s3_endpoint, etcd_endpoint, monkeypatch)


@pytest.fixture
def lab(
    tmp_path: Path, s3_endpoint: str, etcd_endpoint: str, upgrade: Upgrade, worker_policy: PolicyLayer
) -> Iterator[Upgrade]:
    """A second cluster, the lab: the same platform with its own nodes and SSH key. One worker
    serves both, so the lab's key sits beside production's under its own secret name, which the
    worker's policy grants as the lab's SSH key only."""
    worker_policy.grant("lab-ssh-key", "ssh_key", clusters=["lab"])
    for lab in _start(tmp_path, du.SCENARIO, s3_endpoint, etcd_endpoint, cluster="lab"):
        key = (lab.sim.ssh_secrets_dir / "sim-ssh-key").read_bytes()
        (upgrade.sim.ssh_secrets_dir / "lab-ssh-key").write_bytes(key)
        du.write_inventory(
            lab.sim,
            lab.inventory,
            s3_endpoint=s3_endpoint,
            etcd_endpoint=etcd_endpoint,
            cluster_name="lab",
            ssh_key_secret="lab-ssh-key",
        )
        yield lab


KERNEL_BEFORE, KERNEL_TARGET = "5.15.0-105-generic", "5.15.0-119-generic"


def _nvswitch_canary(tmp_path: Path) -> Path:
    """The regression scenario, its canary an NVSwitch system (HGX) running Fabric Manager at
    its driver's version: the upgrade then moves kernel, headers, driver and Fabric Manager as
    one set, and the rollback must restore the whole set."""
    yaml = YAML(typ="safe")
    doc = yaml.load(du.REGRESSION_SCENARIO.read_text())
    doc["cluster"]["node_overrides"][du.CANARY_NODE]["nvswitch"] = True
    doc["platform"].setdefault("node_packages", {})[du.CANARY_NODE] = {
        "nvidia-fabricmanager-550": "550.90.07-1"
    }
    path = tmp_path / "platform-upgrade-regression-nvswitch.yaml"
    with path.open("w") as out:
        yaml.dump(doc, out)
    return path


@pytest.fixture
def regressed(
    tmp_path: Path, s3_endpoint: str, etcd_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Upgrade]:
    yield from _served(_nvswitch_canary(tmp_path), tmp_path, s3_endpoint, etcd_endpoint, monkeypatch)


@pytest.fixture
async def worker(temporal_client: Client, task_queue: str) -> AsyncIterator[str]:
    async with build_worker(temporal_client, task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        yield task_queue


async def _run(client: Client, queue: str, request: RunRequest, within: float) -> RunReport:
    run_id = f"e2e-upgrade-{uuid.uuid4().hex[:8]}"
    vote_key = load_key("vote")
    if vote_key is not None:
        # As `pitstop run` signs its request on a machine holding the vote key: the requester is
        # verified, so the canary's four-eyes gate takes one verified approver besides them.
        request = sign_request(vote_key, request, run=run_id, subject=f"cli:{request.requested_by}")
    handle: WorkflowHandle[object, RunReport] = await client.start_workflow(
        "RunbookWorkflow",
        request,
        id=run_id,
        task_queue=queue,
        result_type=RunReport,
        execution_timeout=timedelta(seconds=within + 60),
    )
    approver = asyncio.ensure_future(approve_gates(handle, "alice"))
    second = asyncio.ensure_future(approve_gates(handle, "dana"))
    try:
        report = await asyncio.wait_for(handle.result(), timeout=within)
    finally:
        approver.cancel()
        second.cancel()
    for stage in report.stages:  # shown when a test fails: where the time went
        hosts = [*stage.hosts, *stage.rollback_hosts, *stage.observations]
        spans = [(h.started_at, h.ended_at) for h in hosts]
        if spans:
            took = (max(e for _, e in spans) - min(s for s, _ in spans)).total_seconds()
            print(f"{stage.name}: {stage.status} in {took:.1f}s")
    return report


def _failures(report: RunReport) -> list[str]:
    return [
        f"{s.name}/{h.host}: {h.failed_task}: {h.msg}"
        for s in report.stages
        for h in [*s.hosts, *s.rollback_hosts, *s.observations]
        if h.status == "failed"
    ]


@pytest.mark.timeout(420)
async def test_upgrade_to_the_next_minor_passes_every_stage_and_leaves_a_complete_change_record(
    temporal_client: Client, worker: str, upgrade: Upgrade, lab: Upgrade
) -> None:
    # docs/upgrade-process.md "Upgrade order": the lab cluster first; production's rehearsal
    # stage checks that run.
    rehearsed = await _run(temporal_client, worker, lab.request(), within=240)
    assert rehearsed.status == "succeeded", (rehearsed.msg, _failures(rehearsed))
    sim = upgrade.sim
    request = upgrade.request(lab_run_required=True, lab_run_id=rehearsed.run_id)
    report = await _run(temporal_client, worker, request, within=360)
    # The lab's run is checked (the staging requirement is off in this rehearsal: skipped).
    required = {t.name: t for t in report.stages[1].hosts[0].tasks if t.module == "runs.require"}
    [checked] = [t for t in required.values() if t.status != "skipped"]
    # Skipped: the staging tier's requirement (off here) and a promotion's earlier rings (not one).
    assert {n for n, t in required.items() if t.status == "skipped"} == {
        "The same upgrade passed the whole way on staging (the tier before production)",
        "The promotion's earlier rings ran this upgrade the whole way",
    }
    assert checked.msg.startswith(f"run {rehearsed.run_id} (platform-upgrade on lab, succeeded"), checked.msg
    assert report.status == "succeeded", (report.msg, _failures(report))
    assert [s.status for s in report.stages] == ["ok"] * len(report.stages)
    assert all(g.status == "approved" for g in report.gates) and len(report.gates) >= 10

    # The cluster itself says it was upgraded.
    assert sim.kubernetes_version() == "v1.31.2"
    for node in sim.node_names():
        assert sim.get("nodes", node)["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.2", node
        assert not sim.get("nodes", node)["spec"].get("unschedulable"), node
    for node in sim.gpu_node_names():
        assert sim.node_profile(node).driver_version == "570.86.15", node
    operator = sim.get("deployments", "gpu-operator", "gpu-operator")
    assert operator["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v24.9.2")

    record, markdown = upgrade.record(report)
    for field in SECTIONS_13:
        assert record.get(field), f"change record lacks {field}"
        # A run that went all the way leaves no section of the record "not reached".
        assert "not reached" not in json.dumps(record[field]), (field, record[field])
    diff = {row["component"]: (row["current"], row["target"]) for row in record["version_diff"]["changes"]}
    assert diff["kubernetes"] == ("v1.30.6", "v1.31.2")
    assert diff["gpu-driver"] == ("550.90.07", "570.86.15")
    assert diff["gpu-operator"] == ("v24.6.2", "v24.9.2")
    after = {row["component"]: row for row in record["version_diff"]["changes"]}
    assert after["kubernetes"]["after"] == "v1.31.2"
    assert after["gpu-driver"]["validation"].startswith("passed in acceptance"), after["gpu-driver"]
    assert "kubernetes.io/releases/version-skew-policy" in json.dumps(record["compatibility_sources"])
    # The order of docs/upgrade-process.md "Upgrade order" runs the old GPU Operator on the new
    # Kubernetes for a while: said, as risk.
    windows = [w["message"] for w in record["compatibility_sources"]["in_between"]]
    assert any("gpu-operator v24.6.2" in w and "kubernetes v1.31.2" in w for w in windows), windows
    assert "gpu-node-001" in json.dumps(record["canary_scope"])
    assert "alice" in markdown and "v1.31.2" in markdown
    # The run's report, written as its last task, is linked from the run beside the record.
    assert "<h1>platform-upgrade: run " in upgrade.run_report(report)


@pytest.mark.timeout(200)
async def test_skipping_a_minor_is_refused_in_preflight_citing_the_skew_rule(
    temporal_client: Client, worker: str, upgrade: Upgrade
) -> None:
    sim = upgrade.sim
    targets = {
        "kubernetes": "v1.32.0",
        "kube-controller-manager": "v1.32.0",
        "kube-scheduler": "v1.32.0",
        "kubelet": "v1.32.0",
        "kubectl": "v1.32.0",
    }
    report = await _run(
        temporal_client,
        worker,
        upgrade.request(kubernetes_target="v1.32.0", kube_package_version="1.32.0-1.1", targets=targets),
        within=150,
    )
    assert report.status == "completed_with_failures" or report.status == "failed", report.status
    preflight = report.stages[0]
    assert preflight.status == "failed"
    msg = preflight.hosts[0].msg
    assert "skew/apiserver-one-minor-at-a-time" in msg, msg
    assert "https://kubernetes.io/releases/version-skew-policy/" in msg, msg
    # Nothing after preflight ran, and the cluster is as it was.
    assert [s.status for s in report.stages[1:]] == ["pending"] * (len(report.stages) - 1) or all(
        s.status in ("pending", "skipped") for s in report.stages[1:]
    )
    assert sim.kubernetes_version() == "v1.30.6"
    record, _ = upgrade.record(report)
    assert "skew/apiserver-one-minor-at-a-time" in json.dumps(record["failures_and_follow_ups"])


@pytest.mark.timeout(300)
async def test_a_canary_regression_rolls_the_canary_back_and_the_change_record_says_why(
    temporal_client: Client, worker: str, regressed: Upgrade
) -> None:
    sim = regressed.sim
    report = await _run(temporal_client, worker, regressed.request(kernel_target=KERNEL_TARGET), within=240)
    assert report.status == "rolled_back", (report.msg, _failures(report))
    names = [s.name for s in report.stages]
    canary = report.stages[names.index("canary")]
    assert canary.status == "rolled_back"
    assert canary.rollback_reason and "nccl" in canary.rollback_reason.lower(), canary.rollback_reason
    assert [h.status for h in canary.rollback_hosts] == ["ok"]
    # The stages before it had nothing to undo and say so; none after it ran.
    assert report.stages[names.index("control-plane")].status == "ok"
    assert all(s.status in ("pending", "skipped") for s in report.stages[names.index("canary") + 1 :])

    # The canary is back on its old kernel, driver and Fabric Manager (the set it had), schedulable,
    # and its bandwidth is back; the new kernel is gone from it.
    canary_node = sim.node_profile(du.CANARY_NODE)
    assert canary_node.driver_version == "550.90.07"
    assert canary_node.kernel_version == KERNEL_BEFORE
    assert canary_node.packages["nvidia-fabricmanager-550"] == "550.90.07-1"
    assert not any(p.startswith("nvidia-fabricmanager-570") for p in canary_node.packages)
    assert f"linux-image-{KERNEL_TARGET}" not in canary_node.packages
    # ... and it had really been on the new set before the regression was found.
    upgraded = [t for t in canary.hosts[0].tasks if t.name.startswith("Install the target driver")]
    assert [(t.status, KERNEL_TARGET in json.dumps(t.data)) for t in upgraded] == [("changed", True)]
    assert not sim.get("nodes", du.CANARY_NODE)["spec"].get("unschedulable")
    assert sim.node_health(du.CANARY_NODE).nccl_busbw_gbps > 300
    # The run-level rollback wrote the run's report too, after the change record.
    regressed.run_report(report)

    record, markdown = regressed.record(report)
    failures = json.dumps(record["failures_and_follow_ups"]).lower()
    assert "nccl" in failures and "gpu-node-001" in failures
    assert "rolled_back" in json.dumps(record) or "rolled back" in markdown.lower()
