"""The S3 backend of the payload store: `s3://bucket/prefix`, blobs at `<prefix>/<ab>/<sha256>`.

This is operator configuration, not runbook input, so it is not checked against the worker
policy (which governs what runbooks may reach): the process's own AWS settings apply, as boto3
reads them — credentials from its chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, an
instance or pod role), the region from AWS_REGION / AWS_DEFAULT_REGION (else us-east-1). The
endpoint (MinIO, moto...) is `PITSTOP_PAYLOAD_S3_ENDPOINT`, else boto3's AWS_ENDPOINT_URL_S3 /
AWS_ENDPOINT_URL; with an explicit endpoint, path-style addressing is used, as those servers
expect on a plain host:port. The bucket must exist: pitstop never creates it.

Each upload carries the blob's SHA-256 as a checksum, which S3 verifies before storing it, and
as metadata; the codec verifies every blob it reads against its key anyway.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from pitstop.payload_store import S3_ENDPOINT_ENV, BlobInfo, PayloadStoreError, check_digest

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3Store:
    """Blobs in one bucket under one prefix. The client is made on first use (thread-safe)."""

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None) -> None:
        if not _BUCKET.fullmatch(bucket):
            raise PayloadStoreError(
                f"payload store bucket {bucket!r} is not a valid S3 bucket name "
                "(3-63 lowercase letters, digits, '.' and '-')"
            )
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url or None
        self._client: S3Client | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, endpoint_url: str | None = None) -> S3Store:
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
            raise PayloadStoreError(f"{url!r} is not an S3 payload store; use s3://bucket/prefix")
        return cls(parts.netloc, parts.path, endpoint_url or os.environ.get(S3_ENDPOINT_ENV) or None)

    def describe(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return f"{where} at {self.endpoint_url}" if self.endpoint_url else where

    def key_of(self, digest: str) -> str:
        digest = check_digest(digest)
        name = f"{digest[:2]}/{digest}"
        return f"{self.prefix}/{name}" if self.prefix else name

    @property
    def client(self) -> S3Client:
        with self._lock:
            if self._client is None:
                self._client = self._new_client()
            return self._client

    def _new_client(self) -> S3Client:
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        config = Config(
            s3={"addressing_style": "path" if self.endpoint_url else "auto"},
            retries={"mode": "standard", "max_attempts": 5},
            connect_timeout=10,
            read_timeout=60,
            # Blobs are small (a few MB at most); the SHA-256 we send is the check that matters.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        client: S3Client = boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint_url, region_name=region, config=config
        )
        return client

    def _fail(self, verb: str, digest: str, exc: Exception) -> PayloadStoreError:
        detail = str(exc)
        if isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
            detail = f"bucket {self.bucket!r} does not exist; create it (pitstop never does)"
        return PayloadStoreError(f"cannot {verb} blob {digest} in {self.describe()}: {detail}")

    def put(self, digest: str, data: bytes) -> None:
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=self.key_of(digest),
                Body=data,
                ChecksumSHA256=base64.b64encode(hashlib.sha256(data).digest()).decode(),
                Metadata={"sha256": digest},
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("write", digest, exc) from exc

    def get(self, digest: str) -> bytes | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.key_of(digest))
            return response["Body"].read()
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in _MISSING:
                return None
            raise self._fail("read", digest, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("read", digest, exc) from exc

    def delete(self, digest: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key_of(digest))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("delete", digest, exc) from exc

    def blobs(self) -> Iterator[BlobInfo]:
        prefix = f"{self.prefix}/" if self.prefix else ""
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
            for page in pages:
                for item in page.get("Contents", []):
                    name = item["Key"].rsplit("/", 1)[-1]
                    if re.fullmatch(r"[0-9a-f]{64}", name):
                        yield BlobInfo(name, item["Size"], item["LastModified"])
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("list", "(all)", exc) from exc
