"""Retention's "newest" is the newest real snapshot; a key dated in the future deletes nothing.

The attack: retention ordered snapshots by the time in their key, so an object named
`<cluster>-20991231T000000Z.db` was "the newest"; with `keep_last: 1` (or once the real
snapshots were old) the last real snapshot became eligible for deletion. Now a snapshot counts
only when its sha256 and size metadata are as `storage.upload` wrote them and its key is not
dated in the future or after the store received it (S3 LastModified); anything else is reported
and left alone. Against moto S3 over HTTP; "nothing happened" is the bucket's listing.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from activities.storage import storage_latest, storage_retention, storage_upload
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.retention import KeepLastPolicy, Snapshot, select, snapshot_key
from tests.integration.etcd import conftest as etcd_fixtures
from tests.policy_site import PolicyLayer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

aws_env, bucket, cluster = etcd_fixtures.aws_env, etcd_fixtures.bucket, etcd_fixtures.cluster
PREFIX = "etcd-backups"


def _call(module: str, args: dict[str, Any], check_mode: bool = False) -> ModuleCall:
    return ModuleCall(
        module=module, host="localhost", args=args, check_mode=check_mode, run_id="r", task_path="t"
    )


@pytest.fixture(autouse=True)
def _site(worker_policy: PolicyLayer, tmp_path: Path) -> None:
    # The site keeps its snapshot files in a directory of its own, which its operator lets
    # modules read (storage.upload reads `file`); the stack's policy already allows its S3.
    worker_policy.allow_read(tmp_path)


@pytest.fixture
def s3(s3_endpoint: str, bucket: str) -> dict[str, Any]:
    return {"bucket": bucket, "endpoint_url": s3_endpoint, "addressing_style": "path"}


def _real_snapshot(s3: dict[str, Any], cluster: str, tmp_path: Path, age: timedelta) -> str:
    """A snapshot as the backup runbook leaves it: uploaded by storage.upload."""
    taken = datetime.now(UTC) - age
    source = tmp_path / f"snap-{int(age.total_seconds())}.db"
    source.write_bytes(b"etcd snapshot " + str(age).encode() * 100)
    result = storage_upload(
        _call(
            "storage.upload", {**s3, "file": str(source), "cluster": cluster, "taken_at": taken.isoformat()}
        )
    )
    assert result.changed
    return str(result.data["key"])


def _forged(s3_client: S3Client, s3: dict[str, Any], key: str, body: bytes = b"forged", **meta: str) -> str:
    """An object whose metadata claims to be an upload's (unless `meta` says otherwise)."""
    metadata = {"sha256": hashlib.sha256(body).hexdigest(), "size": str(len(body)), **meta}
    s3_client.put_object(
        Bucket=s3["bucket"], Key=key, Body=body, Metadata={k: v for k, v in metadata.items() if v}
    )
    return key


def _listed(s3_client: S3Client, s3: dict[str, Any]) -> set[str]:
    return {o["Key"] for o in s3_client.list_objects_v2(Bucket=s3["bucket"]).get("Contents", [])}


def _retention(s3: dict[str, Any], cluster: str, check_mode: bool = False, **policy: Any) -> ModuleResult:
    return storage_retention(_call("storage.retention", {**s3, "cluster": cluster, **policy}, check_mode))


def test_a_future_dated_key_never_makes_the_last_real_snapshot_go(
    s3: dict[str, Any], s3_client: S3Client, cluster: str, tmp_path: Path
) -> None:
    real = _real_snapshot(s3, cluster, tmp_path, timedelta(hours=2))
    future = _forged(s3_client, s3, snapshot_key(PREFIX, cluster, datetime(2099, 12, 31, tzinfo=UTC)))
    before = _listed(s3_client, s3)
    for check_mode in (True, False):
        result = _retention(s3, cluster, check_mode, policy="keep_last", keep_last=1)
        assert result.data["newest"] == real
        assert result.data["kept"] == [{"key": real, "reason": "keep_last"}]
        assert result.data["ignored"] == [
            {"key": future, "reason": "its key is dated 2099-12-31T00:00:00Z, in the future"}
        ]
        assert result.data.get("deleted") == [] and not result.changed
        assert "1 objects ignored (not real snapshots)" in result.msg
    assert _listed(s3_client, s3) == before


def test_when_backups_stopped_long_ago_a_future_key_still_deletes_only_what_the_policy_says(
    s3: dict[str, Any], s3_client: S3Client, cluster: str, tmp_path: Path
) -> None:
    older = _real_snapshot(s3, cluster, tmp_path, timedelta(days=50))
    newest = _real_snapshot(s3, cluster, tmp_path, timedelta(days=45))
    future = _forged(s3_client, s3, snapshot_key(PREFIX, cluster, datetime.now(UTC) + timedelta(days=1)))
    result = _retention(s3, cluster)
    assert result.data["newest"] == newest
    assert {"key": newest, "reason": "newest"} in result.data["kept"]
    assert result.data["deleted"] == [older], "the policy still works: the older expired one goes"
    assert [i["key"] for i in result.data["ignored"]] == [future]
    assert _listed(s3_client, s3) == {newest, future}


def test_damaged_or_foreign_objects_are_reported_and_never_counted(
    s3: dict[str, Any], s3_client: S3Client, cluster: str, tmp_path: Path
) -> None:
    real = _real_snapshot(s3, cluster, tmp_path, timedelta(hours=3))
    now = datetime.now(UTC)
    no_sha = _forged(s3_client, s3, snapshot_key(PREFIX, cluster, now - timedelta(hours=1)), sha256="")
    wrong_size = _forged(
        s3_client, s3, snapshot_key(PREFIX, cluster, now - timedelta(hours=2)), size="999999"
    )
    result = _retention(s3, cluster, policy="keep_last", keep_last=1)
    reasons = {i["key"]: i["reason"] for i in result.data["ignored"]}
    assert reasons == {
        no_sha: "it has no sha256 metadata as storage.upload writes it",
        wrong_size: "it holds 6 bytes but storage.upload recorded 999999",
    }
    assert result.data["newest"] == real and result.data["deleted"] == []
    assert _listed(s3_client, s3) == {real, no_sha, wrong_size}


def test_the_restore_drill_never_picks_a_forged_snapshot(
    s3: dict[str, Any], s3_client: S3Client, cluster: str, tmp_path: Path
) -> None:
    real = _real_snapshot(s3, cluster, tmp_path, timedelta(hours=2))
    future = _forged(s3_client, s3, snapshot_key(PREFIX, cluster, datetime(2099, 1, 1, tzinfo=UTC)))
    latest = storage_latest(_call("storage.latest", {**s3, "cluster": cluster}))
    assert latest.data["key"] == real
    assert latest.data["skipped"] == [
        {"key": future, "reason": "its key is dated 2099-01-01T00:00:00Z, in the future"}
    ]
    assert "1 newer objects skipped" in latest.msg


def test_select_judges_by_the_store_time_not_the_key() -> None:
    now = datetime(2026, 6, 1, 12, tzinfo=UTC)
    real = Snapshot("c/real.db", now - timedelta(hours=1), uploaded_at=now - timedelta(hours=1))
    after_upload = Snapshot("c/late.db", now - timedelta(minutes=1), uploaded_at=now - timedelta(hours=5))
    future = Snapshot("c/future.db", now + timedelta(days=400))
    plan = select([real, after_upload, future], KeepLastPolicy(keep_last=1), now)
    assert plan.newest == real and plan.keep == {"c/real.db": "keep_last"} and plan.delete == []
    assert set(plan.ignored) == {"c/late.db", "c/future.db"}
    assert "after the store received it" in plan.ignored["c/late.db"]
