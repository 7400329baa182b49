"""storage.upload when S3 fails in the middle of a multipart upload: the failed upload is
aborted, Temporal retries the activity, and exactly one complete object remains."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.integration.engine.conftest import RunFn
from tests.integration.etcd.conftest import Site
from tests.integration.etcd.faulty_s3 import FaultyS3
from tests.policy_site import PolicyLayer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MIB = 1024 * 1024


@pytest.fixture
def faulty_s3(s3_endpoint: str, worker_policy: PolicyLayer) -> Iterator[FaultyS3]:
    proxy = FaultyS3(s3_endpoint, fail_part=2).start()
    worker_policy.allow_s3(proxy.endpoint)  # an S3 endpoint of the site, as any other
    yield proxy
    proxy.stop()


def _upload_task(site: Site, endpoint: str, path: Path, register: str) -> str:
    return f"""
  - name: upload {register}
    storage.upload:
      bucket: {site.bucket}
      endpoint_url: {endpoint}
      addressing_style: path
      file: {path}
      cluster: {site.cluster}
      taken_at: "2026-02-03T04:05:06Z"
      part_size_mb: 5
    register: {register}
"""


async def _upload_attempts(client: Client, workflow_id: str) -> list[int]:
    """Attempt numbers of every storage.upload activity in the host's history."""
    attempts: dict[int, int] = {}
    names: dict[int, str] = {}
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            attempts[attrs.scheduled_event_id] = attrs.attempt
    return [n for sid, n in attempts.items() if names.get(sid) == "module.storage.upload"]


async def test_s3_failing_mid_upload_is_retried_and_leaves_one_complete_object(
    run: RunFn, site: Site, faulty_s3: FaultyS3, s3_client: S3Client, temporal_client: Client
) -> None:
    snapshot = site.work / "snapshot.db"
    snapshot.write_bytes(os.urandom(12 * MIB))  # three parts of 5, 5 and 2 MiB
    runbook = "name: upload-under-faults\nhosts: localhost\ntasks:" + "".join(
        _upload_task(site, faulty_s3.endpoint, snapshot, name) for name in ("first", "again")
    )

    report = await run(runbook, site.inventory())

    assert report.status == "succeeded", report.msg
    registered = report.stages[0].hosts[0].registered
    first, again = registered["first"], registered["again"]
    # Part 2 of the first multipart upload failed on every botocore attempt...
    assert faulty_s3.failures >= 1 and faulty_s3.failed_upload is not None
    # ...so that upload was aborted, and Temporal ran the activity again: a new upload completed.
    assert faulty_s3.count("DELETE", has="uploadId", status=204) >= 1
    assert faulty_s3.count("POST", has="uploads", status=200) == 2
    assert faulty_s3.count("POST", has="uploadId", status=200) == 1
    host_workflow = f"{report.run_id}/{report.stages[0].name}/localhost"
    assert await _upload_attempts(temporal_client, host_workflow) == [2, 1]

    assert first["changed"] is True and first["parts"] == 3
    assert again["changed"] is False, "the same file to the same key is not uploaded twice"
    assert "Uploads" not in s3_client.list_multipart_uploads(Bucket=site.bucket)
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=site.bucket).get("Contents", [])]
    assert keys == [first["key"]]
    body = s3_client.get_object(Bucket=site.bucket, Key=first["key"])["Body"].read()
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(snapshot.read_bytes()).hexdigest()
