"""records.run_report through a real worker: a run's last task writes the run's own report (as
`pitstop report` draws it) to the moto S3 server and lists it in the run's artifacts; check mode
writes nothing; a refused bucket, an unreachable store or a run that cannot be read fail with
the message a person reads, and nothing is written."""

from __future__ import annotations

import json
import socket
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.run_report import records_run_report
from pitstop.contracts import ModuleCall, RunReport, RunStatus
from pitstop.report.write import report_stem
from tests.integration.engine.conftest import RunFn, StartFn, status_when
from tests.policy_site import PolicyLayer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

LINK_BASE = "https://reports.example.test/site"

RUNBOOK = """
name: report-at-the-end
stages:
  - name: nodes
    hosts: gpu
    tasks:
      - test.step: {value: "{{ inventory_hostname }}"}
  - name: report
    hosts: localhost
    tasks:
      - name: The run's report
        records.run_report:
          bucket: "{{ bucket }}"
          endpoint_url: "{{ s3_endpoint }}"
          addressing_style: path
          cluster: lab
          link_base: "{{ link_base }}"
        register: written
"""


def inventory(bucket: str, s3_endpoint: str, link_base: str = LINK_BASE) -> str:
    return (
        "all:\n"
        "  hosts:\n    localhost: {}\n"
        f"  vars: {{bucket: {bucket}, s3_endpoint: '{s3_endpoint}', link_base: '{link_base}'}}\n"
        "  children:\n"
        "    gpu:\n"
        "      hosts:\n"
        "        h00: {failure_domain: d0}\n"
        "        h01: {failure_domain: d1}\n"
    )


def _keys(s3_client: S3Client, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket).get("Contents", []))


def _report_task(report: RunReport) -> Any:
    [stage] = [s for s in report.stages if s.name == "report"]
    [host] = stage.hosts
    [task] = [t for t in host.tasks if t.module == "records.run_report"]
    return task


async def test_the_last_task_writes_the_run_report_to_s3_and_links_it_from_the_run(
    start_run: StartFn, s3_endpoint: str, bucket: str, s3_client: S3Client
) -> None:
    handle = await start_run(RUNBOOK, inventory(bucket, s3_endpoint))
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    folder = f"run-reports/lab/{report_stem(report.run_id)}"
    stem = report_stem(report.run_id)
    html_key = f"{folder}/{stem}.html"

    # (a) The run lists the report among its artifacts, at the served URL, as `pitstop status` does.
    [artifact] = report.artifacts
    assert (artifact.name, artifact.uri) == ("run report", f"{LINK_BASE}/{html_key}")
    assert (artifact.stage, artifact.host) == ("report", "localhost")
    status = await handle.query("status", result_type=RunStatus)
    assert [a.uri for a in status.artifacts] == [artifact.uri]
    task = _report_task(report)
    assert task.status == "changed"
    assert task.data["html_uri"] == f"s3://{bucket}/{html_key}"

    # (b) The objects are in the bucket: HTML, Markdown, the timeline's PNG and the data.
    assert _keys(s3_client, bucket) == sorted(
        [html_key, f"{folder}/{stem}.md", f"{folder}/{stem}-timeline.png", f"{folder}/{stem}.data.json"]
    )
    page = s3_client.get_object(Bucket=bucket, Key=html_key)
    assert page["ContentType"] == "text/html; charset=utf-8"
    html = page["Body"].read().decode()
    assert report.run_id in html and 'src="data:image/png;base64,iVBOR' in html
    # Written while its own stage ran: the run so far, the fleet's nodes and no row for the worker.
    assert "in progress" in html
    png = s3_client.get_object(Bucket=bucket, Key=f"{folder}/{stem}-timeline.png")["Body"].read()
    assert png.startswith(b"\x89PNG")
    saved = json.loads(s3_client.get_object(Bucket=bucket, Key=f"{folder}/{stem}.data.json")["Body"].read())
    assert sorted(r["host"] for r in saved["derived"]["rows"]) == ["h00", "h01"]
    assert saved["source"]["finished"] is False and saved["source"]["report"]["run_id"] == report.run_id
    markdown = s3_client.get_object(Bucket=bucket, Key=f"{folder}/{stem}.md")["Body"].read().decode()
    assert f"({stem}-timeline.png)" in markdown


async def test_check_mode_says_what_it_would_write_and_writes_nothing(
    start_run: StartFn, s3_endpoint: str, bucket: str, s3_client: S3Client
) -> None:
    handle = await start_run(RUNBOOK, inventory(bucket, s3_endpoint), check_mode=True)
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    task = _report_task(report)
    stem = report_stem(report.run_id)
    assert task.msg.startswith(f"would write s3://{bucket}/run-reports/lab/{stem}/{stem}.html")
    assert report.artifacts == []
    assert _keys(s3_client, bucket) == []


async def test_a_bucket_the_policy_does_not_allow_fails_the_task_and_writes_nothing(
    run: RunFn, worker_policy: PolicyLayer, s3_endpoint: str, bucket: str, s3_client: S3Client
) -> None:
    # The same moto server under another name, where the operator allowed only reports-*.
    alias = s3_endpoint.replace("127.0.0.1", "localhost")
    worker_policy.allow_s3(alias, ["reports-*"])
    report = await run(RUNBOOK, inventory(bucket, alias))
    assert report.status == "failed"
    task = _report_task(report)
    assert task.status == "failed"
    assert (
        f"records.run_report: bucket {bucket!r} at {alias} is not one this worker may use "
        "(policy s3.endpoints"
    ) in task.msg
    assert report.artifacts == []
    assert _keys(s3_client, bucket) == []


def _call(run_id: str, args: dict[str, Any]) -> ModuleCall:
    return ModuleCall(
        module="records.run_report", host="localhost", args=args, run_id=run_id, task_path="report/0"
    )


async def test_an_unreachable_store_is_said_and_a_run_that_cannot_be_read_too(
    run: RunFn,
    temporal_client: Client,
    worker_policy: PolicyLayer,
    s3_endpoint: str,
    bucket: str,
    s3_client: S3Client,
) -> None:
    finished = await run(
        "name: small\nstages:\n  - name: nodes\n    hosts: gpu\n    tasks:\n      - test.step: {value: 1}\n",
        inventory(bucket, s3_endpoint),
    )
    with socket.socket() as sock:  # a port nobody listens on, allowed by the operator
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    worker_policy.allow_s3(closed, ["*"])
    env = ActivityEnvironment(client=temporal_client)
    args = {"bucket": bucket, "endpoint_url": closed, "addressing_style": "path", "request_attempts": 1}

    with pytest.raises(ApplicationError) as unreachable:
        await env.run(records_run_report, _call(finished.run_id, args))
    assert unreachable.value.type == "S3Unavailable"
    stem = report_stem(finished.run_id)
    assert unreachable.value.message.startswith(
        f"writing the run report s3://{bucket}/run-reports/local/{stem}/{stem}.html: cannot reach S3"
    )

    missing = f"no-such-run-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ApplicationError) as unread:
        await env.run(records_run_report, _call(missing, {**args, "endpoint_url": s3_endpoint}))
    assert unread.value.type == "PreconditionFailed" and unread.value.non_retryable
    assert unread.value.message.startswith(
        f"records.run_report: cannot read this run for its report: run {missing!r} not found"
    )
    assert _keys(s3_client, bucket) == []


GATED = """
name: gated
approvers:
  sre: [alice]
stages:
  - name: nodes
    hosts: gpu
    tasks:
      - test.step: {value: 1}
  - name: later
    hosts: gpu
    gate: {before: true, approvers: sre}
    tasks:
      - test.step: {value: 2}
"""


async def test_a_run_waiting_at_a_gate_is_reported_as_far_as_it_went_with_heartbeats(
    start_run: StartFn, temporal_client: Client, s3_endpoint: str, bucket: str, s3_client: S3Client
) -> None:
    handle = await start_run(GATED, inventory(bucket, s3_endpoint))
    try:
        await status_when(handle, lambda s: any(g.status == "open" for g in s.gates))
        beats: list[str] = []
        env = ActivityEnvironment(client=temporal_client)
        env.on_heartbeat = lambda *details: beats.extend(map(str, details))
        args = {"bucket": bucket, "endpoint_url": s3_endpoint, "addressing_style": "path", "cluster": "lab"}
        result = await env.run(records_run_report, _call(handle.id, args))
    finally:
        await handle.terminate("the test has what it needs")
    assert result.changed and result.data["run_status"] == "waiting_gate"
    # Reading the ended hosts said how far it was (what keeps a long read's heartbeat alive).
    assert "2/2 hosts read" in beats
    html = s3_client.get_object(Bucket=bucket, Key=result.data["html_key"])["Body"].read().decode()
    assert "in progress" in html and handle.id in html
