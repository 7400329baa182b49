"""Where large payloads live: a content-addressed blob store shared by every pitstop process.

The claim-check codec (pitstop/codec_claimcheck.py) keeps a payload over its threshold out of
Temporal: the payload's bytes go here under the SHA-256 of those bytes, and history holds
only a reference. So every process that reads a history (CLI, workers, the replayer, the
codec server the Temporal UI decodes with) must see the same store:

* `dir:/path` — a local directory (the default: `$PITSTOP_HOME/payloads/`). Right for one
  machine, e.g. the embedded stack, where every process of the home shares it. Anywhere
  else only as a volume mounted by every worker and client.
* `s3://bucket/prefix` — S3 or an S3-compatible store (pitstop/payload_store_s3.py). What a
  production deployment with more than one machine uses.

Chosen by `PITSTOP_PAYLOAD_STORE` (pitstop/settings.py). Blobs are never rewritten in place: a
key names its bytes, so writing a key again writes the same bytes (and refreshes the blob's
modification time, which garbage collection goes by). With payload encryption on, what is
stored is ciphertext: the codec encrypts before it claim-checks.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

STORE_ENV = "PITSTOP_PAYLOAD_STORE"
S3_ENDPOINT_ENV = "PITSTOP_PAYLOAD_S3_ENDPOINT"
DEFAULT_DIR_NAME = "payloads"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class PayloadStoreError(RuntimeError):
    """The store could not be configured, read or written; the message says which and why."""


@dataclass(frozen=True)
class BlobInfo:
    """One stored blob: its key, size and when it was last written."""

    digest: str
    size: int
    modified: datetime


class BlobStore(Protocol):
    """What the claim-check codec needs of a store. Blocking calls: run them off the event loop."""

    def describe(self) -> str:
        """The store's address as `PITSTOP_PAYLOAD_STORE` spells it (never a credential)."""
        ...

    def put(self, digest: str, data: bytes) -> None:
        """Store `data` under `digest` (its SHA-256, hex); writing an existing key is harmless."""
        ...

    def get(self, digest: str) -> bytes | None:
        """The bytes stored under `digest`, or None when there is no such blob."""
        ...

    def delete(self, digest: str) -> None:
        """Remove the blob (no error when it is already gone)."""
        ...

    def blobs(self) -> Iterator[BlobInfo]:
        """Every blob in the store, in no particular order (for garbage collection)."""
        ...


def check_digest(digest: str) -> str:
    """`digest` when it is a lowercase hex SHA-256; a key from history never becomes a path otherwise."""
    if not _DIGEST.fullmatch(digest):
        raise PayloadStoreError(f"{digest[:80]!r} is not a SHA-256 (64 lowercase hex digits)")
    return digest


class DirectoryStore:
    """Blobs as files `<root>/<first 2 hex digits>/<sha256>`, 0600 in 0700 directories (a
    blob holds a payload, plaintext when encryption is off). Writes are atomic and durable:
    a temporary file in the same directory, fsync, rename, fsync of the directory; a reader
    never sees half a blob, and a crash never leaves one under its final name."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def describe(self) -> str:
        return f"dir:{self.root}"

    def path_of(self, digest: str) -> Path:
        digest = check_digest(digest)
        return self.root / digest[:2] / digest

    def put(self, digest: str, data: bytes) -> None:
        path = self.path_of(digest)
        try:
            if path.is_file() and path.stat().st_size == len(data):
                os.utime(path)  # written again: garbage collection goes by this time
                return
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{digest[:16]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            _fsync_dir(path.parent)
        except OSError as exc:
            raise PayloadStoreError(f"cannot write blob {digest} to {self.describe()}: {exc}") from exc

    def get(self, digest: str) -> bytes | None:
        try:
            return self.path_of(digest).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PayloadStoreError(f"cannot read blob {digest} from {self.describe()}: {exc}") from exc

    def delete(self, digest: str) -> None:
        self.path_of(digest).unlink(missing_ok=True)

    def blobs(self) -> Iterator[BlobInfo]:
        if not self.root.is_dir():
            return
        for fan in sorted(self.root.iterdir()):
            if not fan.is_dir() or len(fan.name) != 2:
                continue
            for path in fan.iterdir():
                if not _DIGEST.fullmatch(path.name):
                    continue  # a temporary file of a write in progress
                with contextlib.suppress(FileNotFoundError):
                    stat = path.stat()
                    yield BlobInfo(path.name, stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def default_store_spec(home: Path) -> str:
    return f"dir:{(home / DEFAULT_DIR_NAME).resolve()}"


def open_store(spec: str | None, home: Path, s3_endpoint: str | None = None) -> BlobStore:
    """The store `spec` names (`dir:/path` or `s3://bucket/prefix`); None or "" means the
    home's `payloads/` directory. A relative `dir:` path is taken from the current directory."""
    spec = (spec or "").strip() or default_store_spec(home)
    if spec.startswith("dir:"):
        raw = spec.removeprefix("dir:").strip()
        if not raw:
            raise PayloadStoreError(f"{STORE_ENV}={spec!r} names no directory; use dir:/path/to/payloads")
        return DirectoryStore(Path(raw).expanduser().resolve())
    if spec.startswith("s3://"):
        from pitstop.payload_store_s3 import S3Store  # boto3 only when S3 is used

        return S3Store.from_url(spec, endpoint_url=s3_endpoint)
    raise PayloadStoreError(
        f"{STORE_ENV}={spec!r} is not a payload store; use dir:/path (one machine, or a volume every "
        "worker and client mounts) or s3://bucket/prefix (see docs/payloads.md)"
    )
