"""`dr.export_objects` against the simulator's API: Kueue objects exported clean, kinds it does
not serve reported as not installed, and the document set in S3 with the reported SHA-256."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pytest
import yaml
from temporalio.exceptions import ApplicationError

from activities.dr.export import export_objects
from tests.integration.dr.conftest import DrSite

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields")


def _args(bucket: str, s3_endpoint: str, **extra: object) -> dict[str, object]:
    return {
        "bucket": bucket,
        "endpoint_url": s3_endpoint,
        "addressing_style": "path",
        "cluster": "lab",
        **extra,
    }


def test_exports_queue_objects_clean_and_reports_unserved_kinds_as_not_installed(
    dr_site: DrSite, s3_client: S3Client, s3_endpoint: str, bucket: str
) -> None:
    result = dr_site.run(export_objects, dr_site.call("dr.export_objects", _args(bucket, s3_endpoint)))

    data = result.data
    assert data["counts"]["ClusterQueue.kueue.x-k8s.io/v1beta1"] == 1
    assert data["counts"]["LocalQueue.kueue.x-k8s.io/v1beta1"] == 1
    assert (
        "ClusterQueue gpu-cluster-queue" in data["names"] and "LocalQueue training/training" in data["names"]
    )
    # The simulator serves none of these: reported, not a failure.
    assert "NetworkPolicy.networking.k8s.io/v1" in data["not_installed"]

    body = s3_client.get_object(Bucket=bucket, Key=data["key"])["Body"].read()
    assert hashlib.sha256(body).hexdigest() == data["sha256"]
    docs = [d for d in yaml.safe_load_all(body) if d]
    assert len(docs) == data["objects"]
    queue = next(d for d in docs if d["kind"] == "ClusterQueue")
    assert (
        queue["apiVersion"] == "kueue.x-k8s.io/v1beta1" and queue["metadata"]["name"] == "gpu-cluster-queue"
    )
    assert "status" not in queue and queue["spec"]
    for doc in docs:
        assert not set(SERVER_FIELDS) & set(doc["metadata"]), doc["metadata"]


def test_an_endpoint_the_policy_does_not_list_is_refused_before_the_cluster_is_read(
    dr_site: DrSite, s3_client: S3Client, bucket: str
) -> None:
    with pytest.raises(ApplicationError) as refused:
        dr_site.run(
            export_objects, dr_site.call("dr.export_objects", _args(bucket, "http://198.51.100.7:9000"))
        )
    assert refused.value.type == "PolicyViolation"
    assert "S3 endpoint http://198.51.100.7:9000 is not one this worker may use" in refused.value.message
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_a_missing_bucket_is_said_and_nothing_is_left_behind(
    dr_site: DrSite, s3_client: S3Client, s3_endpoint: str
) -> None:
    with pytest.raises(ApplicationError) as failed:
        dr_site.run(
            export_objects, dr_site.call("dr.export_objects", _args("dr-no-such-bucket", s3_endpoint))
        )
    assert "bucket does not exist" in failed.value.message
