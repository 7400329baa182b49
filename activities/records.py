"""`records.*` modules: what a run leaves for people: the restore-drill report (below) and the
change record of a platform upgrade (`records_change_record`, built by `pitstop.records.change_record`).

The report is built by pure functions from the registered results of the drill's steps
(`build_drill_report`, `render_markdown`), so what it claims is testable without S3:

* RTO — from the drill's start (the download beginning) to the restored member answering
  and passing verification (`verify.finished_at`): how long getting etcd back really took.
* RPO — the drill's start minus the snapshot's time: what would be lost if the cluster had
  died when the drill began and this snapshot were the newest.
* pass/fail with reasons: a failed step (its own message: checksum mismatch, corrupt
  snapshot, a count that differs...), a step never reached, a target missed.

It is written next to the snapshot as `<key>.drill-<YYYYmmddTHHMMSSZ>.json` and `.md`, and
handed to the notification hook (`notify_drill_report`), which reports honestly that no
channel delivers it until the Slack integration exists.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from activities.module_activity import module_activity
from activities.storage import check_s3_access, ensure_bucket, s3_client, s3_errors, uri
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, make_error
from pitstop.module_args.records import (
    CHANGE_RECORD,
    DRILL_REPORT,
    ChangeRecordArgs,
    DrillReportArgs,
)
from pitstop.records.change_record import RecordInputs, build_change_record, sanitize
from pitstop.records.change_record import render_markdown as render_change_record
from pitstop.retention import cluster_prefix, compact_time, snapshot_time

log = logging.getLogger("pitstop.records")

StepState = Literal["ok", "failed", "skipped", "not reached"]
# Steps a drill cannot pass without; the others (finding the newest snapshot, inspecting it)
# are optional: a drill may name its snapshot, and verify checks the revision either way.
REQUIRED_STEPS = frozenset({"download", "restore", "member", "verify"})
STEPS: tuple[tuple[str, str], ...] = (
    ("snapshot", "find the newest snapshot"),
    ("download", "download and checksum"),
    ("status", "inspect the snapshot"),
    ("restore", "restore into a scratch directory"),
    ("member", "start the scratch member"),
    ("verify", "verify the restored data"),
)


class DrillStep(BaseModel):
    name: str
    what: str
    state: StepState
    msg: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None


class DrillReport(BaseModel):
    drill_id: str
    cluster: str
    passed: bool
    reasons: list[str] = Field(default_factory=list)
    started_at: datetime
    restored_at: datetime | None = None
    rto_s: float | None = None
    rpo_s: float | None = None
    rto_target_s: float | None = None
    rpo_target_s: float | None = None
    snapshot_key: str | None = None
    snapshot_uri: str | None = None
    snapshot_taken_at: datetime | None = None
    snapshot_size: int | None = None
    sha256_expected: str | None = None
    sha256_actual: str | None = None
    etcd_hash: str | None = None
    revision: int | None = None
    keys_restored: int | None = None
    keys_expected: int | None = None
    prefix_counts: dict[str, int] = Field(default_factory=dict)
    steps: list[DrillStep] = Field(default_factory=list)
    checks: list[dict[str, Any]] = Field(default_factory=list)


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _step(name: str, what: str, result: dict[str, Any]) -> DrillStep:
    if not result:
        return DrillStep(name=name, what=what, state="not reached")
    if result.get("failed"):
        state: StepState = "failed"
    elif result.get("skipped"):
        state = "skipped"
    else:
        state = "ok"
    return DrillStep(
        name=name,
        what=what,
        state=state,
        msg=str(result.get("msg", "")),
        started_at=_time(result.get("started_at")),
        finished_at=_time(result.get("finished_at") or result.get("ready_at")),
    )


def build_drill_report(args: DrillReportArgs, drill_id: str, now: datetime) -> DrillReport:
    """The report from the steps' registered results; `now` only stands in for a start that
    never happened (no download), never for a measured time."""
    results = {name: getattr(args, name) for name, _ in STEPS}
    steps = [_step(name, what, results[name]) for name, what in STEPS]
    reasons: list[str] = []
    failed = [s for s in steps if s.state == "failed"]
    for step in failed:
        # A module's own message may already say "<step> failed: ..." (etcd.verify's does).
        said = step.msg.removeprefix(f"{step.name} failed: ")
        reasons.append(f"{step.name} failed: {said}" if said else f"{step.name} failed")
    if not failed:
        reasons += [
            f"{s.name} ({s.what}) was {s.state}"
            for s in steps
            if s.state in ("not reached", "skipped") and s.name in REQUIRED_STEPS
        ]

    snapshot, download, status, verify = args.snapshot, args.download, args.status, args.verify
    metadata: dict[str, Any] = download.get("metadata") or snapshot.get("metadata") or {}
    key = download.get("key") or snapshot.get("key")
    taken = (
        _time(download.get("taken_at"))
        or _time(snapshot.get("taken_at"))
        or _time(metadata.get("taken_at"))
        or (snapshot_time(key) if key else None)
    )
    started = _time(download.get("started_at"))
    restored = _time(verify.get("finished_at")) if verify.get("passed") is True else None
    drill_start = started or now
    rto = (restored - started).total_seconds() if restored and started else None
    rpo = (drill_start - taken).total_seconds() if taken else None

    recorded_revision = metadata.get("revision")
    if (
        status.get("revision") is not None
        and recorded_revision is not None
        and int(status["revision"]) != int(recorded_revision)
    ):
        reasons.append(
            f"the downloaded snapshot has revision {status['revision']}, but the backup recorded "
            f"revision {recorded_revision}"
        )
    if args.rto_target_s is not None and rto is not None and rto > args.rto_target_s:
        reasons.append(f"RTO {rto:.1f}s exceeds the target of {args.rto_target_s:g}s")
    if args.rpo_target_s is not None and rpo is not None and rpo > args.rpo_target_s:
        reasons.append(f"RPO {rpo:.1f}s exceeds the target of {args.rpo_target_s:g}s")
    passed = not reasons and restored is not None

    return DrillReport(
        drill_id=drill_id,
        cluster=args.cluster,
        passed=passed,
        reasons=reasons if reasons or passed else ["the restored member was not verified"],
        started_at=drill_start,
        restored_at=restored,
        rto_s=round(rto, 3) if rto is not None else None,
        rpo_s=round(rpo, 3) if rpo is not None else None,
        rto_target_s=args.rto_target_s,
        rpo_target_s=args.rpo_target_s,
        snapshot_key=key,
        snapshot_uri=uri(args.bucket, key) if key else None,
        snapshot_taken_at=taken,
        snapshot_size=download.get("size") or snapshot.get("size"),
        sha256_expected=download.get("expected_sha256") or snapshot.get("sha256"),
        sha256_actual=download.get("sha256"),
        etcd_hash=status.get("hash_hex"),
        revision=status.get("revision"),
        keys_restored=verify.get("keys"),
        keys_expected=metadata.get("live_keys"),
        prefix_counts=verify.get("prefix_counts") or {},
        steps=steps,
        checks=list(verify.get("checks") or []),
    )


def _seconds(value: float | None) -> str:
    if value is None:
        return "not measured"
    minutes, seconds = divmod(value, 60)
    hours, minutes = divmod(int(minutes), 60)
    text = f"{seconds:.1f}s"
    if minutes or hours:
        text = f"{minutes}m {text}"
    if hours:
        text = f"{hours}h {text}"
    return text


def _cell(value: Any) -> str:
    return "—" if value is None or value == "" else str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: DrillReport) -> str:
    verdict = "PASSED" if report.passed else "FAILED"
    size = f"{report.snapshot_size:,} bytes" if report.snapshot_size is not None else None
    lines = [
        f"# etcd restore drill — {report.cluster}: {verdict}",
        "",
        f"Drill `{report.drill_id}`, started {report.started_at.isoformat()}.",
        "",
        "| | |",
        "|---|---|",
        f"| RTO (download start → restored member verified) | {_seconds(report.rto_s)} |",
        f"| RPO (drill start minus snapshot time) | {_seconds(report.rpo_s)} |",
        f"| Snapshot | {_cell(report.snapshot_uri)} |",
        f"| Taken at | {_cell(report.snapshot_taken_at.isoformat() if report.snapshot_taken_at else None)} |",
        f"| Size | {_cell(size)} |",
        f"| SHA-256 expected | {_cell(report.sha256_expected)} |",
        f"| SHA-256 downloaded | {_cell(report.sha256_actual)} |",
        f"| etcd hash / revision | {_cell(report.etcd_hash)} / {_cell(report.revision)} |",
        f"| Keys restored / expected | {_cell(report.keys_restored)} / {_cell(report.keys_expected)} |",
    ]
    if report.rto_target_s is not None or report.rpo_target_s is not None:
        lines.append(
            f"| Targets (RTO / RPO) | {_seconds(report.rto_target_s)} / {_seconds(report.rpo_target_s)} |"
        )
    lines += ["", "## Result", ""]
    lines += [f"- {reason}" for reason in report.reasons] or ["- every step passed"]
    # When each step finished, from the drill's start: where the RTO went.
    lines += ["", "## Steps", "", "| step | state | done at | message |", "|---|---|---|---|"]
    lines += [
        f"| {s.what} | {s.state} | "
        f"{_cell(f'+{(s.finished_at - report.started_at).total_seconds():.1f}s' if s.finished_at else None)} "
        f"| {_cell(s.msg)} |"
        for s in report.steps
    ]
    if report.checks:
        lines += ["", "## Verification", "", "| check | ok | expected | actual |", "|---|---|---|---|"]
        lines += [
            f"| {_cell(c.get('check'))} | {'yes' if c.get('ok') else 'NO'} | {_cell(c.get('expected'))} "
            f"| {_cell(c.get('actual'))} |"
            for c in report.checks
        ]
    return "\n".join(lines) + "\n"


def drill_headline(report: DrillReport) -> str:
    """`etcd restore drill PASSED, RTO 2.1s, RPO 14.0s`: what a person reads first."""
    verdict = "PASSED" if report.passed else "FAILED"
    return f"etcd restore drill {verdict}, RTO {_seconds(report.rto_s)}, RPO {_seconds(report.rpo_s)}"


def notify_drill_report(report: DrillReport, channel: str | None) -> dict[str, Any]:
    """The notification hook. No channel delivers messages yet (the Slack integration comes
    with the notify modules), so it logs the summary and says so rather than pretend."""
    summary = (
        f"etcd restore drill {report.cluster}: {'PASSED' if report.passed else 'FAILED'}, "
        f"RTO {_seconds(report.rto_s)}, RPO {_seconds(report.rpo_s)}"
    )
    log.info("%s", summary)
    reason = "no channel configured" if channel is None else f"no notifier delivers to {channel!r} yet"
    return {"notified": False, "reason": reason, "channel": channel, "summary": summary}


def report_keys(args: DrillReportArgs, report: DrillReport) -> tuple[str, str]:
    stamp = compact_time(report.started_at)
    base = report.snapshot_key or f"{cluster_prefix(args.prefix, args.cluster)}drills/drill"
    return f"{base}.drill-{stamp}.json", f"{base}.drill-{stamp}.md"


@module_activity(DRILL_REPORT)
def records_drill_report(call: ModuleCall, args: DrillReportArgs) -> ModuleResult:
    try:
        report = build_drill_report(args, call.run_id, datetime.now(UTC))
        json_key, md_key = report_keys(args, report)
    except ValueError as exc:
        raise make_error(ErrorType.INVALID_ARGS, str(exc)) from None
    document = report.model_dump(mode="json")
    markdown = render_markdown(report)
    data: dict[str, Any] = {
        "passed": report.passed,
        "reasons": report.reasons,
        "rto_s": report.rto_s,
        "rpo_s": report.rpo_s,
        "json_key": json_key,
        "md_key": md_key,
        "json_uri": uri(args.bucket, json_key),
        "md_uri": uri(args.bucket, md_key),
        "report": document,
        "markdown": markdown,
    }
    verdict = "passed" if report.passed else "FAILED: " + "; ".join(report.reasons)
    if call.check_mode:
        check_s3_access(args, call.module)  # refused in check mode too, as the real run would be
        return ModuleResult(
            changed=True, msg=f"would write {uri(args.bucket, json_key)}; drill {verdict}", data=data
        )
    client = s3_client(args, call.module)
    with s3_errors(f"writing the drill report {uri(args.bucket, json_key)}"):
        client.put_object(
            Bucket=args.bucket,
            Key=json_key,
            Body=json.dumps(document, indent=2, sort_keys=True).encode(),
            ContentType="application/json",
            Metadata={"drill-passed": str(report.passed).lower()},
        )
        client.put_object(
            Bucket=args.bucket, Key=md_key, Body=markdown.encode(), ContentType="text/markdown; charset=utf-8"
        )
    notification = notify_drill_report(report, args.channel)
    # Listed by the run's status and report (`pitstop run --wait`, `pitstop status`): the
    # verdict and the measured RTO/RPO with where to read the rest.
    data["artifact"] = {"name": drill_headline(report), "uri": data["md_uri"]}
    data["notification"] = notification
    data["notified"] = notification["notified"]
    return ModuleResult(
        changed=True, msg=f"drill report {uri(args.bucket, json_key)}: drill {verdict}", data=data
    )


def change_record_keys(args: ChangeRecordArgs, run_id: str) -> tuple[str, str]:
    base = f"{args.prefix.strip('/')}/{sanitize(args.cluster)}/{sanitize(run_id)}"
    return f"{base}.json", f"{base}.md"


def _unchanged(client: Any, bucket: str, key: str, body: bytes) -> bool:
    """Whether the key already holds exactly this body (a retried or repeated write)."""
    try:
        existing = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except client.exceptions.NoSuchKey:
        return False
    return bool(existing == body)


@module_activity(CHANGE_RECORD)
def records_change_record(call: ModuleCall, args: ChangeRecordArgs) -> ModuleResult:
    # The record's inputs are the arguments by the same names (less the S3 settings), with the
    # run's id made sure of.
    fields = args.model_dump(include=set(RecordInputs.model_fields) - {"run"})
    run = args.run if "id" in args.run.model_fields_set else args.run.model_copy(update={"id": call.run_id})
    inputs = RecordInputs.model_validate({**fields, "run": run})
    record = build_change_record(inputs)
    json_key, md_key = change_record_keys(args, record.run_id)
    document = record.model_dump(mode="json")
    markdown = render_change_record(record)
    json_uri, md_uri = uri(args.bucket, json_key), uri(args.bucket, md_key)
    data: dict[str, Any] = {
        "json_uri": json_uri,
        "md_uri": md_uri,
        "outcome": record.outcome,
        "record": document,
        "markdown": markdown,
        "artifact": {"name": "change record", "uri": md_uri},
    }
    if call.check_mode:
        check_s3_access(args, call.module)  # refused in check mode too, as the real run would be
        return ModuleResult(
            changed=True, msg=f"would write {json_uri} and {md_uri}; change {record.status}", data=data
        )
    body = json.dumps(document, indent=2, sort_keys=True).encode()
    client = s3_client(args, call.module)
    if args.create_bucket:
        ensure_bucket(client, args.bucket, client.meta.region_name)
    with s3_errors(f"writing the change record {json_uri}"):
        if _unchanged(client, args.bucket, json_key, body) and _unchanged(
            client, args.bucket, md_key, markdown.encode()
        ):
            return ModuleResult(changed=False, msg=f"change record {md_uri} is up to date", data=data)
        client.put_object(
            Bucket=args.bucket,
            Key=json_key,
            Body=body,
            ContentType="application/json",
            Metadata={"outcome": record.outcome.replace(" ", "-")},
        )
        client.put_object(
            Bucket=args.bucket, Key=md_key, Body=markdown.encode(), ContentType="text/markdown; charset=utf-8"
        )
    return ModuleResult(changed=True, msg=f"change record {md_uri}: {record.status}", data=data)


RECORDS_ACTIVITIES = [records_drill_report, records_change_record]
