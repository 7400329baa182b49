"""`storage.*` modules: etcd snapshots in S3-compatible object storage (boto3).

Streaming, never buffering: an upload holds one part (`part_size_mb`) in memory at a time, a
download one 1 MiB chunk, whatever the snapshot's size (bench/snapshot_stream.py measures it).

Upload, step by step (each step safe to repeat when Temporal retries the activity):
  1. hash the file (SHA-256, streamed) — it becomes the object's `sha256` metadata, which
     must be known when the multipart upload is created;
  2. if the key already holds an object with that `sha256` and size: done, changed=false;
     a different object under the key is refused (two snapshots never share a name);
  3. abort multipart uploads left under the key by an attempt that died (worker killed);
  4. create the multipart upload (ChecksumAlgorithm=SHA256), send each part with its own
     SHA-256 (the store rejects a part damaged in transit), hashing the stream again;
     any error aborts the multipart upload, so no partial object or orphaned parts remain;
  5. complete it, then verify: read the object back and hash it (`verify: read`), or compare
     the store's SHA-256 of the parts with ours (`verify: checksum`).

Worker policy: the endpoint and bucket must be allowed (`s3.endpoints`) and credentials given
as secrets must be granted as `s3_credentials` for that endpoint, all checked before a client
exists (so nothing is signed or sent otherwise); `file` must be readable and `dest` writable
under the files rule (relative paths: the run's work directory), and `dest` is written without
following symlinks (docs/policy.md).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
from temporalio import activity

from activities.module_activity import module_activity
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail, make_error
from pitstop.module_args.storage import (
    DOWNLOAD,
    LATEST,
    RETENTION,
    UPLOAD,
    DownloadArgs,
    LatestArgs,
    RetentionArgs,
    S3Args,
    UploadArgs,
)
from pitstop.module_spec import ModuleArgs, SecretRef
from pitstop.policy.files import AllowedPath, directory_fd, open_nofollow, readable, writable
from pitstop.policy.grants import check_grant
from pitstop.policy.s3 import check_s3, effective_endpoint
from pitstop.policy.urls import AWS, normalize_endpoint
from pitstop.retention import (
    ExponentialPolicy,
    KeepLastPolicy,
    Policy,
    Snapshot,
    cluster_prefix,
    select,
    snapshot_key,
    snapshot_time,
    why_ignored,
)
from pitstop.secrets import SecretNotFound, resolve_secret

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef, ObjectTypeDef

log = logging.getLogger("pitstop.storage")
A = TypeVar("A", bound=ModuleArgs)

MIB = 1024 * 1024
DOWNLOAD_CHUNK = MIB
DRILL_MARK = ".drill-"
Progress = Callable[[int], None]


# ------------------------------------------------------------------ shared helpers


def _beat(detail: str | None = None) -> None:
    if activity.in_activity():
        activity.heartbeat(*([detail] if detail else []))


def _beat_progress(_: int) -> None:
    _beat()


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _secret(ref: SecretRef | None, field: str, what: str, endpoint: str) -> str | None:
    if ref is None:
        return None
    try:
        return resolve_secret(ref, "s3_credentials", what=f"{what}: {field}", endpoints=[endpoint]).strip()
    except SecretNotFound as exc:
        raise make_error(ErrorType.PRECONDITION_FAILED, f"S3 {field}: {exc}") from None


def check_s3_access(args: S3Args, what: str) -> tuple[str | None, str]:
    """(endpoint URL to use, normalized endpoint) once the worker policy allows the endpoint,
    the bucket and every credential secret there; a PolicyViolation otherwise. Reads nothing."""
    endpoint_url = effective_endpoint(args.endpoint_url)
    check_s3(endpoint_url, args.bucket, what)
    endpoint = normalize_endpoint(endpoint_url) if endpoint_url else AWS
    for name, ref in (
        ("access_key_id", args.access_key_id),
        ("secret_access_key", args.secret_access_key),
        ("session_token", args.session_token),
    ):
        if ref is not None:
            check_grant(ref.secret, "s3_credentials", what=f"{what}: {name}", endpoints=[endpoint])
    return endpoint_url, endpoint


def s3_client(args: S3Args, what: str = "S3") -> S3Client:
    """A client for the args' store, once the worker policy allows its endpoint, bucket and
    credential secrets (PolicyViolation before anything is signed otherwise). Region and
    credentials left unset come from boto3's environment; the endpoint is exactly the one
    checked (an endpoint configured elsewhere is ignored)."""
    endpoint_url, endpoint = check_s3_access(args, what)
    region = (
        args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    )
    config = Config(
        s3={"addressing_style": args.addressing_style},
        retries={"mode": "standard", "max_attempts": args.request_attempts},
        # We send our own SHA-256 per part; no second checksum (and no aws-chunked bodies).
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        connect_timeout=10,
        read_timeout=120,
        ignore_configured_endpoint_urls=True,  # type: ignore[call-arg]  # newer than the stubs
    )
    client: S3Client = boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=_secret(args.access_key_id, "access_key_id", what, endpoint),
        aws_secret_access_key=_secret(args.secret_access_key, "secret_access_key", what, endpoint),
        aws_session_token=_secret(args.session_token, "session_token", what, endpoint),
        config=config,
    )
    return client


def uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


@contextlib.contextmanager
def s3_errors(what: str) -> Iterator[None]:
    """S3 failures as Temporal errors: permanent ones non-retryable, the rest retried."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message", "")) or code
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if (
            code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken")
            or status == 403
        ):
            raise make_error(
                ErrorType.UNAUTHORIZED,
                f"{what}: S3 refused the credentials ({code}: {message}); check access_key_id/"
                "secret_access_key or the worker's AWS credentials and the bucket policy",
            ) from None
        if code == "NoSuchBucket":
            raise make_error(
                ErrorType.PRECONDITION_FAILED, f"{what}: bucket does not exist ({message}); create it first"
            ) from None
        if code in ("NoSuchKey", "404", "NotFound"):
            raise make_error(ErrorType.NOT_FOUND, f"{what}: no such object", non_retryable=True) from None
        raise make_error(ErrorType.S3_ERROR, f"{what}: S3 error {code or status}: {message}") from None
    except NoCredentialsError:
        raise make_error(
            ErrorType.UNAUTHORIZED,
            f"{what}: no S3 credentials: give access_key_id/secret_access_key as secrets, or set "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or a profile or role) for the worker",
        ) from None
    except BotoCoreError as exc:
        raise make_error(ErrorType.S3_UNAVAILABLE, f"{what}: cannot reach S3: {exc}") from None


def encode_metadata(values: dict[str, Any]) -> dict[str, str]:
    """S3 user metadata: lower-case names with `-` (proxies drop `_` in headers), ASCII values."""
    out: dict[str, str] = {}
    for name, value in values.items():
        if value is None:
            continue
        key = str(name).strip().lower().replace("_", "-")
        out[key] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return out


def decode_metadata(values: dict[str, str]) -> dict[str, Any]:
    """Back to runbook-friendly names (`live_keys`) and values (numbers and maps as such)."""
    out: dict[str, Any] = {}
    for name, raw in values.items():
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        out[name.replace("-", "_")] = value
    return out


def file_sha256(path: Path, progress: Progress | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(4 * MIB):
            digest.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return digest.hexdigest()


def _head(client: S3Client, bucket: str, key: str) -> dict[str, Any] | None:
    try:
        head: dict[str, Any] = dict(client.head_object(Bucket=bucket, Key=key))
        return head
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


# ------------------------------------------------------------------ streamed upload


def ensure_bucket(client: S3Client, bucket: str, region: str) -> bool:
    """Create `bucket` when it does not exist; True when it was created."""
    with s3_errors(f"creating bucket {bucket}"):
        try:
            client.head_bucket(Bucket=bucket)
            return False
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
                raise
        if region == "us-east-1":
            client.create_bucket(Bucket=bucket)
        else:
            client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})  # type: ignore[typeddict-item]
        return True


@dataclass
class UploadOutcome:
    bucket: str
    key: str
    size: int
    sha256: str
    changed: bool
    etag: str = ""
    parts: int = 0
    verified: str = ""
    aborted_stale: int = 0
    metadata: dict[str, str] = field(default_factory=dict)


def abort_stale_uploads(client: S3Client, bucket: str, key: str) -> int:
    """Abort multipart uploads of exactly `key` left by an attempt that could not clean up."""
    aborted = 0
    reply = client.list_multipart_uploads(Bucket=bucket, Prefix=key)
    for upload in reply.get("Uploads", []):
        if upload.get("Key") == key and "UploadId" in upload:
            with contextlib.suppress(ClientError):
                client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload["UploadId"])
                aborted += 1
    return aborted


def _read_back_sha256(client: S3Client, bucket: str, key: str, progress: Progress | None) -> tuple[str, int]:
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    digest, size = hashlib.sha256(), 0
    try:
        for chunk in body.iter_chunks(DOWNLOAD_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if progress is not None:
                progress(len(chunk))
    finally:
        body.close()
    return digest.hexdigest(), size


def upload_file(
    client: S3Client,
    bucket: str,
    key: str,
    path: Path,
    *,
    part_size: int = 8 * MIB,
    metadata: dict[str, str] | None = None,
    sse: str | None = None,
    kms_key_id: str | None = None,
    expected_sha256: str | None = None,
    verify: str = "read",
    progress: Progress | None = None,
) -> UploadOutcome:
    """Upload `path` to `key` as described in the module docstring; raises ApplicationError."""
    where = uri(bucket, key)
    # Every pass over the data tells Temporal the activity is alive (heartbeats are batched).
    progress = progress or _beat_progress
    size = path.stat().st_size
    if size == 0:
        fail(ErrorType.PRECONDITION_FAILED, f"{path} is empty; an etcd snapshot never is")
    sha = file_sha256(path, progress)
    if expected_sha256 is not None and sha != expected_sha256:
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"{path} has sha256 {sha}, not the expected {expected_sha256}: it changed after it was inspected",
        )
    with s3_errors(f"upload to {where}"):
        existing = _head(client, bucket, key)
        if existing is not None:
            stored = existing.get("Metadata", {}).get("sha256")
            if stored == sha and existing.get("ContentLength") == size:
                return UploadOutcome(
                    bucket, key, size, sha, changed=False, etag=str(existing.get("ETag", ""))
                )
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"{where} already holds a different object (sha256 {stored or 'unknown'}, "
                f"{existing.get('ContentLength')} bytes; this file: {sha}, {size} bytes); refusing to "
                "overwrite another snapshot",
            )
        aborted = abort_stale_uploads(client, bucket, key)
        # sha256 and size are what retention and downloads check an object against.
        meta = {**(metadata or {}), "sha256": sha, "size": str(size)}
        extra: dict[str, Any] = {}
        if sse is not None:
            extra["ServerSideEncryption"] = sse
        if kms_key_id is not None:
            extra["SSEKMSKeyId"] = kms_key_id
        upload_id = client.create_multipart_upload(
            Bucket=bucket, Key=key, Metadata=meta, ChecksumAlgorithm="SHA256", **extra
        )["UploadId"]
        try:
            parts, digests, streamed = _send_parts(client, bucket, key, upload_id, path, part_size)
            if streamed != sha:
                fail(
                    ErrorType.PRECONDITION_FAILED,
                    f"{path} changed while it was being uploaded (sha256 {sha} -> {streamed})",
                )
            done = client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            # No partial object and no orphaned parts, whatever went wrong (cancellation too).
            with contextlib.suppress(ClientError, BotoCoreError):
                client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            raise
        verified = _verify_upload(client, bucket, key, sha, size, digests, verify, progress)
    return UploadOutcome(
        bucket,
        key,
        size,
        sha,
        changed=True,
        etag=str(done.get("ETag", "")),
        parts=len(parts),
        verified=verified,
        aborted_stale=aborted,
        metadata=meta,
    )


def _send_parts(
    client: S3Client,
    bucket: str,
    key: str,
    upload_id: str,
    path: Path,
    part_size: int,
) -> tuple[list[CompletedPartTypeDef], list[bytes], str]:
    parts: list[CompletedPartTypeDef] = []
    digests: list[bytes] = []
    whole = hashlib.sha256()
    with path.open("rb") as handle:
        number = 0
        while chunk := handle.read(part_size):
            number += 1
            digest = hashlib.sha256(chunk).digest()
            whole.update(chunk)
            checksum = base64.b64encode(digest).decode()
            reply = client.upload_part(
                Bucket=bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=chunk,
                ChecksumSHA256=checksum,
            )
            parts.append({"PartNumber": number, "ETag": reply["ETag"], "ChecksumSHA256": checksum})
            digests.append(digest)
            _beat(f"part {number}")
    return parts, digests, whole.hexdigest()


def _verify_upload(
    client: S3Client,
    bucket: str,
    key: str,
    sha: str,
    size: int,
    digests: list[bytes],
    mode: str,
    progress: Progress | None,
) -> str:
    if mode == "checksum":
        head = client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        stored = head.get("ChecksumSHA256")
        if stored:
            ours = base64.b64encode(hashlib.sha256(b"".join(digests)).digest()).decode()
            if stored.split("-")[0] == ours and head.get("ContentLength") == size:
                return "checksum"
            _discard(client, bucket, key)
            fail(
                ErrorType.UPLOAD_VERIFY_FAILED,
                f"{uri(bucket, key)}: the store's SHA-256 of the parts is {stored}, ours is {ours}; "
                "the object was deleted and the upload will be retried",
            )
        # The store keeps no checksum (some S3-compatible ones): read it back instead.
    got, got_size = _read_back_sha256(client, bucket, key, progress)
    if got != sha or got_size != size:
        _discard(client, bucket, key)
        fail(
            ErrorType.UPLOAD_VERIFY_FAILED,
            f"{uri(bucket, key)}: read back sha256 {got} ({got_size} bytes), uploaded {sha} ({size} bytes); "
            "the object was deleted and the upload will be retried",
        )
    return "read"


def _discard(client: S3Client, bucket: str, key: str) -> None:
    with contextlib.suppress(ClientError, BotoCoreError):
        client.delete_object(Bucket=bucket, Key=key)


# ------------------------------------------------------------------ streamed download


@dataclass
class DownloadOutcome:
    bucket: str
    key: str
    dest: Path
    size: int
    sha256: str
    expected_sha256: str
    changed: bool
    metadata: dict[str, str]


class ChecksumMismatch(Exception):
    pass


def _same_file(dir_fd: int, name: str, size: Any, expected: str) -> bool:
    """Whether `name` (in dir_fd, not followed if a symlink) already holds the object."""
    try:
        fd = open_nofollow(name, os.O_RDONLY, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(handle.fileno()).st_size != size:
            return False
        while chunk := handle.read(4 * MIB):
            digest.update(chunk)
    return digest.hexdigest() == expected


def download_file(
    client: S3Client, bucket: str, key: str, dest: AllowedPath, progress: Progress | None = None
) -> DownloadOutcome:
    """Stream `key` to `dest` (through `dest.part`), checking it against the `sha256` metadata.

    The directories below the allowed root are walked without following symlinks and the file
    is opened O_NOFOLLOW, so nothing lands anywhere but the checked path.
    """
    where = uri(bucket, key)
    progress = progress or _beat_progress
    path = dest.path
    with s3_errors(f"download of {where}"):
        head = client.head_object(Bucket=bucket, Key=key)
        metadata = dict(head.get("Metadata", {}))
        expected = metadata.get("sha256")
        if not expected:
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"{where} has no sha256 metadata, so its integrity cannot be checked",
            )
        with directory_fd(path.parent, dest) as dir_fd:
            if _same_file(dir_fd, path.name, head.get("ContentLength"), expected):
                return DownloadOutcome(
                    bucket, key, path, int(head.get("ContentLength", 0)), expected, expected, False, metadata
                )
            partial = path.name + ".part"
            body = client.get_object(Bucket=bucket, Key=key)["Body"]
            digest, size = hashlib.sha256(), 0
            try:
                fd = open_nofollow(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, dir_fd=dir_fd)
                with os.fdopen(fd, "wb") as out:
                    for chunk in body.iter_chunks(DOWNLOAD_CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
                        progress(len(chunk))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(partial, dir_fd=dir_fd)
                raise
            finally:
                body.close()
            got = digest.hexdigest()
            if got != expected:
                with contextlib.suppress(OSError):
                    os.unlink(partial, dir_fd=dir_fd)
                raise ChecksumMismatch(
                    f"checksum mismatch: expected {expected}, got {got} for {where} ({size} bytes); "
                    "the stored snapshot is corrupt — do not restore it"
                )
            os.rename(partial, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    return DownloadOutcome(bucket, key, path, size, got, expected, True, metadata)


# ------------------------------------------------------------------ listing


def list_keys(client: S3Client, bucket: str, prefix: str) -> Iterator[ObjectTypeDef]:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Contents", [])


def snapshot_objects(client: S3Client, bucket: str, prefix: str) -> list[tuple[str, datetime, ObjectTypeDef]]:
    """(key, taken_at, listing entry) of every snapshot under `prefix`, oldest first."""
    found = []
    for entry in list_keys(client, bucket, prefix):
        key = entry["Key"]
        taken = snapshot_time(key)
        if taken is not None and DRILL_MARK not in key:
            found.append((key, taken, entry))
    return sorted(found, key=lambda item: (item[1], item[0]))


_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def object_problem(entry: ObjectTypeDef, head: dict[str, Any] | None) -> str | None:
    """Why a listed object is not a snapshot as `upload_file` writes one (None: it is): its
    sha256 metadata, and its size as upload recorded it (objects from before pitstop recorded
    the size are judged by their sha256 alone) and as the listing reports it."""
    if head is None:
        return "it disappeared while retention looked at it"
    metadata = head.get("Metadata", {}) or {}
    if not _SHA256_HEX.fullmatch(str(metadata.get("sha256", ""))):
        return "it has no sha256 metadata as storage.upload writes it"
    size = head.get("ContentLength")
    if entry.get("Size") is not None and size != entry.get("Size"):
        return f"its size changed while retention looked at it ({entry.get('Size')} -> {size} bytes)"
    recorded = metadata.get("size")
    if recorded is not None and str(size) != recorded:
        return f"it holds {size} bytes but storage.upload recorded {recorded}"
    return None


def listed_snapshot(
    client: S3Client, bucket: str, key: str, taken: datetime, entry: ObjectTypeDef, verified: bool = False
) -> Snapshot:
    """A listed object as retention judges it: the store's upload time and its problem, if any."""
    uploaded = entry.get("LastModified")
    return Snapshot(
        key=key,
        taken_at=taken,
        verified=verified,
        uploaded_at=uploaded.astimezone(UTC) if uploaded is not None else None,
        problem=object_problem(entry, _head(client, bucket, key)),
    )


# ------------------------------------------------------------------ activities


def _taken_at(args: UploadArgs, path: Path) -> datetime | None:
    if args.taken_at is not None:
        taken = args.taken_at if args.taken_at.tzinfo else args.taken_at.replace(tzinfo=UTC)
        return taken.astimezone(UTC)
    if path.exists():
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    return None


def _upload_key(args: UploadArgs, path: Path) -> str:
    if args.key is not None:
        return args.key
    taken = _taken_at(args, path)
    if taken is None:
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"{path} does not exist and no `taken_at` was given, so the object key is unknown",
        )
    assert args.cluster is not None  # the model requires cluster when key is absent
    try:
        return snapshot_key(args.prefix, args.cluster, taken)
    except ValueError as exc:
        raise make_error(ErrorType.INVALID_ARGS, str(exc)) from None


@module_activity(UPLOAD)
def storage_upload(call: ModuleCall, args: UploadArgs) -> ModuleResult:
    # Removing the file afterwards is a write: the policy must allow that too, checked first.
    check = writable if args.remove_source else readable
    path = check(args.file, run_id=call.run_id, what=f"{call.module}: file", relative_to="work").path
    client = s3_client(args, call.module)
    if call.check_mode and not path.is_file():
        return ModuleResult(skipped=True, msg=f"{path} does not exist (not created in check mode)")
    key = _upload_key(args, path)
    where = uri(args.bucket, key)
    if not path.is_file():
        # A retried task whose first attempt already uploaded and removed the file.
        with s3_errors(f"upload to {where}"):
            head = _head(client, args.bucket, key)
        stored = head.get("Metadata", {}).get("sha256") if head else None
        if args.remove_source and stored is not None and stored == args.expected_sha256:
            return ModuleResult(
                msg=f"{where} already uploaded; {path} already removed", data=_uploaded(where, head)
            )
        fail(ErrorType.PRECONDITION_FAILED, f"file to upload {path} does not exist")
    if call.check_mode:
        with s3_errors(f"upload to {where}"):
            head = _head(client, args.bucket, key)
        if head is not None:
            return ModuleResult(msg=f"{where} already exists", data=_uploaded(where, head))
        return ModuleResult(changed=True, msg=f"would upload {path} ({path.stat().st_size} bytes) to {where}")
    if args.create_bucket:
        ensure_bucket(client, args.bucket, client.meta.region_name)
    metadata = {
        **encode_metadata(args.metadata),
        "pitstop-run": call.run_id,
        **({"cluster": args.cluster} if args.cluster else {}),
    }
    taken = _taken_at(args, path)
    if taken is not None:
        metadata["taken-at"] = _iso(taken)
    outcome = upload_file(
        client,
        args.bucket,
        key,
        path,
        part_size=args.part_size_mb * MIB,
        metadata=metadata,
        sse=args.sse,
        kms_key_id=args.kms_key_id,
        expected_sha256=args.expected_sha256,
        verify=args.verify,
    )
    if args.remove_source:
        path.unlink(missing_ok=True)
    data = {
        "bucket": outcome.bucket,
        "key": outcome.key,
        "uri": where,
        "size": outcome.size,
        "sha256": outcome.sha256,
        "etag": outcome.etag,
        "parts": outcome.parts,
        "verified": outcome.verified or "earlier",
        "taken_at": _iso(taken) if taken else None,
        "sse": args.sse,
        "aborted_stale_uploads": outcome.aborted_stale,
        "source_removed": args.remove_source,
    }
    if not outcome.changed:
        return ModuleResult(msg=f"{where} already holds this file (sha256 {outcome.sha256})", data=data)
    return ModuleResult(
        changed=True,
        msg=f"uploaded {outcome.size} bytes in {outcome.parts} parts to {where}, {outcome.verified}-verified",
        data=data,
    )


def _uploaded(where: str, head: dict[str, Any] | None) -> dict[str, Any]:
    head = head or {}
    return {
        "uri": where,
        "key": where.split("/", 3)[3],
        "size": head.get("ContentLength"),
        "sha256": head.get("Metadata", {}).get("sha256"),
        "etag": head.get("ETag"),
    }


@module_activity(LATEST)
def storage_latest(call: ModuleCall, args: LatestArgs) -> ModuleResult:
    try:
        prefix = cluster_prefix(args.prefix, args.cluster)
    except ValueError as exc:
        raise make_error(ErrorType.INVALID_ARGS, str(exc)) from None
    client = s3_client(args, call.module)
    now = datetime.now(UTC)
    skipped: list[dict[str, str]] = []
    with s3_errors(f"listing {uri(args.bucket, prefix)}"):
        snapshots = snapshot_objects(client, args.bucket, prefix)
        if not snapshots:
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"no snapshot of cluster {args.cluster!r} under {uri(args.bucket, prefix)}",
            )
        # The newest real one: a future-dated or damaged object is reported, never restored.
        for key, taken, entry in reversed(snapshots):
            why = why_ignored(listed_snapshot(client, args.bucket, key, taken, entry), now)
            if why is None:
                break
            skipped.append({"key": key, "reason": why})
        else:
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"no usable snapshot of cluster {args.cluster!r} under {uri(args.bucket, prefix)}: "
                + "; ".join(f"{s['key']}: {s['reason']}" for s in skipped[:5]),
            )
        head = client.head_object(Bucket=args.bucket, Key=key)
    return ModuleResult(
        msg=f"newest snapshot: {uri(args.bucket, key)} taken {_iso(taken)}"
        + (f" ({len(skipped)} newer objects skipped: not real snapshots)" if skipped else ""),
        data={
            "key": key,
            "uri": uri(args.bucket, key),
            "taken_at": _iso(taken),
            "size": int(entry.get("Size", 0)),
            "last_modified": _iso(entry["LastModified"]) if "LastModified" in entry else None,
            "sha256": head.get("Metadata", {}).get("sha256"),
            "metadata": decode_metadata(dict(head.get("Metadata", {}))),
            "snapshots": len(snapshots),
            "skipped": skipped,
        },
    )


@module_activity(DOWNLOAD)
def storage_download(call: ModuleCall, args: DownloadArgs) -> ModuleResult:
    where = uri(args.bucket, args.key)
    allowed = writable(args.dest, run_id=call.run_id, what=f"{call.module}: dest", relative_to="work")
    dest = allowed.path
    client = s3_client(args, call.module)
    if call.check_mode:
        return ModuleResult(changed=not dest.exists(), msg=f"would download {where} to {dest}")
    started = datetime.now(UTC)
    try:
        outcome = download_file(client, args.bucket, args.key, allowed)
    except ChecksumMismatch as exc:
        raise make_error(ErrorType.CHECKSUM_MISMATCH, str(exc), non_retryable=True) from None
    finished = datetime.now(UTC)
    metadata = decode_metadata(outcome.metadata)
    taken = metadata.get("taken_at") or (_iso(t) if (t := snapshot_time(args.key)) is not None else None)
    return ModuleResult(
        changed=outcome.changed,
        msg=(f"downloaded {where} to {dest}" if outcome.changed else f"{dest} already holds {where}")
        + f" ({outcome.size} bytes, sha256 {outcome.sha256} verified)",
        data={
            "bucket": args.bucket,
            "key": args.key,
            "uri": where,
            "dest": str(dest),
            "size": outcome.size,
            "sha256": outcome.sha256,
            "expected_sha256": outcome.expected_sha256,
            "metadata": metadata,
            "taken_at": taken,
            "started_at": _iso(started),
            "finished_at": _iso(finished),
            "duration_s": round((finished - started).total_seconds(), 3),
        },
    )


def _newest_verified(client: S3Client, bucket: str, prefix: str, snapshots: list[str]) -> str | None:
    """The newest snapshot with a passing drill report next to it."""
    reports: dict[str, list[str]] = {}
    for entry in list_keys(client, bucket, prefix):
        key = entry["Key"]
        if DRILL_MARK in key and key.endswith(".json"):
            reports.setdefault(key.split(DRILL_MARK, 1)[0], []).append(key)
    for snapshot in reversed(snapshots):
        for report in sorted(reports.get(snapshot, []), reverse=True):
            body = client.get_object(Bucket=bucket, Key=report)["Body"]
            try:
                if json.loads(body.read(MIB)).get("passed") is True:
                    return snapshot
            except ValueError:
                continue
            finally:
                body.close()
    return None


@module_activity(RETENTION)
def storage_retention(call: ModuleCall, args: RetentionArgs) -> ModuleResult:
    try:
        prefix = cluster_prefix(args.prefix, args.cluster)
    except ValueError as exc:
        raise make_error(ErrorType.INVALID_ARGS, str(exc)) from None
    policy: Policy = (
        KeepLastPolicy(keep_last=args.keep_last) if args.keep_last is not None else ExponentialPolicy()
    )
    client = s3_client(args, call.module)
    where = uri(args.bucket, prefix)
    # One "now" for the whole decision, reported with it, so a reader can redo the arithmetic.
    now = datetime.now(UTC)
    with s3_errors(f"retention under {where}"):
        found = snapshot_objects(client, args.bucket, prefix)
        verified = _newest_verified(client, args.bucket, prefix, [key for key, _, _ in found])
        plan = select(
            [
                listed_snapshot(client, args.bucket, key, taken, entry, verified=key == verified)
                for key, taken, entry in found
            ],
            policy,
            now,
        )
        doomed = [s.key for s in plan.delete]
        data = {
            "policy": policy.kind,
            "as_of": now.isoformat(),
            "kept": [{"key": key, "reason": reason} for key, reason in sorted(plan.keep.items())],
            "newest": plan.newest.key if plan.newest else None,
            "newest_verified": plan.newest_verified.key if plan.newest_verified else None,
            # Not real snapshots (future-dated, damaged): left alone, for a person to look at.
            "ignored": [{"key": key, "reason": why} for key, why in sorted(plan.ignored.items())],
        }
        for key, why in sorted(plan.ignored.items()):
            log.warning("retention left %s alone: %s", uri(args.bucket, key), why)
        ignored = f"; {len(plan.ignored)} objects ignored (not real snapshots)" if plan.ignored else ""
        if call.check_mode:
            return ModuleResult(
                changed=bool(doomed),
                msg=f"would delete {len(doomed)} of {len(found)} snapshots under {where}{ignored}",
                data={**data, "would_delete": doomed, "deleted": []},
            )
        for start in range(0, len(doomed), 1000):
            batch = doomed[start : start + 1000]
            reply = client.delete_objects(
                Bucket=args.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
            )
            errors = reply.get("Errors", [])
            if errors:
                first = errors[0]
                fail(
                    ErrorType.S3_ERROR,
                    f"could not delete {len(errors)} snapshots, e.g. {first.get('Key')}: "
                    f"{first.get('Code')} {first.get('Message')}",
                )
    for key in doomed:
        log.info("retention deleted %s", uri(args.bucket, key))
    return ModuleResult(
        changed=bool(doomed),
        msg=f"kept {len(plan.keep)}, deleted {len(doomed)} snapshots under {where} ({policy.kind}){ignored}",
        data={**data, "deleted": doomed},
    )


STORAGE_ACTIVITIES = [storage_upload, storage_latest, storage_download, storage_retention]
