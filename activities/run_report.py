"""`records.run_report`: the run's own report (what `pitstop report` writes) in S3, linked from
the run's artifacts, so reviewers and the Slack thread find it without anyone running the CLI.

The run is the one the task belongs to (`call.run_id`), read with the worker's own Temporal
client as `pitstop report` reads it (pitstop/report/source.py). The task runs inside the run,
so the report is the run *so far*: as the run's last task it shows every stage and host, but
not its own stage's end or the run's final state.

Async, on the worker's event loop: reading the run is Temporal RPCs; drawing (matplotlib) and the
S3 calls (boto3, blocking) run in threads, so the loop keeps serving workflows meanwhile.
Objects: `<prefix>/<cluster>/<run>/<run>.html`, `.md`, the PNGs and `.data.json`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from temporalio import activity

from activities.module_activity import module_activity
from activities.storage import check_s3_access, ensure_bucket, s3_client, s3_errors, uri
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, make_error
from pitstop.module_args.records import RUN_REPORT, RunReportArgs
from pitstop.report.source import ReportSourceError, RunSource, read_run
from pitstop.report.write import RenderedReport, render_report, report_stem

T = TypeVar("T")
NAME = "run report"
# While a thread draws or uploads, the activity still says it is alive this often.
BEAT_SECONDS = 10.0


def report_folder(args: RunReportArgs, call: ModuleCall) -> str:
    cluster = args.cluster or (call.cluster.name if call.cluster is not None else "local")
    return f"{args.prefix.strip('/')}/{report_stem(cluster)}/{report_stem(call.run_id)}"


def link(args: RunReportArgs, key: str) -> str:
    """Where people open the object: under `link_base` when the bucket is served, else s3://."""
    return f"{args.link_base}/{key}" if args.link_base else uri(args.bucket, key)


def _beat(detail: str) -> None:
    activity.heartbeat(detail)


async def _beating(what: str, work: Callable[[], T]) -> T:
    """`work()` in a thread, heartbeating while it runs."""
    task: asyncio.Future[T] = asyncio.ensure_future(asyncio.to_thread(work))
    while True:
        done, _ = await asyncio.wait({task}, timeout=BEAT_SECONDS)
        if done:
            return task.result()
        _beat(what)


def _upload(args: RunReportArgs, module: str, folder: str, rendered: RenderedReport) -> list[str]:
    client = s3_client(args, module)
    if args.create_bucket:
        ensure_bucket(client, args.bucket, client.meta.region_name)
    keys: list[str] = []
    for name, (body, media_type) in rendered.files().items():
        key = f"{folder}/{name}"
        with s3_errors(f"writing the run report {uri(args.bucket, key)}"):
            client.put_object(Bucket=args.bucket, Key=key, Body=body, ContentType=media_type)
        keys.append(key)
    return keys


async def _read(call: ModuleCall) -> RunSource:
    try:
        return await read_run(activity.client(), call.run_id, progress=_beat)
    except ReportSourceError as exc:
        raise make_error(
            ErrorType.PRECONDITION_FAILED, f"{call.module}: cannot read this run for its report: {exc}"
        ) from None


@module_activity(RUN_REPORT)
async def records_run_report(call: ModuleCall, args: RunReportArgs) -> ModuleResult:
    # Refused before the run is read, in check mode too, as the real run would be.
    check_s3_access(args, call.module)
    folder = report_folder(args, call)
    stem = report_stem(call.run_id)
    html_key = f"{folder}/{stem}.html"
    data: dict[str, Any] = {
        "html_key": html_key,
        "md_key": f"{folder}/{stem}.md",
        "data_key": f"{folder}/{stem}.data.json",
        "html_uri": uri(args.bucket, html_key),
        "url": link(args, html_key),
    }
    if call.check_mode:
        return ModuleResult(
            changed=True,
            msg=f"would write {data['html_uri']} with its Markdown, pictures and data (this run so far)",
            data=data,
        )
    source = await _read(call)
    # Drawing imports and runs matplotlib: in a thread, off the loop that serves workflows.
    rendered = await _beating("drawing the report", lambda: render_report(source))
    keys = await _beating("uploading the report", lambda: _upload(args, call.module, folder, rendered))
    data.update(
        keys=keys,
        picture_keys=[f"{folder}/{name}" for name in rendered.pictures],
        run_status=source.report.status,
        artifact={"name": NAME, "uri": data["url"]},
    )
    return ModuleResult(
        changed=True,
        msg=f"run report {data['url']}: the run so far ({source.report.status}), {len(keys)} files",
        data=data,
    )


RUN_REPORT_ACTIVITIES: list[Callable[..., Any]] = [records_run_report]
