"""`fleet.report`: the fleet view of some clusters (what `pitstop fleet status` shows: versions,
skew, backups and drills, runs in progress) written from inside a run to S3 and listed among the
run's artifacts, so that a promotion shows its clusters before and after its change in its own
details (`pitstop status`, the Temporal UI, the Slack end message).

The view is read exactly as the CLI reads it (pitstop/fleet/source.py `read_fleet`), through the
worker's own Temporal client: from runs only, never from a cluster. Rendered by
pitstop/fleet/render.py. Objects: `<prefix>/<run>/fleet-status[-<title>].md` and `.html`.

Async, on the worker's event loop: reading is Temporal RPCs (bounded by the fleet reader's own
limit); the S3 calls (boto3, blocking) run in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from temporalio import activity

from activities.module_activity import module_activity
from activities.storage import check_s3_access, ensure_bucket, s3_client, s3_errors, uri
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, make_error
from pitstop.fleet import render
from pitstop.fleet.models import FleetStatus
from pitstop.fleet.source import FleetSourceError, read_fleet
from pitstop.module_args.fleet import FLEET_REPORT, FleetReportArgs
from pitstop.report.write import report_stem

T = TypeVar("T")
NAME = "fleet status"
BEAT_SECONDS = 10.0
MEDIA = {"md": "text/markdown; charset=utf-8", "html": "text/html; charset=utf-8"}


def artifact_name(args: FleetReportArgs) -> str:
    return f"{NAME} ({args.title.strip()})" if args.title.strip() else NAME


def keys(args: FleetReportArgs, call: ModuleCall) -> dict[str, str]:
    stem = "fleet-status" + (f"-{report_stem(args.title.strip())}" if args.title.strip() else "")
    folder = f"{args.prefix.strip('/')}/{report_stem(call.run_id)}"
    return {ext: f"{folder}/{stem}.{ext}" for ext in MEDIA}


async def _beating(what: str, work: Coroutine[Any, Any, T]) -> T:
    """Await `work`, heartbeating while it runs (a large fleet takes a while to read)."""
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=BEAT_SECONDS)
        if done:
            return task.result()
        activity.heartbeat(what)


async def _read(call: ModuleCall, args: FleetReportArgs) -> FleetStatus:
    try:
        return await _beating(
            "reading the fleet",
            read_fleet(activity.client(), args.clusters, named_by=f"this run's {call.module}"),
        )
    except FleetSourceError as exc:
        raise make_error(ErrorType.INVALID_ARGS, f"{call.module}: {exc}") from None


def _upload(args: FleetReportArgs, module: str, files: dict[str, tuple[str, str]]) -> None:
    client = s3_client(args, module)
    if args.create_bucket:
        ensure_bucket(client, args.bucket, client.meta.region_name)
    for key, (body, media_type) in files.items():
        with s3_errors(f"writing the fleet report {uri(args.bucket, key)}"):
            client.put_object(Bucket=args.bucket, Key=key, Body=body.encode(), ContentType=media_type)


def summary(fleet: FleetStatus) -> dict[str, Any]:
    """What a runbook registers: each cluster's component versions, the clusters no run
    inventoried, and which run each inventory came from (small: no rows, no skew)."""
    return {
        "versions": fleet.versions(),
        "never_inventoried": [c.name for c in fleet.clusters if c.inventory is None],
        "inventoried_by": {c.name: c.inventory.run_id for c in fleet.clusters if c.inventory is not None},
        "skewed": [s.component for s in fleet.skew],
    }


@module_activity(FLEET_REPORT)
async def fleet_report(call: ModuleCall, args: FleetReportArgs) -> ModuleResult:
    # Refused before anything is read, in check mode too, as the real run would be.
    check_s3_access(args, call.module)
    where = keys(args, call)
    link = f"{args.link_base}/{where['html']}" if args.link_base else uri(args.bucket, where["html"])
    data: dict[str, Any] = {
        "md_key": where["md"],
        "html_key": where["html"],
        "html_uri": uri(args.bucket, where["html"]),
        "url": link,
    }
    # Reading writes nothing: check mode reads the fleet too, so a plan shows the versions.
    fleet = await _read(call, args)
    data.update(summary(fleet))
    inventoried = len(fleet.clusters) - len(data["never_inventoried"])
    counted = f"{len(fleet.clusters)} cluster(s), {inventoried} inventoried"
    if call.check_mode:
        return ModuleResult(
            changed=True, msg=f"would write {data['html_uri']} and its Markdown: {counted}", data=data
        )
    files = {
        where["md"]: (render.markdown(fleet), MEDIA["md"]),
        where["html"]: (render.html(fleet), MEDIA["html"]),
    }
    await _beating("uploading the fleet report", asyncio.to_thread(_upload, args, call.module, files))
    data["artifact"] = {"name": artifact_name(args), "uri": link}
    return ModuleResult(changed=True, msg=f"{artifact_name(args)} {link}: {counted}", data=data)


FLEET_REPORT_ACTIVITIES: list[Callable[..., Any]] = [fleet_report]
