"""Where a `dr.*` backup is staged on the worker and how it reaches S3.

A backup is written to a 0600 file of its own in the run's work directory (checked against the
worker policy, reached without following symlinks), uploaded with `activities.storage`'s
streamed, SHA-256 verified `upload_file` (a failed upload aborts its multipart upload, so no
partial object is left), and the staged file is removed whatever happened.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from activities.storage import MIB, UploadOutcome, ensure_bucket, s3_errors, upload_file, uri
from pitstop.contracts import ModuleCall
from pitstop.module_args.dr import BackupS3Args
from pitstop.policy.files import directory_fd, open_nofollow, writable

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class Staged:
    """The staging file: its path and, until `close()`, its open descriptor."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def fd(self) -> int:
        assert self._fd is not None, "the staging file is closed"
        return self._fd

    def close(self) -> None:
        # Once only: a descriptor closed twice may by then be another thread's socket.
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def object_key(args: BackupS3Args, item: str, what: str, moment: datetime, ext: str) -> str:
    """`<prefix>/<cluster>/<item>/<YYYY>/<MM>/<DD>/<cluster>-<what>-<UTC time>.<ext>`."""
    day = moment.astimezone(UTC).strftime("%Y/%m/%d")
    return f"{args.prefix}/{args.cluster}/{item}/{day}/{args.cluster}-{what}-{stamp(moment)}.{ext}"


@contextlib.contextmanager
def staged_file(call: ModuleCall, name: str) -> Iterator[Staged]:
    """A new 0600 file `dr/<name>` in the run's work directory, removed on the way out."""
    allowed = writable(f"dr/{name}", run_id=call.run_id, what=f"{call.module}: staging file")
    with directory_fd(allowed.path.parent, allowed) as dir_fd:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(allowed.path.name, dir_fd=dir_fd)  # left by an attempt that was killed
        fd = open_nofollow(allowed.path.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
        staged = Staged(allowed.path, fd)
        try:
            yield staged
        finally:
            staged.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(allowed.path.name, dir_fd=dir_fd)


def stored(
    args: BackupS3Args, key: str, where: str, outcome: UploadOutcome, taken: datetime
) -> dict[str, Any]:
    """Where an uploaded document is and how it was verified: the part of a DR module's
    result every upload shares."""
    return {
        "bucket": args.bucket,
        "key": key,
        "uri": where,
        "sha256": outcome.sha256,
        "size": outcome.size,
        "verified": outcome.verified or "earlier",
        "taken_at": taken.isoformat().replace("+00:00", "Z"),
    }


def upload(
    client: S3Client, args: BackupS3Args, key: str, path: Path, metadata: dict[str, str]
) -> UploadOutcome:
    if args.create_bucket:
        ensure_bucket(client, args.bucket, client.meta.region_name)
    return upload_file(
        client,
        args.bucket,
        key,
        path,
        part_size=8 * MIB,
        metadata=metadata,
        sse=args.sse,
        kms_key_id=args.kms_key_id,
        verify=args.verify,
    )


def member_kind(name: str) -> str:
    if name.endswith(".crt"):
        return "certificate"
    if name.endswith(".key"):
        return "private key"
    if name.endswith(".pub"):
        return "public key"
    if name.endswith((".yaml", ".yml", ".conf")):
        return "config"
    return "file"


def manifest(path: Path) -> list[dict[str, object]]:
    """Name, kind, size and SHA-256 of every file in the tar archive: what may enter history."""
    files: list[dict[str, object]] = []
    with tarfile.open(path, mode="r:") as archive:
        for member in archive:
            if not member.isfile():
                continue
            handle = archive.extractfile(member)
            assert handle is not None
            digest = hashlib.sha256()
            while chunk := handle.read(MIB):
                digest.update(chunk)
            files.append(
                {
                    "name": member.name,
                    "kind": member_kind(member.name),
                    "size": member.size,
                    "sha256": digest.hexdigest(),
                }
            )
    return files


__all__ = ["Staged", "manifest", "object_key", "s3_errors", "staged_file", "stamp", "upload", "uri"]
