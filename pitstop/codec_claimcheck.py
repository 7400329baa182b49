"""Claim-check payload codec: no payload pitstop hands Temporal is larger than a threshold.

Temporal warns above 512 KB per payload and rejects blobs over 2 MB, and a workflow task's
gRPC message is capped at 4 MB; a plan of a 10,000-node fleet, a status of a 10,000-host run or
a run continuing as new with its progress is several MB. So on encode, each payload whose
serialized size is over the threshold (default 128 KiB, `PITSTOP_PAYLOAD_THRESHOLD`) is written
to the payload store (pitstop/payload_store.py) under the SHA-256 of its bytes, and history
gets a reference in its place:

    metadata: encoding = json/claim-check
    data:     {"sha256": "<hex>", "size": <bytes>, "store": "<where it was written>"}

On decode the blob is read (from this process's own store: the `store` in a reference is
only quoted in errors, never followed, since anyone who can write history can write a
reference), checked against its SHA-256 and parsed back into the payload it replaced.
Payloads at or under the threshold pass through untouched, without a copy.

It wraps the encryption codec: encode = encrypt, then claim-check; decode = resolve, then
decrypt. So with encryption on, the store only ever holds ciphertext, and the threshold is
measured on what Temporal would have stored.

A reference that cannot be resolved (blob missing, altered, store unreachable) raises a
`ClaimCheckError`, a `PayloadCodecError` and so a ValueError: in a worker that fails the
workflow task, which Temporal retries, so pointing the worker at the right store (or restoring
the blob) repairs the run instead of failing it for good — as pitstop/codec.py does for keys.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

from google.protobuf.message import DecodeError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from pitstop.codec import PayloadCodecError
from pitstop.payload_store import STORE_ENV, BlobStore, PayloadStoreError, open_store
from pitstop.payload_store_cache import DEFAULT_CACHE_BYTES, BlobCache
from pitstop.settings import Settings

ENCODING = b"json/claim-check"
DEFAULT_THRESHOLD = 128 * 1024
# A blob we wrote this recently is not written again when the same bytes come back (a status
# queried every second); older ones are, which refreshes their time for garbage collection.
REWRITE_AFTER_SECONDS = 600.0
_RECENT_WRITES = 4096
_METADATA_ALLOWANCE = 4096
# A reference is untrusted input; nothing pitstop writes comes near this.
MAX_BLOB_BYTES = 1024 * 1024 * 1024


class ClaimCheckError(PayloadCodecError):
    """A claim-check reference could not be resolved, or a blob not stored; says what to do."""


class BadReferenceError(ClaimCheckError):
    pass


class BlobMissingError(ClaimCheckError):
    pass


class BlobTamperedError(ClaimCheckError):
    pass


class BlobStoreUnavailableError(ClaimCheckError):
    pass


class ClaimCheckRef(BaseModel):
    """What history holds in place of a large payload."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0, le=MAX_BLOB_BYTES)
    store: str = Field(max_length=1024)


def is_reference(payload: Payload) -> bool:
    return payload.metadata.get("encoding") == ENCODING


def reference_of(payload: Payload) -> ClaimCheckRef:
    """The reference a claim-check payload carries (BadReferenceError when it is not one)."""
    try:
        return ClaimCheckRef.model_validate_json(payload.data)
    except ValidationError as exc:
        raise BadReferenceError(
            f"a {ENCODING.decode()} payload does not hold a valid reference "
            f"({exc.error_count()} problem(s), first: {exc.errors()[0]['msg']}); it was not written "
            "by pitstop's codec or was altered, and was not decoded"
        ) from None


class ClaimCheckCodec(PayloadCodec):
    """Claim-checks payloads over `threshold` bytes into `store`, after `inner` (encryption)."""

    def __init__(
        self,
        store: BlobStore,
        inner: PayloadCodec | None = None,
        *,
        threshold: int = DEFAULT_THRESHOLD,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.store = store
        self.inner = inner
        self.threshold = threshold
        self.cache = BlobCache(cache_bytes)
        self._written: OrderedDict[str, float] = OrderedDict()
        self._written_lock = threading.Lock()

    def describe(self) -> str:
        return f"payloads over {self.threshold} bytes go to {self.store.describe()}"

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        encoded = await self.inner.encode(payloads) if self.inner is not None else list(payloads)
        large = [i for i, p in enumerate(encoded) if self._over_threshold(p)]
        if not large:
            return encoded
        blobs = [encoded[i].SerializeToString() for i in large]
        refs = await asyncio.to_thread(self._store_all, blobs)
        for i, ref in zip(large, refs, strict=True):
            encoded[i] = Payload(metadata={"encoding": ENCODING}, data=ref.model_dump_json().encode())
        return encoded

    def _over_threshold(self, payload: Payload) -> bool:
        # With upb, ByteSize() serializes the payload and `.data` copies it: both cost a pass
        # over the bytes. Reading the data's length first (the cheaper pass) settles normal
        # traffic; the exact size is computed only near the threshold. The metadata pitstop's
        # converters write (encoding, message type, key id) is far below the allowance.
        if len(payload.data) + _METADATA_ALLOWANCE <= self.threshold:
            return False
        return payload.ByteSize() > self.threshold and not is_reference(payload)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        refs = {i: reference_of(p) for i, p in enumerate(payloads) if is_reference(p)}
        resolved = list(payloads)
        if refs:
            blobs: dict[str, bytes] = {}
            for ref in refs.values():
                cached = self.cache.get(ref.sha256)
                if cached is not None:
                    blobs[ref.sha256] = cached
            missing = [ref for ref in refs.values() if ref.sha256 not in blobs]
            if missing:
                blobs.update(await asyncio.to_thread(self._fetch_all, missing))
            for i, ref in refs.items():
                resolved[i] = self._payload_of(ref, blobs[ref.sha256])
        return await self.inner.decode(resolved) if self.inner is not None else resolved

    # -- blocking parts, run on a thread ----------------------------------------------------
    def _store_all(self, blobs: list[bytes]) -> list[ClaimCheckRef]:
        refs = []
        for blob in blobs:
            digest = hashlib.sha256(blob).hexdigest()
            if not self._written_recently(digest):
                try:
                    self.store.put(digest, blob)
                except PayloadStoreError as exc:
                    raise BlobStoreUnavailableError(
                        f"a {len(blob)}-byte payload could not be stored: {exc}; check {STORE_ENV} "
                        "and that this process can write there"
                    ) from None
                self._note_written(digest)
            self.cache.put(digest, blob)
            refs.append(ClaimCheckRef(sha256=digest, size=len(blob), store=self.store.describe()))
        return refs

    def _written_recently(self, digest: str) -> bool:
        with self._written_lock:
            at = self._written.get(digest)
            return at is not None and time.monotonic() - at < REWRITE_AFTER_SECONDS

    def _note_written(self, digest: str) -> None:
        with self._written_lock:
            self._written[digest] = time.monotonic()
            self._written.move_to_end(digest)
            while len(self._written) > _RECENT_WRITES:
                self._written.popitem(last=False)

    def _fetch_all(self, refs: list[ClaimCheckRef]) -> dict[str, bytes]:
        fetched: dict[str, bytes] = {}
        for ref in refs:
            try:
                blob = self.store.get(ref.sha256)
            except PayloadStoreError as exc:
                raise BlobStoreUnavailableError(
                    f"payload blob {ref.sha256} could not be read: {exc}; check that this process "
                    f"reaches the store ({STORE_ENV}); a worker retries the workflow task"
                ) from None
            if blob is None:
                raise BlobMissingError(
                    f"payload blob {ref.sha256} ({ref.size} bytes, written to {ref.store}) is not in "
                    f"this process's payload store {self.store.describe()}: every worker, client and "
                    f"the codec server must share one store ({STORE_ENV}; S3 or a shared volume in "
                    "production), and a blob must not be deleted while a history refers to it. Point "
                    "this process at the store that holds it, or restore the blob (a worker retries "
                    "the workflow task)"
                )
            self._verify(ref, blob)
            self.cache.put(ref.sha256, blob)
            fetched[ref.sha256] = blob
        return fetched

    def _verify(self, ref: ClaimCheckRef, blob: bytes) -> None:
        actual = hashlib.sha256(blob).hexdigest()
        if actual != ref.sha256 or len(blob) != ref.size:
            raise BlobTamperedError(
                f"payload blob {ref.sha256} in {self.store.describe()} was altered or damaged: its "
                f"content has SHA-256 {actual} ({len(blob)} bytes, expected {ref.size}); it was not "
                "decoded. Restore the blob from a backup of the store (its name is its SHA-256)"
            )

    def _payload_of(self, ref: ClaimCheckRef, blob: bytes) -> Payload:
        try:
            return Payload.FromString(blob)
        except DecodeError:
            raise BlobTamperedError(
                f"payload blob {ref.sha256} in {self.store.describe()} matches its SHA-256 but is not "
                "a payload: it was not written by pitstop's codec"
            ) from None


def claim_check_for(settings: Settings, inner: PayloadCodec | None) -> ClaimCheckCodec:
    """The claim-check codec of a process with `settings`, around `inner` (PayloadStoreError
    when the configured store is not one)."""
    return ClaimCheckCodec(
        open_store(settings.payload_store, settings.home, settings.payload_s3_endpoint),
        inner,
        threshold=settings.payload_threshold,
        cache_bytes=settings.payload_cache_bytes,
    )
