"""`dr.pki_backup` against a simulated control-plane node over SSH and the moto S3 server: the
archive in S3 holds the node's real files, the result only names, sizes and hashes, and every
refusal leaves nothing in the bucket."""

from __future__ import annotations

import hashlib
import io
import json
import re
import socket
import tarfile
from typing import TYPE_CHECKING

import pytest
import yaml
from temporalio.exceptions import ApplicationError

from activities.dr.pki import pki_backup
from pitstop.policy.files import run_work_dir
from pitstop.policy.load import current_policy
from tests.integration.dr.conftest import CP, GPU, DrSite

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def _args(bucket: str, s3_endpoint: str, **extra: object) -> dict[str, object]:
    return {
        "bucket": bucket,
        "endpoint_url": s3_endpoint,
        "addressing_style": "path",
        "cluster": "lab",
        **extra,
    }


def _keys(s3_client: S3Client, bucket: str) -> list[str]:
    return [o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_archives_the_pki_and_kubeadm_config_verified_and_reports_only_names_sizes_and_hashes(
    dr_site: DrSite, s3_client: S3Client, s3_endpoint: str, bucket: str
) -> None:
    result = dr_site.run(pki_backup, dr_site.call("dr.pki_backup", _args(bucket, s3_endpoint, sse="AES256")))

    data = result.data
    assert result.changed and data["verified"] == "read"
    assert re.fullmatch(rf"dr-backups/lab/pki/\d{{4}}/\d\d/\d\d/lab-{CP}-\d{{8}}T\d{{6}}Z\.tar", data["key"])
    names = {f["name"]: f for f in data["files"]}
    for name in (
        "pki/ca.crt",
        "pki/ca.key",
        "pki/sa.key",
        "pki/sa.pub",
        "pki/front-proxy-ca.key",
        "pki/etcd/ca.key",
        "pki/apiserver.crt",
        "kubeadm-config.yaml",
    ):
        assert name in names, name
    assert names["pki/ca.key"]["kind"] == "private key"

    # The object is the archive, its SHA-256 the one reported, encrypted at rest as asked.
    body = s3_client.get_object(Bucket=bucket, Key=data["key"])
    blob = body["Body"].read()
    assert hashlib.sha256(blob).hexdigest() == data["sha256"] == body["Metadata"]["sha256"]
    assert body.get("ServerSideEncryption") == "AES256"
    with tarfile.open(fileobj=io.BytesIO(blob)) as archive:
        ca_key = archive.extractfile("pki/ca.key")
        assert ca_key is not None
        key_bytes = ca_key.read()
        assert b"PRIVATE KEY" in key_bytes
        assert hashlib.sha256(key_bytes).hexdigest() == names["pki/ca.key"]["sha256"]
        assert "kubeadm-config.yaml" in archive.getnames()
        configmap = archive.extractfile("kubeadm-config.configmap.yaml")
        assert configmap is not None
        cluster_config = yaml.safe_load(configmap.read())["data"]["ClusterConfiguration"]
        assert (
            "kind: ClusterConfiguration\nclusterName: kubernetes\nkubernetesVersion: v1.30.6\n"
            in cluster_config
        )
    assert data["kubeadm_configmap"] == {"included": True, "why": "read from the API"}

    # Nothing of a key in what goes to history.
    shown = json.dumps(result.model_dump())
    assert "PRIVATE KEY" not in shown
    assert key_bytes.decode().splitlines()[1] not in shown


def test_a_node_without_a_pki_is_refused_and_nothing_is_uploaded(
    dr_site: DrSite, s3_client: S3Client, s3_endpoint: str, bucket: str
) -> None:
    with pytest.raises(ApplicationError) as refused:
        dr_site.run(pki_backup, dr_site.call("dr.pki_backup", _args(bucket, s3_endpoint), host=GPU))
    assert refused.value.type == "PreconditionFailed"
    assert f"{GPU} has none of /etc/kubernetes/pki (is it a control-plane node?)" in refused.value.message
    assert _keys(s3_client, bucket) == []


def test_an_endpoint_the_policy_does_not_list_is_refused_before_anything_is_read(
    dr_site: DrSite, s3_client: S3Client, s3_endpoint: str, bucket: str
) -> None:
    with pytest.raises(ApplicationError) as refused:
        dr_site.run(pki_backup, dr_site.call("dr.pki_backup", _args(bucket, "http://198.51.100.7:9000")))
    assert refused.value.type == "PolicyViolation"
    assert "S3 endpoint http://198.51.100.7:9000 is not one this worker may use" in refused.value.message
    assert _keys(s3_client, bucket) == []


def test_a_bucket_the_policy_does_not_list_is_refused(
    dr_site: DrSite, s3_client: S3Client, s3_endpoint: str, bucket: str
) -> None:
    # The same moto server under another name, where the operator allowed only dr-allowed-*.
    alias = s3_endpoint.replace("127.0.0.1", "localhost")
    dr_site.policy.allow_s3(alias, ["dr-allowed-*"])
    with pytest.raises(ApplicationError) as refused:
        dr_site.run(pki_backup, dr_site.call("dr.pki_backup", _args(bucket, alias)))
    assert refused.value.type == "PolicyViolation"
    assert f"bucket {bucket!r} at {alias} is not one this worker may use" in refused.value.message
    assert _keys(s3_client, bucket) == []


def test_an_unreachable_node_fails_with_the_reason_and_nothing_is_uploaded(
    dr_site: DrSite, s3_client: S3Client, s3_endpoint: str, bucket: str
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    call = dr_site.call("dr.pki_backup", _args(bucket, s3_endpoint))
    call = call.model_copy(update={"host_vars": {**call.host_vars, "ansible_port": closed}})
    with pytest.raises(ApplicationError) as failed:
        dr_site.run(pki_backup, call)
    assert failed.value.type == "HostUnreachable"
    assert "refused" in failed.value.message.lower()
    assert _keys(s3_client, bucket) == []


def test_check_mode_says_what_it_would_archive_and_uploads_nothing(
    dr_site: DrSite, s3_client: S3Client, s3_endpoint: str, bucket: str
) -> None:
    result = dr_site.run(
        pki_backup, dr_site.call("dr.pki_backup", _args(bucket, s3_endpoint), check_mode=True)
    )
    assert result.changed and "would archive pki, kubeadm-config.yaml" in result.msg
    assert _keys(s3_client, bucket) == []


def test_without_become_the_keys_cannot_be_read_and_nothing_is_uploaded_or_left_on_the_worker(
    dr_site: DrSite, s3_client: S3Client, s3_endpoint: str, bucket: str
) -> None:
    call = dr_site.call("dr.pki_backup", _args(bucket, s3_endpoint, become=False))
    with pytest.raises(ApplicationError) as failed:
        dr_site.run(pki_backup, call)
    assert failed.value.type == "PreconditionFailed"
    assert failed.value.message.startswith(f"archiving /etc/kubernetes on {CP} failed (tar rc 2): ")
    assert "tar: pki/ca.key: Cannot open: Permission denied" in failed.value.message
    assert _keys(s3_client, bucket) == []
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert list((run_work_dir(call.run_id) / "dr").iterdir()) == []


def test_a_worker_that_reaches_only_the_nodes_still_backs_up_their_files_and_says_why_no_configmap(
    dr_site: DrSite, s3_client: S3Client, s3_endpoint: str, bucket: str
) -> None:
    cluster = dr_site.inventory.cluster
    assert cluster is not None
    (current_policy().clusters_dir.path / cluster.name / "kubeconfig").unlink()
    result = dr_site.run(pki_backup, dr_site.call("dr.pki_backup", _args(bucket, s3_endpoint)))
    assert result.data["kubeadm_configmap"]["included"] is False
    assert result.data["kubeadm_configmap"]["why"].startswith(
        f"not read: dr.pki_backup: cluster {cluster.name!r} has no Kubernetes access on this worker"
    )
    assert "kubeadm-config.yaml" in {f["name"] for f in result.data["files"]}
    assert _keys(s3_client, bucket) == [result.data["key"]]
