"""The shipped runbooks through the real engine: etcd-backup.yaml, then etcd-restore-drill.yaml,
against the session's etcd and the moto S3 server (RunbookWorkflow on the embedded Temporal,
worker in-process)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from pitstop.contracts import RunReport
from pitstop.devstack import etcd_tool, process_alive
from pitstop.retention import snapshot_key
from pitstop.views import report_view
from tests.integration.engine.conftest import RunFn
from tests.integration.etcd.conftest import Site, put_nodes, settled_digest, shipped, shipped_tasks

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def _gone(path: str | Path) -> bool:
    """Nothing at `path`, or an empty directory."""
    target = Path(path)
    return not target.exists() or (target.is_dir() and not any(target.iterdir()))


def _save_snapshot(endpoint: str, dest: Path) -> None:
    subprocess.run(
        [str(etcd_tool("etcdctl")), f"--endpoints={endpoint}", "snapshot", "save", str(dest)],
        check=True,
        capture_output=True,
    )


def _rendered(report: RunReport) -> str:
    """The report as the CLI prints it, one line per row (wide enough not to wrap)."""
    console = Console(record=True, width=400, file=io.StringIO())
    console.print(report_view(report))
    return console.export_text()


def _registered(report: RunReport) -> dict[str, Any]:
    return report.stages[0].hosts[0].registered


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _keys(s3: S3Client, bucket: str, prefix: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


def _report_json(s3: S3Client, site: Site) -> dict[str, Any]:
    reports = [k for k in _keys(s3, site.bucket, site.prefix) if k.endswith(".json") and ".drill-" in k]
    assert len(reports) == 1, reports
    body: dict[str, Any] = json.loads(s3.get_object(Bucket=site.bucket, Key=reports[0])["Body"].read())
    return body


async def test_backup_then_drill_restores_the_snapshot_and_reports_measured_rto_and_rpo(
    run: RunFn, site: Site, s3_client: S3Client
) -> None:
    put_nodes(site.etcd_endpoint, site.cluster, 3)

    backup = await run(shipped("etcd-backup.yaml"), site.inventory(), extra_files=shipped_tasks())
    assert backup.status == "succeeded", backup.msg
    saved = _registered(backup)
    snapshot, status, upload = saved["snapshot"], saved["status"], saved["upload"]
    assert upload["changed"] is True
    assert _keys(s3_client, site.bucket, site.prefix) == [upload["key"]]
    head = s3_client.head_object(Bucket=site.bucket, Key=upload["key"])
    assert head["Metadata"]["sha256"] == status["sha256"] == upload["sha256"]
    assert int(head["Metadata"]["live-keys"]) == snapshot["live_keys"]
    assert upload["key"] == snapshot_key("etcd-backups", site.cluster, _time(snapshot["taken_at"]))
    assert _gone(snapshot["path"]), "the local snapshot is removed once uploaded"
    nodes_at_snapshot = snapshot["prefix_counts"]["/registry/minions/"]
    assert nodes_at_snapshot >= 3

    # The cluster moves on after the backup: the drill must restore the snapshot's state.
    put_nodes(site.etcd_endpoint, site.cluster, 2, start=3)
    live_before = settled_digest(site.live_data_dir)

    drill = await run(
        shipped("etcd-restore-drill.yaml"),
        site.inventory(),
        vars={"required_prefixes": {"/registry/minions/": {"min": 3}}},
    )
    assert drill.status == "succeeded", drill.msg
    assert settled_digest(site.live_data_dir) == live_before, "the drill touched the live data directory"

    steps = _registered(drill)
    download, verify, member = steps["download"], steps["verify"], steps["member"]
    assert download["key"] == upload["key"] and download["sha256"] == status["sha256"]
    assert verify["passed"] is True
    assert verify["revision"] == status["revision"]
    assert verify["keys"] == snapshot["live_keys"]
    assert verify["prefix_counts"]["/registry/minions/"] == nodes_at_snapshot

    # The report, stored next to the snapshot: RTO and RPO from the steps' own timestamps.
    stored = _report_json(s3_client, site)
    rto = (_time(verify["finished_at"]) - _time(download["started_at"])).total_seconds()
    rpo = (_time(download["started_at"]) - _time(snapshot["taken_at"])).total_seconds()
    assert stored["passed"] is True and stored["reasons"] == []
    assert stored["rto_s"] == round(rto, 3) and rto > 0
    assert stored["rpo_s"] == round(rpo, 3) and rpo > 0
    assert stored["snapshot_key"] == upload["key"]
    assert stored["sha256_expected"] == stored["sha256_actual"] == status["sha256"]
    assert stored["keys_restored"] == stored["keys_expected"] == snapshot["live_keys"]
    report_task = next(t for t in drill.stages[0].hosts[0].tasks if t.module == "records.drill_report")
    assert report_task.status == "changed" and "drill passed" in report_task.msg
    md_key = next(k for k in _keys(s3_client, site.bucket, upload["key"] + ".drill-") if k.endswith(".md"))
    markdown = s3_client.get_object(Bucket=site.bucket, Key=md_key)["Body"].read().decode()
    assert f"etcd restore drill — {site.cluster}: PASSED" in markdown

    # Nothing left running or lying around.
    assert not process_alive(member["pid"])
    assert _gone(member["scratch_dir"])


async def test_a_flipped_byte_in_the_stored_snapshot_fails_the_drill_with_a_checksum_message(
    run: RunFn, site: Site, s3_client: S3Client, tmp_path: Path
) -> None:
    snap = tmp_path / "snap.db"
    _save_snapshot(site.etcd_endpoint, snap)
    data = bytearray(snap.read_bytes())
    good = hashlib.sha256(data).hexdigest()
    key = snapshot_key("etcd-backups", site.cluster, datetime.fromisoformat("2026-01-05T10:00:00+00:00"))
    data[len(data) // 2] ^= 0x01  # one bit of one byte, as bit rot does
    bad = hashlib.sha256(data).hexdigest()
    s3_client.put_object(Bucket=site.bucket, Key=key, Body=bytes(data), Metadata={"sha256": good})

    drill = await run(shipped("etcd-restore-drill.yaml"), site.inventory())

    # The only host (the worker) failed its task list: the run failed, saying where.
    assert drill.status == "failed"
    assert drill.msg.startswith("every host of stage")
    host = drill.stages[0].hosts[0]
    expected = f"checksum mismatch: expected {good}, got {bad}"
    assert host.status == "failed" and host.failed_task == "Drill verdict"
    assert host.msg.startswith("restore drill failed: download failed: ChecksumMismatch: " + expected)
    # What `pitstop run --wait` and `pitstop status` print: the verdict task, the report's address.
    shown = _rendered(drill)
    assert f"Drill verdict: restore drill failed: download failed: ChecksumMismatch: {expected}" in shown
    assert "passed" not in shown.lower()
    assert re.search(
        rf"etcd restore drill FAILED, RTO not measured, RPO [\d.ms h]+: s3://{site.bucket}/\S+\.md", shown
    )
    stored = _report_json(s3_client, site)
    assert stored["passed"] is False
    assert any(expected in reason for reason in stored["reasons"])
    assert [s["state"] for s in stored["steps"]][:2] == ["ok", "failed"]
    assert stored["rto_s"] is None, "no RTO for a drill that did not restore"
    steps = _registered(drill)
    assert "member" not in steps
    assert _gone(site.work / "drills"), "the scratch directory is removed even after a failed drill"


async def test_the_backup_runbook_in_check_mode_changes_nothing(
    run: RunFn, site: Site, s3_client: S3Client
) -> None:
    report = await run(
        shipped("etcd-backup.yaml"), site.inventory(), check_mode=True, extra_files=shipped_tasks()
    )
    assert report.status == "succeeded", report.msg
    outcomes = {t.name: (t.status, t.msg) for t in report.stages[0].hosts[0].tasks}
    assert outcomes["Save a snapshot"][0] == "changed"
    assert outcomes["Save a snapshot"][1].startswith("would save a snapshot of")
    assert outcomes["Upload it, verified"][0] == "skipped"
    assert _keys(s3_client, site.bucket, site.prefix) == []
    assert not (site.work / "backups").exists()
