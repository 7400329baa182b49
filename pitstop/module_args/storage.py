"""Args of the `storage.*` modules: etcd snapshots in S3-compatible object storage (boto3).

Connection settings are arguments, each falling back to what boto3 reads from the worker's
environment: `endpoint_url` (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL), `region` (AWS_REGION,
AWS_DEFAULT_REGION; else us-east-1), credentials as secret references or else boto3's
chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, profile, instance or pod role).

Object layout: `<prefix>/<cluster>/<YYYY>/<MM>/<DD>/<cluster>-<YYYYmmddTHHMMSSZ>.db` (UTC time
the snapshot was taken), object metadata `sha256` (of the whole file) plus what the runbook
adds (revision, live key counts...). Drill reports sit next to their snapshot as
`<key>.drill-<YYYYmmddTHHMMSSZ>.json` and `.md`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from pitstop.errors import ErrorType, non_retryable_types
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults, SecretRef

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
DEFAULT_PREFIX = "etcd-backups"

STORAGE_RETRY = RetryDefaults(
    maximum_attempts=5,
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=non_retryable_types(ErrorType.CHECKSUM_MISMATCH, ErrorType.NOT_FOUND),
)


def _blank_is_none(value: object) -> object:
    # `"{{ s3_endpoint_url | default('') }}"` renders to "" when the inventory leaves it unset.
    return None if isinstance(value, str) and not value.strip() else value


def http_link_base(value: str | None) -> str | None:
    """`link_base` of a document a module writes to S3: where the bucket is served (http(s)),
    without its trailing slash; None (the s3:// uri) when unset."""
    value = _blank_is_none(value)  # type: ignore[assignment]
    if value is not None and not value.startswith(("https://", "http://")):
        raise ValueError(f"link_base {value!r} must be an http(s) URL")
    return value.rstrip("/") if value else value


class S3Args(ModuleArgs):
    bucket: str = Field(description="Bucket name.")
    endpoint_url: str | None = Field(
        default=None,
        description="S3 endpoint (MinIO, moto...); default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL.",
    )
    region: str | None = Field(default=None, description="Region; default: AWS_REGION, else us-east-1.")
    access_key_id: SecretRef | None = Field(default=None, description="Default: boto3's credential chain.")
    secret_access_key: SecretRef | None = Field(default=None, description="Goes with `access_key_id`.")
    session_token: SecretRef | None = Field(default=None, description="For temporary credentials.")
    addressing_style: Literal["auto", "path", "virtual"] = Field(
        default="auto", description="`path` for MinIO and moto on a plain host:port."
    )
    request_attempts: int = Field(
        default=3, ge=1, le=10, description="Attempts per S3 request inside one try (botocore retries)."
    )

    @field_validator("endpoint_url", "region", mode="before")
    @classmethod
    def _blank(cls, value: object) -> object:
        return _blank_is_none(value)

    @field_validator("bucket")
    @classmethod
    def _bucket_name(cls, bucket: str) -> str:
        if not _BUCKET.match(bucket):
            raise ValueError(
                f"bucket {bucket!r} is not a valid S3 bucket name "
                "(3-63 lowercase letters, digits, '.' and '-')"
            )
        return bucket

    @model_validator(mode="after")
    def _key_pair(self) -> Self:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("give both `access_key_id` and `secret_access_key` as secrets, or neither")
        return self


class _SnapshotsArgs(S3Args):
    prefix: str = Field(default=DEFAULT_PREFIX, description="Key prefix above the cluster name.")
    cluster: str = Field(description="Cluster name: the folder of its snapshots.")


class UploadArgs(S3Args):
    file: str = Field(
        min_length=1,
        description="Snapshot file on the worker: relative to the run's work directory, or absolute "
        "where the worker policy lets modules read (and write, with remove_source).",
    )
    key: str | None = Field(default=None, description="Object key; default: the snapshot layout below.")
    prefix: str = Field(default=DEFAULT_PREFIX, description="Key prefix (with `cluster`).")
    cluster: str | None = Field(default=None, description="Cluster name (needed unless `key` is given).")
    taken_at: datetime | None = Field(
        default=None,
        description="When the snapshot was taken (UTC) — names the object; default: the file's mtime.",
    )
    part_size_mb: int = Field(default=8, ge=5, le=512, description="Multipart part size, MiB.")
    sse: Literal["AES256", "aws:kms"] | None = Field(default=None, description="Server-side encryption.")
    kms_key_id: str | None = Field(default=None, description="KMS key for `sse: aws:kms`.")
    metadata: dict[str, str | int | float | bool | dict[str, Any] | list[Any] | None] = Field(
        default_factory=dict,
        description="Extra object metadata (e.g. revision, live key counts); `_` in names becomes `-`, "
        "non-strings are stored as JSON and read back as such by `storage.download`.",
    )
    create_bucket: bool = Field(
        default=False, description="Create the bucket when missing (the embedded stack; not for production)."
    )
    expected_sha256: str | None = Field(
        default=None,
        description="SHA-256 the file must have (from `etcd.snapshot_status`): catches a file changed "
        "between inspection and upload.",
    )
    verify: Literal["read", "checksum"] = Field(
        default="read",
        description="After upload: `read` the object back and hash it (strongest), or compare the "
        "store's own SHA-256 checksum of the parts (no second transfer).",
    )
    remove_source: bool = Field(
        default=False, description="Delete the local file once the upload is verified."
    )

    @field_validator("expected_sha256", "kms_key_id", mode="before")
    @classmethod
    def _blank_optional(cls, value: object) -> object:
        return _blank_is_none(value)

    @field_validator("expected_sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not _HEX64.match(value.lower()):
            raise ValueError("expected_sha256 must be 64 hexadecimal digits")
        return value.lower() if value else value

    @model_validator(mode="after")
    def _naming(self) -> Self:
        if self.key is None and self.cluster is None:
            raise ValueError("give `cluster` (the key is then derived from it) or an explicit `key`")
        if self.kms_key_id is not None and self.sse != "aws:kms":
            raise ValueError("kms_key_id needs `sse: aws:kms`")
        return self


class LatestArgs(_SnapshotsArgs):
    pass


class DownloadArgs(S3Args):
    key: str = Field(min_length=1, description="Object key of the snapshot.")
    dest: str = Field(
        min_length=1,
        description="File on the worker: relative to the run's work directory, or absolute where the "
        "worker policy lets modules write.",
    )


class RetentionArgs(_SnapshotsArgs):
    policy: Literal["exponential", "keep_last"] = Field(
        default="exponential",
        description="`exponential`: all of the last hour, hourly for a day, daily for a week, weekly "
        "for a month. `keep_last`: the `keep_last` newest. Both keep the newest snapshot and the "
        "newest one a restore drill verified.",
    )
    keep_last: int | None = Field(default=None, ge=1, description="For `policy: keep_last`.")

    @model_validator(mode="after")
    def _keep_last_with_policy(self) -> Self:
        if self.policy == "keep_last" and self.keep_last is None:
            raise ValueError("policy keep_last needs `keep_last: N`")
        if self.policy == "exponential" and self.keep_last is not None:
            raise ValueError("keep_last is only for `policy: keep_last`")
        return self


UPLOAD: ModuleSpec[UploadArgs] = ModuleSpec(
    name="storage.upload",
    args_model=UploadArgs,
    summary="Streamed multipart upload with SHA-256 metadata, verified after upload; idempotent.",
    supports_check_mode=True,
    start_to_close=timedelta(hours=2),
    heartbeat_timeout=timedelta(minutes=2),
    retry=STORAGE_RETRY,
)
LATEST: ModuleSpec[LatestArgs] = ModuleSpec(
    name="storage.latest",
    args_model=LatestArgs,
    summary="The newest snapshot of a cluster in the bucket (key, time, size, metadata).",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=5),
    retry=STORAGE_RETRY,
)
DOWNLOAD: ModuleSpec[DownloadArgs] = ModuleSpec(
    name="storage.download",
    args_model=DownloadArgs,
    summary="Streamed download to a file, SHA-256 checked against the object's metadata.",
    supports_check_mode=True,
    start_to_close=timedelta(hours=2),
    heartbeat_timeout=timedelta(minutes=2),
    retry=STORAGE_RETRY,
)
RETENTION: ModuleSpec[RetentionArgs] = ModuleSpec(
    name="storage.retention",
    args_model=RetentionArgs,
    summary="Delete old snapshots (exponential or keep-last-N), never the newest verified one.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=15),
    retry=STORAGE_RETRY,
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [UPLOAD, LATEST, DOWNLOAD, RETENTION]
