"""A promotion over three rehearsal clusters, each reached only by its own worker (issue 21):
runbooks/promotion.yaml takes a Kueue upgrade (v0.9.1 -> v0.10.1, the shipped manifests) from
lab to staging to prod, a gate between rings; each cluster's change is a child run whose module
tasks run on that cluster's activities-only worker.

- A regression in staging (the new release's GPU nodes raise Xid errors there) stops the
  promotion before prod: staging's run rolls itself back, the promotion rolls lab back, and prod
  is untouched (its simulator saw no write at all).
- With prod's worker gone while its ring runs, the promotion waits; a new worker finishes it,
  every step once. `pitstop fleet status` shows the three clusters' Kueue before and after, and
  so do the promotion's own "fleet status (before)" and "(after)" artifacts (`fleet.report`).
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from pitstop.contracts import Decision, RunReport, RunRequest, RunStatus
from pitstop.settings import Settings
from tests.integration.engine.conftest import StartFn, start_run, status_when
from tests.integration.test_fleet_status import fleet_cli, table_rows, visible
from tests.multicluster import ClusterWorker, RehearsedCluster, wait_for

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["start_run"]

REPO = Path(__file__).resolve().parents[3]
PROMOTION = (REPO / "runbooks" / "promotion.yaml").read_text()
KUEUE = REPO / "runbooks" / "manifests" / "platform" / "kueue"
OLD, NEW = "v0.9.1", "v0.10.1"
IMAGE = "registry.k8s.io/kueue/kueue"

# The change each cluster runs (from the workers' runbook directory): the new Kueue release,
# rolled out, and the GPU nodes still healthy on it; its rollback re-applies the previous one.
CHANGE = f"""\
name: kueue-upgrade
vars:
  kueue_from: {OLD}
  kueue_to: {NEW}
stages:
  - name: upgrade
    hosts: localhost
    any_errors_fatal: true
    tasks:
      - name: The new Kueue release
        kube.apply: {{src: "manifests/kueue/{{{{ kueue_to }}}}"}}
      - name: It rolled out
        kube.wait_rollout:
          src: "manifests/kueue/{{{{ kueue_to }}}}"
          timeout_seconds: 120
          poll_interval_seconds: 0.5
    rollback:
      - name: Back to the previous release
        kube.apply: {{src: "manifests/kueue/{{{{ kueue_from }}}}"}}
  - name: verify
    hosts: gpu
    any_errors_fatal: true
    tasks:
      - name: The node raises no GPU errors on the new release
        kube.observe: {{gpu_error_events: [XidError]}}
"""
INSTALL = f"""\
name: kueue-install
stages:
  - name: install
    hosts: localhost
    tasks:
      - kube.apply: {{src: "manifests/kueue/{OLD}"}}
"""
WRITES = ("create", "update", "patch", "delete")


@pytest.fixture
def runbook_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The runbook directory every worker reads (the cluster workers inherit it): the change, the
    Kueue manifests, and the clusters' inventories (written by `promotion_inventory`)."""
    root = tmp_path / "runbooks"
    shutil.copytree(KUEUE, root / "manifests" / "kueue")
    (root / "kueue-upgrade.yaml").write_text(CHANGE)
    (root / "kueue-install.yaml").write_text(INSTALL)
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(root))
    # inventory.versions (fleet-inventory) reads the shipped compatibility data.
    monkeypatch.setenv("PITSTOP_COMPAT_DIR", str(REPO / "runbooks" / "compat"))
    (root / "fleet-inventory.yaml").write_text((REPO / "runbooks" / "fleet-inventory.yaml").read_text())
    return root


def promotion_inventory(runbook_dir: Path, clusters: dict[str, RehearsedCluster]) -> str:
    """Each cluster's own inventory into the runbook directory; the promotion's lists the clusters."""
    rings = {"lab": "ring_lab", "staging": "ring_staging", "prod": "ring_prod"}
    lines = ["all:", "  children:"]
    for name, cluster in clusters.items():
        (runbook_dir / "inventories").mkdir(exist_ok=True)
        shutil.copy(cluster.inventory, runbook_dir / "inventories" / f"{name}.yaml")
        lines += [
            f"    {rings[name]}:",
            "      hosts:",
            f"        {name}: {{cluster_inventory: inventories/{name}.yaml}}",
        ]
    return "\n".join(lines) + "\n"


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def kueue_image(cluster: RehearsedCluster) -> str:
    deployment = cluster.sim.get("apps/deployments", "kueue-controller-manager", namespace="kueue-system")
    assert deployment is not None, f"{cluster.name}: no Kueue controller"
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return str(next(c["image"] for c in containers if IMAGE in c["image"]))


def writes(cluster: RehearsedCluster) -> dict[str, int]:
    requests = cluster.sim.counters().requests
    return {k: v for k, v in requests.items() if k.split(" ")[0] in WRITES}


async def run_on(client: Client, queue: str, runbook: str, cluster: str) -> RunReport:
    """A runbook of the runbook directory on one cluster (its inventory), to its end."""
    request = RunRequest(runbook=runbook, inventory=f"inventories/{cluster}.yaml", requested_by="ops")
    handle = await client.start_workflow(
        "RunbookWorkflow",
        request,
        id=f"{Path(runbook).stem}-{cluster}-{uuid.uuid4().hex[:6]}",
        task_queue=queue,
        result_type=RunReport,
    )
    report: RunReport = await asyncio.wait_for(handle.result(), timeout=90)
    assert report.status == "succeeded", report.model_dump_json(indent=1)
    return report


async def ended(client: Client, run_id: str) -> RunReport:
    report: RunReport = await client.get_workflow_handle(run_id, result_type=RunReport).result()
    return report


async def install_old_release(client: Client, queue: str, clusters: dict[str, RehearsedCluster]) -> None:
    """Each cluster starts on the old release, installed through its own worker."""
    for name in clusters:
        await run_on(client, queue, "kueue-install.yaml", name)
    assert all(kueue_image(c).endswith(f":{OLD}") for c in clusters.values())


async def approve(handle: WorkflowHandle[Any, RunReport], gate: str) -> None:
    def gate_open(status: RunStatus) -> bool:
        return any(g.rule.gate_id == gate and g.status == "open" for g in status.gates)

    await status_when(handle, gate_open, within=120)
    await handle.execute_update("decide", Decision(gate=gate, approver="alice", approve=True, comment="ok"))


async def fleet_kueue(client: Client, settings: Settings, queue: str, names: list[str]) -> dict[str, str]:
    """Each cluster inventoried by the shipped fleet-inventory runbook (through its own worker),
    then `pitstop fleet status` (a CLI reaching only Temporal): the Kueue cell per cluster."""
    for name in names:
        report = await run_on(client, queue, "fleet-inventory.yaml", name)
        await visible(client, f'WorkflowId = "{report.run_id}" AND ExecutionStatus = "Completed"', 1)
    done = fleet_cli(settings, "--clusters", ",".join(names))
    assert done.returncode == 0, done.stderr
    # Columns: the inventory row, the component, then one per cluster in --clusters order.
    header = next(line for line in done.stdout.splitlines() if "component" in line)
    assert [c.strip() for c in header.split("┃")[3:-1]] == names, done.stdout
    kueue = [r for r in table_rows(done.stdout) if len(r) == 2 + len(names) and r[1] == "kueue"]
    assert kueue, done.stdout
    return dict(zip(names, kueue[0][2:], strict=True))


@pytest.mark.timeout(420)
async def test_a_regression_in_staging_rolls_staging_and_lab_back_and_prod_sees_no_write(
    runbook_dir: Path,
    clusters: dict[str, RehearsedCluster],
    start_run: StartFn,
    temporal_client: Client,
    task_queue: str,
) -> None:
    inventory = promotion_inventory(runbook_dir, clusters)
    await install_old_release(temporal_client, task_queue, clusters)
    prod_before = writes(clusters["prod"])
    handle = await start_run(
        PROMOTION, inventory, vars={"change_runbook": "kueue-upgrade.yaml", "soak": "1s", "poll": "0.5s"}
    )
    # The lab ring went through; staging's nodes start raising Xid errors once it is promoted.
    await approve(handle, "staging:before")
    for node in clusters["staging"].nodes:
        clusters["staging"].sim.create(
            "events",
            {
                "metadata": {"name": f"{node}.xid", "namespace": "default"},
                "involvedObject": {"kind": "Node", "name": node},
                "reason": "XidError",
                "message": "Xid 79: GPU has fallen off the bus",
                "type": "Warning",
            },
            namespace="default",
        )
    report = await asyncio.wait_for(handle.result(), timeout=300)

    assert report.status == "rolled_back", report.msg
    staging = await temporal_client.get_workflow_handle(
        f"{handle.id}.staging", result_type=RunReport
    ).result()
    assert staging.status == "rolled_back", staging.msg
    verify = next(s for s in staging.stages if s.name == "verify")
    said = [t.msg for h in verify.hosts for t in h.tasks if t.status == "failed"]
    assert said and all("XidError" in m for m in said), said
    lab = await ended(temporal_client, f"{handle.id}.lab")
    assert lab.status == "rolled_back", "the promotion rolled the ring already done back"
    assert kueue_image(clusters["staging"]).endswith(f":{OLD}")
    assert kueue_image(clusters["lab"]).endswith(f":{OLD}")
    assert kueue_image(clusters["prod"]).endswith(f":{OLD}")
    assert writes(clusters["prod"]) == prod_before, "nothing was written to prod"
    stages = {s.name: s.status for s in report.stages}
    assert stages["production"] != "ok", stages


@pytest.mark.timeout(420)
async def test_prod_waits_for_its_worker_then_every_ring_is_upgraded_once(
    runbook_dir: Path,
    clusters: dict[str, RehearsedCluster],
    start_run: StartFn,
    temporal_client: Client,
    temporal_settings: Settings,
    task_queue: str,
    s3_endpoint: str,
    s3_client: S3Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inventory = promotion_inventory(runbook_dir, clusters)
    await install_old_release(temporal_client, task_queue, clusters)
    before = {name: writes(c) for name, c in clusters.items()}
    names = list(clusters)
    assert set((await fleet_kueue(temporal_client, temporal_settings, task_queue, names)).values()) == {OLD}
    # The promotion's own fleet views go to the stack's S3 (moto takes any credentials).
    bucket = f"fleet-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=bucket)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    fleet_vars = {
        "fleet_report_bucket": bucket,
        "fleet_report_endpoint_url": s3_endpoint,
        "fleet_report_addressing_style": "path",
    }
    handle = await start_run(
        PROMOTION,
        inventory,
        vars={"change_runbook": "kueue-upgrade.yaml", "soak": "1s", "poll": "0.5s", **fleet_vars},
    )
    await approve(handle, "staging:before")
    await approve_when_prod_worker_gone(handle, clusters["prod"])

    # Prod's ring runs with no worker in prod: its change waits on prod's queue, the promotion
    # with it; nothing failed and nothing was written to prod.
    prod_run = temporal_client.get_workflow_handle(f"{handle.id}.prod", result_type=RunReport)

    async def waiting_on_prod() -> bool:
        try:
            status: RunStatus = await prod_run.query("status", result_type=RunStatus)
        except Exception:
            return False
        return status.status == "running" and status.current_stage == "upgrade"

    await wait_for("prod's change to wait for prod's worker", waiting_on_prod, seconds=60)
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    assert kueue_image(clusters["prod"]).endswith(f":{OLD}"), "nothing ran on prod without its worker"

    await clusters["prod"].worker.start(temporal_client)
    report = await asyncio.wait_for(handle.result(), timeout=240)

    assert report.status == "succeeded", report.msg
    for name, cluster in clusters.items():
        assert kueue_image(cluster).endswith(f":{NEW}"), name
        child = await temporal_client.get_workflow_handle(
            f"{handle.id}.{name}", result_type=RunReport
        ).result()
        assert child.status == "succeeded", (name, child.msg)
        tasks = [t for s in child.stages for h in s.hosts for t in h.tasks]
        assert [t.name for t in tasks][:2] == ["The new Kueue release", "It rolled out"], tasks
        assert [t.status for t in tasks if t.name.startswith("The node raises")] == ["ok", "ok"], tasks
    # Each cluster's change ran once: prod (its worker killed, then back) wrote what lab wrote.
    changed = {name: _delta(before[name], writes(c)) for name, c in clusters.items()}
    assert changed["prod"] == changed["lab"] == changed["staging"], changed
    assert changed["prod"], "the change wrote to prod"
    assert set((await fleet_kueue(temporal_client, temporal_settings, task_queue, names)).values()) == {NEW}
    # The promotion lists its clusters' fleet view before and after (each inventoried afresh).
    views = {a.name: a.uri for a in report.artifacts}
    for title, version in (("before", OLD), ("after", NEW)):
        key = views[f"fleet status ({title})"].removeprefix(f"s3://{bucket}/").removesuffix(".html")
        markdown = s3_client.get_object(Bucket=bucket, Key=f"{key}.md")["Body"].read().decode()
        kueue = [r[2:] for r in table_rows(markdown) if len(r) == 2 + len(names) and r[1] == "kueue"]
        assert kueue == [[version] * len(names)], markdown


async def approve_when_prod_worker_gone(
    handle: WorkflowHandle[Any, RunReport], prod: RehearsedCluster
) -> None:
    """At the production gate prod's worker dies (SIGKILL); then the ring is approved."""

    def gate_open(status: RunStatus) -> bool:
        return any(g.rule.gate_id == "production:before" and g.status == "open" for g in status.gates)

    await status_when(handle, gate_open, within=120)
    prod.worker.kill()
    await handle.execute_update(
        "decide", Decision(gate="production:before", approver="alice", approve=True, comment="staging ok")
    )


@pytest.mark.timeout(150)
async def test_a_promotion_whose_inventory_names_a_cluster_queue_is_refused_on_that_worker(
    runbook_dir: Path, cluster_worker: ClusterWorker, start_run: StartFn, temporal_client: Client
) -> None:
    # Its runs.run tasks go to the cluster's activities-only worker, which serves no workflows:
    # a child started there would never run. That worker refuses, saying why.
    await cluster_worker.start(temporal_client)
    rings = "".join(
        f"    ring_{ring}:\n      hosts:\n        {ring}: {{cluster_inventory: inventories/{ring}.yaml}}\n"
        for ring in ("lab", "staging", "prod")
    )
    inventory = (
        f"cluster: {{name: edge, task_queue: {cluster_worker.task_queue}}}\nall:\n  children:\n{rings}"
    )
    handle = await start_run(PROMOTION, inventory, vars={"change_runbook": "kueue-upgrade.yaml"})
    report = await asyncio.wait_for(handle.result(), timeout=90)
    assert report.status != "succeeded"
    said = [t.msg for s in report.stages for h in s.hosts for t in h.tasks if t.status == "failed"]
    assert any("a promotion's inventory lists clusters as hosts and names none" in m for m in said), said
