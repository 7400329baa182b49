"""Worker policy, S3 rule: modules use only the S3 endpoints (and AWS itself) and the buckets the
operator lists; anything else is refused before a request is signed (issue #13)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.records import records_drill_report
from activities.storage import storage_latest, storage_upload
from pitstop.contracts import ModuleCall
from tests.policy_site import PolicyLayer
from tests.security.recording_http import RecordingServer


@pytest.fixture
def endpoint() -> Iterator[RecordingServer]:
    server = RecordingServer(
        status=404, body=b"<Error><Code>NoSuchBucket</Code><Message>none</Message></Error>"
    )
    yield server.start()
    server.stop()


@pytest.fixture(autouse=True)
def aws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


def _call(module: str, args: dict[str, Any], check_mode: bool = False) -> ModuleCall:
    return ModuleCall(
        module=module, host="localhost", args=args, check_mode=check_mode, run_id="r", task_path="t"
    )


def _refused(fn: Any, call: ModuleCall) -> str:
    with pytest.raises(ApplicationError) as refused:
        fn(call)
    assert refused.value.type == "PolicyViolation" and refused.value.non_retryable
    return str(refused.value)


def test_an_endpoint_the_policy_does_not_list_gets_no_request(endpoint: RecordingServer) -> None:
    args = {"bucket": "loot", "cluster": "c", "endpoint_url": endpoint.url, "addressing_style": "path"}
    message = _refused(storage_latest, _call("storage.latest", args))
    assert f"storage.latest: S3 endpoint {endpoint.url} is not one this worker may use" in message
    assert "ask the worker's operator to add it to PITSTOP_WORKER_POLICY" in message
    assert endpoint.received == []


def test_an_endpoint_from_the_workers_environment_is_judged_the_same(
    endpoint: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint.url)
    message = _refused(storage_latest, _call("storage.latest", {"bucket": "loot", "cluster": "c"}))
    assert f"S3 endpoint {endpoint.url} is not one this worker may use" in message
    assert endpoint.received == []


def test_aws_itself_is_an_endpoint_like_any_other() -> None:
    message = _refused(storage_latest, _call("storage.latest", {"bucket": "acme-backups", "cluster": "c"}))
    assert "S3 endpoint AWS (no endpoint_url) is not one this worker may use" in message


def test_only_the_listed_buckets_of_a_listed_endpoint(
    endpoint: RecordingServer, worker_policy: PolicyLayer
) -> None:
    worker_policy.allow_s3(endpoint.url, ["pitstop-*"])
    args = {"endpoint_url": endpoint.url, "addressing_style": "path", "cluster": "c"}
    message = _refused(storage_latest, _call("storage.latest", {**args, "bucket": "someone-elses"}))
    assert (
        f"bucket 'someone-elses' at {endpoint.url} is not one this worker may use "
        f"(policy s3.endpoints {endpoint.url} buckets: pitstop-*)"
    ) in message
    assert endpoint.received == []
    with pytest.raises(ApplicationError) as allowed:  # allowed: it reaches the endpoint
        storage_latest(_call("storage.latest", {**args, "bucket": "pitstop-backups"}))
    assert allowed.value.type != "PolicyViolation" and endpoint.received


def test_credentials_granted_for_one_endpoint_are_not_sent_to_another(
    endpoint: RecordingServer, worker_policy: PolicyLayer, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PITSTOP_SECRET_BACKUP_S3", "the-backup-credentials")
    worker_policy.allow_s3(endpoint.url).grant("backup-s3", "s3_credentials", endpoints=[s3_endpoint])
    refs = {"access_key_id": {"secret": "backup-s3"}, "secret_access_key": {"secret": "backup-s3"}}
    args = {
        "bucket": "backups",
        "cluster": "c",
        "endpoint_url": endpoint.url,
        "addressing_style": "path",
        **refs,
    }
    message = _refused(storage_latest, _call("storage.latest", args))
    assert (f"secret 'backup-s3' may be sent to {s3_endpoint} only, not to {endpoint.url}") in message
    assert "the-backup-credentials" not in message
    assert endpoint.received == []


def test_check_mode_is_refused_as_the_real_run_would_be(endpoint: RecordingServer) -> None:
    args = {"bucket": "loot", "cluster": "c", "endpoint_url": endpoint.url, "addressing_style": "path"}
    message = _refused(records_drill_report, _call("records.drill_report", args, check_mode=True))
    assert "records.drill_report: S3 endpoint" in message
    upload: dict[str, Any] = {**args, "file": "snap.db", "taken_at": "2026-01-01T00:00:00Z"}
    assert "storage.upload: S3 endpoint" in _refused(storage_upload, _call("storage.upload", upload, True))
    assert endpoint.received == []
