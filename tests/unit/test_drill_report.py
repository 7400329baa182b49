"""The restore-drill report (activities/records.py): RTO, RPO and verdicts from the steps'
registered results, without S3."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from activities.records import build_drill_report, notify_drill_report, render_markdown, report_keys
from pitstop.module_args.records import DrillReportArgs

T0 = datetime(2026, 4, 6, 3, 30, tzinfo=UTC)
KEY = "etcd-backups/prod/2026/04/06/prod-20260406T020700Z.db"


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _steps(**override: Any) -> dict[str, Any]:
    """Registered results of a drill that went well: download at T0, verified 47.25 s later."""
    steps: dict[str, Any] = {
        "snapshot": {"changed": False, "failed": False, "key": KEY, "taken_at": "2026-04-06T02:07:00Z"},
        "download": {
            "changed": True,
            "failed": False,
            "key": KEY,
            "size": 20512,
            "sha256": "ab" * 32,
            "expected_sha256": "ab" * 32,
            "taken_at": "2026-04-06T02:07:00Z",
            "metadata": {"revision": 812, "live_keys": 40},
            "started_at": _iso(T0),
            "finished_at": _iso(T0 + timedelta(seconds=3)),
        },
        "status": {"changed": False, "failed": False, "revision": 812, "hash_hex": "f85b574c"},
        "restore": {"changed": True, "failed": False, "finished_at": _iso(T0 + timedelta(seconds=9))},
        "member": {"changed": True, "failed": False, "ready_at": _iso(T0 + timedelta(seconds=40))},
        "verify": {
            "changed": False,
            "failed": False,
            "passed": True,
            "keys": 40,
            "checks": [{"check": "revision", "ok": True, "expected": 812, "actual": 812}],
            "finished_at": _iso(T0 + timedelta(seconds=47.25)),
        },
    }
    steps.update(override)
    return steps


def _args(**steps: Any) -> DrillReportArgs:
    return DrillReportArgs.model_validate({"bucket": "backups", "cluster": "prod", **_steps(**steps)})


def test_rto_runs_from_the_download_to_verification_and_rpo_from_the_snapshot_to_the_drill() -> None:
    report = build_drill_report(_args(), "drill-1", now=T0 + timedelta(hours=5))
    assert report.passed and report.reasons == []
    assert report.rto_s == 47.25
    assert report.rpo_s == (T0 - datetime(2026, 4, 6, 2, 7, tzinfo=UTC)).total_seconds() == 4980.0
    assert report.snapshot_uri == f"s3://backups/{KEY}"
    assert report.keys_restored == report.keys_expected == 40
    assert [s.state for s in report.steps] == ["ok"] * 6


def test_a_checksum_mismatch_fails_the_drill_with_the_download_message_and_no_rto() -> None:
    message = "ChecksumMismatch: checksum mismatch: expected " + "ab" * 32 + ", got " + "cd" * 32
    args = _args(
        download={"changed": False, "failed": True, "msg": message},
        status={},
        restore={},
        member={},
        verify={},
    )
    report = build_drill_report(args, "drill-2", now=T0)
    assert not report.passed
    assert report.reasons == [f"download failed: {message}"], "steps after the failure are not blamed"
    assert report.rto_s is None
    assert report.rpo_s == (T0 - datetime(2026, 4, 6, 2, 7, tzinfo=UTC)).total_seconds()
    assert [s.state for s in report.steps] == [
        "ok",
        "failed",
        "not reached",
        "not reached",
        "not reached",
        "not reached",
    ]
    markdown = render_markdown(report)
    assert "FAILED" in markdown and message in markdown and "RTO (download start" in markdown
    assert "not measured" in markdown


def test_a_verification_failure_lists_what_differed() -> None:
    verify = {
        "failed": True,
        "msg": "verify failed: live keys: expected 40, got 39",
        "passed": False,
        "checks": [{"check": "live keys", "ok": False, "expected": 40, "actual": 39}],
        "finished_at": _iso(T0 + timedelta(seconds=50)),
    }
    report = build_drill_report(_args(verify=verify), "drill-3", now=T0)
    assert not report.passed and report.rto_s is None
    assert report.reasons == ["verify failed: live keys: expected 40, got 39"]
    assert "| live keys | NO | 40 | 39 |" in render_markdown(report)


def test_missed_targets_and_a_revision_other_than_the_backup_recorded_fail_the_drill() -> None:
    args = _args(status={"revision": 811, "hash_hex": "00"}).model_copy(
        update={"rto_target_s": 30.0, "rpo_target_s": 3600.0}
    )
    report = build_drill_report(args, "drill-4", now=T0)
    assert not report.passed
    assert report.reasons == [
        "the downloaded snapshot has revision 811, but the backup recorded revision 812",
        "RTO 47.2s exceeds the target of 30s",
        "RPO 4980.0s exceeds the target of 3600s",
    ]


def test_a_drill_that_found_no_snapshot_reports_so_and_is_filed_under_the_cluster() -> None:
    missing = {
        "failed": True,
        "msg": "PreconditionFailed: no snapshot of cluster 'prod' under s3://backups/x/",
    }
    args = _args(snapshot=missing, download={}, status={}, restore={}, member={}, verify={})
    report = build_drill_report(args, "drill-5", now=T0)
    assert not report.passed and report.rpo_s is None and report.snapshot_key is None
    assert report.reasons == [f"snapshot failed: {missing['msg']}"]
    assert report_keys(args, report) == (
        "etcd-backups/prod/drills/drill.drill-20260406T033000Z.json",
        "etcd-backups/prod/drills/drill.drill-20260406T033000Z.md",
    )


def test_reports_are_named_after_their_snapshot_and_the_drill_start() -> None:
    args = _args()
    report = build_drill_report(args, "drill-6", now=T0 + timedelta(days=1))
    assert report_keys(args, report) == (
        f"{KEY}.drill-20260406T033000Z.json",
        f"{KEY}.drill-20260406T033000Z.md",
    )


def test_a_required_step_that_was_skipped_is_not_a_pass() -> None:
    report = build_drill_report(_args(member={"skipped": True, "msg": "nothing restored"}), "drill-7", now=T0)
    assert not report.passed
    assert "member (start the scratch member) was skipped" in report.reasons


def test_notification_says_honestly_that_nothing_was_sent() -> None:
    report = build_drill_report(_args(), "drill-8", now=T0)
    assert notify_drill_report(report, None)["reason"] == "no channel configured"
    sent = notify_drill_report(report, "#sre-dr")
    assert sent["notified"] is False and sent["reason"] == "no notifier delivers to '#sre-dr' yet"
    assert "PASSED" in sent["summary"] and "RTO 47.2s" in sent["summary"]


def test_report_args_refuse_unknown_fields_with_their_name() -> None:
    with pytest.raises(ValidationError, match="rto_target"):
        DrillReportArgs.model_validate({"bucket": "backups", "cluster": "prod", "rto_target": 5})
