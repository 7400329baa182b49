"""`pitstop fleet status` against real components: the shipped fleet-inventory runbook on two
rehearsal clusters seeded with different Kubernetes versions, the shipped etcd-backup runbook
(real etcd, moto S3) on one, a run held at a gate on the other; then the CLI, a subprocess that
reaches only Temporal, shows both clusters' versions, the skew, the backup, "never drilled",
the run in progress, and "never inventoried" for a cluster with no runs; the Markdown holds the
same. An unreachable Temporal is the one-line CLI error."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import SecretStr
from temporalio.client import Client, WorkflowHandle
from typer.testing import CliRunner

from activities import ACTIVITIES
from pitstop.cli.app import build_app
from pitstop.client import connect
from pitstop.codec import ENCODING
from pitstop.codec_keys import generate_key
from pitstop.contracts import Decision, RunReport, RunRequest, RunStatus
from pitstop.devstack import DevStack
from pitstop.fleet import tables as fleet_tables
from pitstop.fleet.source import read_fleet
from pitstop.settings import Settings
from pitstop.worker_app import build_worker
from tests.integration.engine.conftest import RunFn, StartFn, engine_worker, run, start_run, status_when
from tests.integration.etcd.conftest import (
    Site,
    aws_env,
    bucket,
    cluster,
    live_data_dir,
    shipped,
    shipped_tasks,
    site,
)
from tests.integration.sim.conftest import StartSim, start_sim
from workflows import WORKFLOWS

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "aws_env",
    "bucket",
    "cluster",
    "engine_worker",
    "live_data_dir",
    "run",
    "site",
    "start_run",
    "start_sim",
]

REPO = Path(__file__).resolve().parents[2]
PITSTOP = Path(sys.executable).parent / "pitstop"
SIM = """
cluster: {nodes: 1, domains: 1}
timing: {time_scale: 20}
"""


def platform(kubernetes: str) -> str:
    return f"""
platform:
  kubernetes_version: {kubernetes}
  control_plane: {{nodes: 1}}
"""


HELD = """
name: fleet-held
approvers:
  sre: [alice]
stages:
  - name: hold
    hosts: localhost
    gate: {before: true, approvers: sre}
    tasks:
      - debug: {msg: released}
"""


def on(cluster: str, inventory: str = "all:\n  hosts:\n    localhost: {}\n") -> str:
    return f"cluster: {{name: {cluster}}}\n{inventory}"


async def visible(client: Client, query: str, count: int, within: float = 30.0) -> None:
    """Wait until visibility lists `count` runs for `query` (it trails the runs a little)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        found = [w async for w in client.list_workflows(query)]
        if len(found) >= count:
            return
        if loop.time() > deadline:
            raise AssertionError(f"visibility listed {len(found)} of {count} runs for {query!r}")
        await asyncio.sleep(0.1)


def fleet_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TEMPORAL_ADDRESS": settings.temporal_address, "COLUMNS": "400"}
    return subprocess.run(
        [str(PITSTOP), "fleet", "status", *args], capture_output=True, text=True, env=env, timeout=120
    )


def table_rows(text: str) -> list[list[str]]:
    """The rows of every table in the terminal's or the Markdown's output, as cell texts
    (without the Markdown's bold marks)."""
    rows = []
    for line in text.splitlines():
        sep = "│" if line.startswith("│") else "|" if line.startswith("|") else None
        if sep is not None:
            rows.append([c.strip().strip("*") for c in line.split(sep)[1:-1]])
    return rows


@pytest.fixture(autouse=True)
def shipped_compat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PITSTOP_COMPAT_DIR", str(REPO / "runbooks" / "compat"))


async def test_fleet_status_shows_versions_skew_backup_drills_and_runs_of_every_cluster(
    start_sim: StartSim,
    site: Site,
    run: RunFn,
    start_run: StartFn,
    temporal_client: Client,
    temporal_settings: Settings,
    tmp_path: Path,
) -> None:
    old, new, empty = site.cluster, f"{site.cluster}-b", f"{site.cluster}-none"
    start_sim(SIM, platform("v1.30.6")).register(old)
    start_sim(SIM, platform("v1.31.2")).register(new)
    inventory = (REPO / "runbooks" / "fleet-inventory.yaml").read_text()
    latest: dict[str, str] = {}
    for name in (old, new, old):  # the old cluster twice: its newest inventory is shown
        report = await run(inventory, on(name))
        assert report.status == "succeeded", report.msg
        [task] = report.stages[0].hosts[0].tasks
        # Too large for the run's report: the fleet view reads it from the host's history.
        assert task.module == "inventory.versions" and task.data.get("truncated") is True
        latest[name] = report.run_id
    backup = await run(shipped("etcd-backup.yaml"), on(old, site.inventory()), extra_files=shipped_tasks())
    assert backup.status == "succeeded", backup.msg
    held: WorkflowHandle[Any, RunReport] = await start_run(HELD, on(new))

    def gate_open(status: RunStatus) -> bool:
        return any(g.status == "open" for g in status.gates)

    await status_when(held, gate_open, within=60)
    await visible(temporal_client, f"PitstopCluster = '{old}' AND ExecutionStatus = 'Completed'", 3)
    await visible(temporal_client, f"PitstopCluster = '{new}' AND PitstopStatus = 'waiting_gate'", 1)

    markdown = tmp_path / "fleet.md"
    done = await asyncio.to_thread(
        fleet_cli,
        temporal_settings,
        "--clusters",
        f"{old},{new},{empty}",
        "--markdown",
        str(markdown),
        "--html",
        str(tmp_path / "fleet.html"),
    )
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "fleet.html").read_text()
    assert f'<td class="marked">{old} (v1.30.6)</td>' in html and held.id in html
    for text in (done.stdout, markdown.read_text()):
        rows = table_rows(text)
        # Both clusters' inventories (columns in the order named), the skew, and the cluster
        # no run ever inventoried.
        assert ["kubernetes", "v1.30.6", "v1.31.2"] in [r[1:] for r in rows if len(r) == 4]
        assert ["kubernetes", "v1.31.2", "-", f"{old} (v1.30.6)", "-"] in rows
        assert f"{old}: inventoried by fleet-inventory run {latest[old]} at" in text
        assert f"{new}: inventoried by fleet-inventory run {latest[new]} at" in text
        assert f"{empty}: never inventoried: run runbooks/fleet-inventory.yaml on it" in text
        # The backup of one cluster; "never drilled" for both, "never backed up" for the other.
        [old_row] = [r for r in rows if r[0] == old and len(r) == 3]
        assert backup.run_id in old_row[1] and f"s3://{site.bucket}/etcd-backups/{old}/" in old_row[1]
        assert old_row[2] == "never drilled"
        assert [new, "never backed up", "never drilled"] in rows
        # The run held at its gate, with its stage and status.
        assert [new, "fleet-held", held.id, "hold", "waiting_gate"] in [r[:5] for r in rows]

    # Without --clusters: the clusters the newest runs name (the session's other tests' too).
    found = await asyncio.to_thread(fleet_cli, temporal_settings)
    assert found.returncode == 0, found.stderr
    assert {old, new} <= {r[0] for r in table_rows(found.stdout) if len(r) == 3}
    assert empty not in found.stdout

    await held.execute_update("decide", Decision(approve=False, approver="alice", comment="done"))
    await held.result()


def test_an_unreachable_temporal_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
    result = CliRunner().invoke(build_app(["fleet"]), ["fleet", "status", "--clusters", "lab"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: cannot reach Temporal at 127.0.0.1:1 (is `pitstop dev up` running?): Connection refused; "
        "or set TEMPORAL_ADDRESS to your Temporal's host:port"
    ]


async def test_the_last_drill_shows_its_measured_rto_rpo_and_verdict_and_check_runs_are_not_backups(
    start_sim: StartSim, site: Site, run: RunFn, temporal_client: Client, s3_client: S3Client
) -> None:
    start_sim(SIM, platform("v1.30.6")).register(site.cluster)
    backup = await run(
        shipped("etcd-backup.yaml"), on(site.cluster, site.inventory()), extra_files=shipped_tasks()
    )
    assert backup.status == "succeeded", backup.msg
    drill = await run(shipped("etcd-restore-drill.yaml"), on(site.cluster, site.inventory()))
    assert drill.status == "succeeded", drill.msg
    # Check-mode runs after them: a backup that "succeeds" without uploading, a skipped drill.
    for runbook in ("etcd-backup.yaml", "etcd-restore-drill.yaml"):
        checked = await run(
            shipped(runbook), on(site.cluster, site.inventory()), extra_files=shipped_tasks(), check_mode=True
        )
        assert checked.status == "succeeded" and checked.check_mode, checked.msg
    await visible(temporal_client, f"PitstopCluster = '{site.cluster}' AND ExecutionStatus = 'Completed'", 4)

    fleet = await read_fleet(temporal_client, [site.cluster])
    [status] = fleet.clusters
    # The real runs are shown, not the newer check-mode ones.
    assert status.inventory is None and status.backup is not None and status.backup.run_id == backup.run_id
    shown = status.drill
    assert shown is not None and shown.run_id == drill.run_id and shown.passed and shown.reasons == []
    # The figures the drill measured and stored next to the snapshot, read back from the run.
    [key] = [
        o["Key"]
        for o in s3_client.list_objects_v2(Bucket=site.bucket, Prefix=site.prefix)["Contents"]
        if ".drill-" in o["Key"] and o["Key"].endswith(".json")
    ]
    stored = json.loads(s3_client.get_object(Bucket=site.bucket, Key=key)["Body"].read())
    assert (shown.rto_s, shown.rpo_s) == (stored["rto_s"], stored["rpo_s"])
    assert shown.report_uri == f"s3://{site.bucket}/{key.removesuffix('.json')}.md"
    [row] = [r for r in fleet_tables.recovery(fleet).rows if r[0] == site.cluster]
    assert row[2].startswith("PASSED ") and f"run {drill.run_id}, RTO {stored['rto_s']:.1f}s" in row[2]


async def test_an_encrypted_inventory_is_read_through_the_clis_converter(
    start_sim: StartSim, stack: DevStack, task_queue: str
) -> None:
    settings = Settings(
        temporal_address=stack.temporal_address,
        home=stack.home,
        ui_url=stack.ui_url,
        codec_key=SecretStr(generate_key("fleet")),
    )
    client = await connect(settings, tracing=False)
    name = f"enc-{uuid.uuid4().hex[:8]}"
    start_sim(SIM, platform("v1.31.2")).register(name)
    files = {
        "runbook.yaml": (REPO / "runbooks" / "fleet-inventory.yaml").read_text(),
        "inventory.yaml": on(name),
    }
    request = RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files, requested_by="t")
    async with build_worker(client, task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        handle = await client.start_workflow(
            "RunbookWorkflow",
            request,
            id=f"run-{uuid.uuid4().hex[:10]}",
            task_queue=task_queue,
            result_type=RunReport,
        )
        done = await handle.result()
    assert done.status == "succeeded", done.msg
    # Temporal holds the inventory as ciphertext.
    host = client.get_workflow_handle(f"{done.run_id}/{done.stages[0].name}/localhost")
    results = [
        p
        async for e in host.fetch_history_events()
        if e.HasField("activity_task_completed_event_attributes")
        for p in e.activity_task_completed_event_attributes.result.payloads
    ]
    assert results and all(p.metadata["encoding"] == ENCODING and b"v1.31.2" not in p.data for p in results)
    await visible(client, f"PitstopCluster = '{name}' AND ExecutionStatus = 'Completed'", 1)

    fleet = await read_fleet(client, [name])
    [status] = fleet.clusters
    assert status.inventory is not None and status.inventory.run_id == done.run_id
    assert status.inventory.version_of("kubernetes") == "v1.31.2"
