"""The storage.* activities called directly against the moto S3 server: naming, metadata,
encryption, checksums, refusals and retention."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.storage import storage_download, storage_latest, storage_retention, storage_upload
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.retention import ExponentialPolicy, Snapshot, select, snapshot_key, snapshot_time
from tests.policy_site import PolicyLayer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _site(worker_policy: PolicyLayer, tmp_path: Path, s3_endpoint: str) -> None:
    # Snapshot files live where the operator lets modules write; the S3 secret is granted as
    # credentials for the stack's S3 (whose endpoint the stack's policy already allows).
    worker_policy.allow_write(tmp_path).grant("s3-backup", "s3_credentials", endpoints=[s3_endpoint])


def call(module: str, args: dict[str, Any], check_mode: bool = False) -> ModuleCall:
    return ModuleCall(
        module=module, host="localhost", args=args, check_mode=check_mode, run_id="run-s", task_path="t"
    )


@pytest.fixture
def s3(s3_endpoint: str, bucket: str) -> dict[str, Any]:
    return {"bucket": bucket, "endpoint_url": s3_endpoint, "addressing_style": "path"}


def upload(s3: dict[str, Any], path: Path, **extra: Any) -> ModuleResult:
    return storage_upload(call("storage.upload", {**s3, "file": str(path), **extra}))


def test_upload_names_encrypts_and_describes_the_object_and_download_reads_it_back(
    s3: dict[str, Any], s3_client: S3Client, cluster: str, tmp_path: Path
) -> None:
    source = tmp_path / "snap.db"
    source.write_bytes(os.urandom(6 * MIB + 123))
    taken = "2026-03-04T05:06:07Z"
    result = upload(
        s3,
        source,
        cluster=cluster,
        taken_at=taken,
        part_size_mb=5,
        sse="AES256",
        verify="checksum",
        metadata={"revision": 42, "live_keys": 7, "prefix_counts": {"/registry/minions/": 3}},
    )
    key = f"etcd-backups/{cluster}/2026/03/04/{cluster}-20260304T050607Z.db"
    assert result.changed and result.data["key"] == key and result.data["parts"] == 2
    assert result.data["verified"] == "checksum"
    head = s3_client.head_object(Bucket=s3["bucket"], Key=key)
    assert head["ServerSideEncryption"] == "AES256"
    assert head["Metadata"]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert head["Metadata"]["taken-at"] == taken and head["Metadata"]["live-keys"] == "7"

    dest = tmp_path / "restore" / "snap.db"
    got = storage_download(call("storage.download", {**s3, "key": key, "dest": str(dest)}))
    assert got.changed and dest.read_bytes() == source.read_bytes()
    assert got.data["metadata"]["prefix_counts"] == {"/registry/minions/": 3}
    assert got.data["metadata"]["revision"] == 42 and got.data["taken_at"] == taken
    again = storage_download(call("storage.download", {**s3, "key": key, "dest": str(dest)}))
    assert not again.changed, "a file already holding the object is not downloaded again"


def test_a_different_file_is_never_uploaded_over_an_existing_snapshot(
    s3: dict[str, Any], cluster: str, tmp_path: Path
) -> None:
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    first.write_bytes(b"a" * 1000)
    second.write_bytes(b"b" * 1000)
    naming = {"cluster": cluster, "taken_at": "2026-03-04T05:06:07Z"}
    assert upload(s3, first, **naming).changed
    with pytest.raises(ApplicationError) as refused:
        upload(s3, second, **naming)
    assert refused.value.type == "PreconditionFailed"
    assert "already holds a different object" in refused.value.message
    assert "refusing to overwrite another snapshot" in refused.value.message


def test_a_checksum_mismatch_on_download_is_permanent_and_leaves_no_file(
    s3: dict[str, Any], s3_client: S3Client, tmp_path: Path
) -> None:
    body = b"etcd" * 1000
    claimed = hashlib.sha256(b"something else").hexdigest()
    s3_client.put_object(Bucket=s3["bucket"], Key="k.db", Body=body, Metadata={"sha256": claimed})
    dest = tmp_path / "k.db"
    with pytest.raises(ApplicationError) as mismatch:
        storage_download(call("storage.download", {**s3, "key": "k.db", "dest": str(dest)}))
    assert mismatch.value.type == "ChecksumMismatch" and mismatch.value.non_retryable
    actual = hashlib.sha256(body).hexdigest()
    assert mismatch.value.message.startswith(f"checksum mismatch: expected {claimed}, got {actual}")
    assert not dest.exists() and not dest.with_name("k.db.part").exists()


def test_storage_errors_say_what_to_fix(
    s3: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_endpoint: str
) -> None:
    source = tmp_path / "x.db"
    source.write_bytes(b"x")
    with pytest.raises(ApplicationError, match=r"bucket does not exist .*create it first"):
        upload({**s3, "bucket": "no-such-bucket-here"}, source, cluster="c")
    refs = {
        "access_key_id": {"secret": "s3-backup", "key": "id"},
        "secret_access_key": {"secret": "s3-backup"},
    }
    with pytest.raises(
        ApplicationError, match=r"S3 access_key_id: secret 's3-backup' \(key 'id'\) not found"
    ):
        upload(s3, source, cluster="c", **refs)
    monkeypatch.setenv("PITSTOP_SECRET_S3_BACKUP_ID", "from-secret")
    monkeypatch.setenv("PITSTOP_SECRET_S3_BACKUP", "also-from-secret")
    assert upload(s3, source, cluster="c", **refs).changed, "credentials from secrets are used"
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ApplicationError) as anonymous:
        upload(s3, source, cluster="c", taken_at="2026-01-01T00:00:00Z")
    assert anonymous.value.type == "Unauthorized" and "no S3 credentials" in anonymous.value.message


def test_the_endpoint_can_come_from_the_workers_environment(
    s3: dict[str, Any], s3_endpoint: str, cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "env.db"
    source.write_bytes(b"etcd snapshot")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    without_endpoint = {k: v for k, v in s3.items() if k != "endpoint_url"}
    result = upload(without_endpoint, source, cluster=cluster, taken_at="2026-01-01T00:00:00Z")
    assert result.changed and result.data["uri"].startswith(f"s3://{s3['bucket']}/etcd-backups/{cluster}/")


def _put_snapshot(s3_client: S3Client, bucket: str, cluster: str, taken: datetime) -> str:
    key = snapshot_key("etcd-backups", cluster, taken)
    s3_client.put_object(
        Bucket=bucket, Key=key, Body=b"snap", Metadata={"sha256": hashlib.sha256(b"snap").hexdigest()}
    )
    return key


def test_retention_deletes_what_the_policy_says_and_keeps_the_newest_verified(
    s3: dict[str, Any], s3_client: S3Client, cluster: str
) -> None:
    now = datetime.now(UTC)
    ages = [
        timedelta(minutes=5),
        timedelta(minutes=40),
        timedelta(hours=3, minutes=10),
        timedelta(hours=3, minutes=20),
    ]
    ages += [timedelta(days=d, hours=h) for d, h in ((2, 1), (2, 2), (10, 0), (11, 0), (45, 0), (50, 0))]
    # Uploaded oldest first, as a backup schedule would: the newest upload is the newest snapshot.
    keys = {
        age: _put_snapshot(s3_client, s3["bucket"], cluster, now - age) for age in sorted(ages, reverse=True)
    }
    verified = keys[timedelta(days=50)]
    report = f"{verified}.drill-20260101T000000Z.json"
    s3_client.put_object(Bucket=s3["bucket"], Key=report, Body=json.dumps({"passed": True}).encode())
    args = {**s3, "cluster": cluster}

    planned = storage_retention(call("storage.retention", args, check_mode=True))
    listed = lambda: {o["Key"] for o in s3_client.list_objects_v2(Bucket=s3["bucket"])["Contents"]}  # noqa: E731
    assert listed() == {*keys.values(), report}, "check mode deletes nothing"

    before = s3_client.list_objects_v2(Bucket=s3["bucket"])["Contents"]
    done = storage_retention(call("storage.retention", args))

    assert done.data["ignored"] == [], "every object is a real snapshot"
    # The expectation is computed for the moment the module decided at (it reports it).
    as_of = datetime.fromisoformat(done.data["as_of"])
    assert now <= as_of <= datetime.now(UTC)
    # As the module reads them: the time from the key, and the store's upload time (LastModified),
    # which decides "the newest" (a key's time is only a claim).
    uploaded = {o["Key"]: o["LastModified"].astimezone(UTC) for o in before}
    snapshots = [Snapshot(k, t, k == verified, uploaded[k]) for k in keys.values() if (t := snapshot_time(k))]
    expected = select(snapshots, ExponentialPolicy(), as_of)
    assert done.data["newest"] == keys[timedelta(minutes=5)] == (expected.newest and expected.newest.key)
    assert len(expected.keep) + len(expected.delete) == len(keys)
    assert sorted(done.data["deleted"]) == sorted(s.key for s in expected.delete)
    assert sorted(planned.data["would_delete"]) == sorted(done.data["deleted"])
    assert done.data["newest_verified"] == verified
    assert listed() == {*expected.keep, report}
    assert verified in listed() and keys[timedelta(days=45)] not in listed()
    assert not storage_retention(call("storage.retention", args)).changed


def test_latest_is_the_newest_by_snapshot_time_not_by_upload_time(
    s3: dict[str, Any], s3_client: S3Client, cluster: str
) -> None:
    newer = _put_snapshot(s3_client, s3["bucket"], cluster, datetime(2026, 5, 2, tzinfo=UTC))
    older = _put_snapshot(s3_client, s3["bucket"], cluster, datetime(2026, 5, 1, tzinfo=UTC))  # uploaded last
    s3_client.put_object(Bucket=s3["bucket"], Key=f"{newer}.drill-20260503T000000Z.json", Body=b"{}")
    latest = storage_latest(call("storage.latest", {**s3, "cluster": cluster}))
    assert latest.data["key"] == newer and latest.data["snapshots"] == 2 and older != newer
    with pytest.raises(ApplicationError, match=r"no snapshot of cluster 'other' under s3://"):
        storage_latest(call("storage.latest", {**s3, "cluster": "other"}))
