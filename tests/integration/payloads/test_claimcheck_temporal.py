"""The claim-check codec against the real Temporal dev server and moto S3 server: megabytes
pass through a workflow, an activity and a query while no payload in history reaches 1 KiB,
with the blobs in a directory or in S3, encrypted or not; a worker that cannot find a blob
fails its workflow task with a clear error, and finishes the run once the blob is back."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from pitstop.client import connect
from pitstop.codec_claimcheck import ClaimCheckCodec, is_reference, reference_of
from pitstop.codec_keys import generate_key
from pitstop.devstack import DevStack
from pitstop.payload_store import DirectoryStore
from pitstop.payload_store_s3 import S3Store
from pitstop.settings import Settings
from tests.integration.payloads.big_echo import BigEchoWorkflow, big_echo_activity
from tests.payload_sizes import largest_payload, largest_payload_in_run, payloads_with_paths

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MARKER = "marker-claim-check-"
THREE_MB = 3 * 1024 * 1024


def big_text(tag: str) -> str:
    unit = f"{MARKER}{tag}-"
    return (unit * (THREE_MB // len(unit) + 1))[:THREE_MB]


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto accepts any credentials; boto3 must find some in the process's environment."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")


@pytest.fixture
def payload_bucket(s3_client: S3Client, aws_env: None) -> str:
    bucket = f"payloads-{uuid.uuid4().hex[:10]}"
    s3_client.create_bucket(Bucket=bucket)
    return bucket


async def client_with(stack: DevStack, **settings: Any) -> Client:
    return await connect(
        Settings(temporal_address=stack.temporal_address, home=stack.home, ui_url=stack.ui_url, **settings)
    )


def big_echo_worker(client: Client, task_queue: str) -> Worker:
    return Worker(client, task_queue=task_queue, workflows=[BigEchoWorkflow], activities=[big_echo_activity])


async def run_big_echo(client: Client, task_queue: str, blob: str) -> WorkflowHandle[Any, str]:
    async with Worker(
        client, task_queue=task_queue, workflows=[BigEchoWorkflow], activities=[big_echo_activity]
    ):
        handle = await client.start_workflow(
            BigEchoWorkflow.run, blob, id=f"big-echo-{uuid.uuid4().hex[:10]}", task_queue=task_queue
        )
        assert await handle.result() == blob.upper()
        # Answered by a worker replaying the history: every reference read back.
        assert await handle.query(BigEchoWorkflow.last) == blob.upper()
    return handle


def claim_checked(client: Client) -> ClaimCheckCodec:
    codec = client.data_converter.payload_codec
    assert isinstance(codec, ClaimCheckCodec)
    return codec


@pytest.mark.parametrize("backend", ["dir", "s3"])
@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
async def test_megabytes_pass_through_while_history_holds_references(
    stack: DevStack,
    task_queue: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    backend: str,
    encrypted: bool,
) -> None:
    settings: dict[str, Any] = {"codec_key": generate_key("kcc")} if encrypted else {}
    if backend == "s3":
        bucket = request.getfixturevalue("payload_bucket")
        settings |= {"payload_store": f"s3://{bucket}/blobs", "payload_s3_endpoint": stack.s3_endpoint}
    else:
        settings |= {"payload_store": f"dir:{tmp_path / 'payloads'}"}
    client = await client_with(stack, **settings)
    blob = big_text(f"{backend}-{encrypted}")
    handle = await run_big_echo(client, task_queue, blob)

    history = await handle.fetch_history()
    largest = largest_payload(history)
    assert largest is not None and largest.size < 1024, str(largest)
    assert largest == await largest_payload_in_run(client, handle.id)
    references = [
        p for _, p in (x for e in history.events for x in payloads_with_paths(e)) if is_reference(p)
    ]
    # The input, the activity's input and result, and the workflow's result.
    assert len(references) >= 4
    store = claim_checked(client).store
    assert store.describe() == reference_of(references[0]).store
    stored = {ref.sha256: store.get(ref.sha256) for ref in map(reference_of, references)}
    assert all(data is not None and len(data) > THREE_MB for data in stored.values())
    if encrypted:
        assert not any(MARKER.encode() in data for data in stored.values() if data is not None)
    else:  # the same check can fail: the blobs hold the text in the clear
        assert all(MARKER.encode() in data.lower() for data in stored.values() if data is not None)


@pytest.fixture
async def two_stores(stack: DevStack, tmp_path: Path) -> AsyncIterator[tuple[Client, Client, Path, Path]]:
    """A starter and a worker that (wrongly) use different directories."""
    starter_dir, worker_dir = tmp_path / "starter", tmp_path / "worker"
    starter = await client_with(stack, payload_store=f"dir:{starter_dir}")
    worker = await client_with(stack, payload_store=f"dir:{worker_dir}")
    yield starter, worker, starter_dir, worker_dir


async def failed_workflow_task_message(handle: WorkflowHandle[Any, Any]) -> str:
    async for event in handle.fetch_history_events(wait_new_event=True):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            return event.workflow_task_failed_event_attributes.failure.message
    raise AssertionError("the workflow closed without a failed workflow task")


async def test_a_worker_without_the_blob_fails_the_task_clearly_and_recovers_when_it_is_back(
    two_stores: tuple[Client, Client, Path, Path], task_queue: str
) -> None:
    starter, worker_client, starter_dir, worker_dir = two_stores
    blob = big_text("missing")
    handle = await starter.start_workflow(
        BigEchoWorkflow.run, blob, id=f"big-echo-{uuid.uuid4().hex[:10]}", task_queue=task_queue
    )
    [stored] = [p for p in starter_dir.rglob("*") if p.is_file()]
    async with big_echo_worker(worker_client, task_queue):
        message = await failed_workflow_task_message(handle)
        assert f"payload blob {stored.name}" in message
        assert f"is not in this process's payload store dir:{worker_dir}" in message
        assert f"written to dir:{starter_dir}" in message and "PITSTOP_PAYLOAD_STORE" in message
        # The run is not failed: restoring the blob where the worker looks lets the retry go on.
        (worker_dir / stored.parent.name).mkdir(parents=True)
        shutil.copy(stored, worker_dir / stored.parent.name / stored.name)
        # (What the worker wrote since is in its own directory: read the result as it would.)
        assert await worker_client.get_workflow_handle(handle.id).result() == blob.upper()


async def test_the_s3_store_over_real_http(stack: DevStack, payload_bucket: str) -> None:
    store = S3Store(payload_bucket, "p/q", stack.s3_endpoint)
    codec = ClaimCheckCodec(store, threshold=1024)
    big = Payload(metadata={"encoding": b"json/plain"}, data=b"s3" * 10_000)
    [reference] = await codec.encode([big])
    ref = reference_of(reference)
    assert [(b.digest, b.size) for b in store.blobs()] == [(ref.sha256, ref.size)]
    assert await ClaimCheckCodec(store).decode([reference]) == [big]
    store.delete(ref.sha256)
    assert store.get(ref.sha256) is None and list(store.blobs()) == []
    nowhere = S3Store(f"{payload_bucket}-absent", "", stack.s3_endpoint)
    with pytest.raises(Exception, match="does not exist; create it"):
        await ClaimCheckCodec(nowhere, threshold=1024).encode([big])


def test_a_directory_store_is_what_the_dev_stack_shares(stack: DevStack) -> None:
    # Every process started with this PITSTOP_HOME (CLI, worker, the stack's codec server)
    # opens the same directory.
    from pitstop.client import data_converter

    codec = data_converter(Settings(home=stack.home)).payload_codec
    assert isinstance(codec, ClaimCheckCodec) and isinstance(codec.store, DirectoryStore)
    assert codec.store.root == stack.home / "payloads"
