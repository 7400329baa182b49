"""The claim-check codec over a real directory store: which payloads leave history (the
threshold's edges), what history keeps instead, and the errors a person gets when a blob is
missing, altered or the reference is not one."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload

from pitstop.client import converter_for, data_converter, encryption_summary, payload_store_summary
from pitstop.codec import ENCODING as ENCRYPTED
from pitstop.codec import AesGcmCodec, PayloadCodecError
from pitstop.codec_claimcheck import (
    ENCODING,
    BadReferenceError,
    BlobMissingError,
    BlobStoreUnavailableError,
    BlobTamperedError,
    ClaimCheckCodec,
    reference_of,
)
from pitstop.codec_keys import parse_keyring
from pitstop.payload_store import DirectoryStore, PayloadStoreError, open_store
from pitstop.payload_store_cache import BlobCache
from pitstop.payload_store_s3 import S3Store
from pitstop.settings import Settings

KEY = "ka:" + base64.b64encode(bytes(range(32))).decode()
THRESHOLD = 2048
MARKER = b"MARKER-claim-check"


def payload_of_size(size: int, fill: bytes = b"x") -> Payload:
    """A json/plain payload whose serialized size is exactly `size` bytes (size >= 30)."""
    payload = Payload(metadata={"encoding": b"json/plain"}, data=fill)
    length = size - payload.ByteSize() + 1
    payload.data = fill * length
    length -= payload.ByteSize() - size  # the data's length prefix may have grown
    payload.data = fill * length
    assert payload.ByteSize() == size, (size, payload.ByteSize())
    return payload


@pytest.fixture
def store(tmp_path: Path) -> DirectoryStore:
    return DirectoryStore(tmp_path / "payloads")


def codec(store: DirectoryStore, *, encrypt: bool = False, cache_bytes: int = 1 << 20) -> ClaimCheckCodec:
    inner = AesGcmCodec(parse_keyring(KEY, "test")) if encrypt else None
    return ClaimCheckCodec(store, inner, threshold=THRESHOLD, cache_bytes=cache_bytes)


def stored_files(store: DirectoryStore) -> list[Path]:
    return sorted(p for p in store.root.rglob("*") if p.is_file())


# -- the threshold ---------------------------------------------------------------------------


async def test_a_payload_at_the_threshold_stays_and_one_byte_more_is_claim_checked(
    store: DirectoryStore,
) -> None:
    at, over = payload_of_size(THRESHOLD), payload_of_size(THRESHOLD + 1)
    encoded = await codec(store).encode([at, over])
    assert encoded[0] is at  # passed through: no copy, no store access
    assert encoded[1].metadata["encoding"] == ENCODING
    ref = reference_of(encoded[1])
    assert ref.size == THRESHOLD + 1 and ref.store == store.describe()
    assert ref.sha256 == hashlib.sha256(over.SerializeToString()).hexdigest()
    assert encoded[1].ByteSize() < 300
    assert [p.name for p in stored_files(store)] == [ref.sha256]
    assert await codec(store).decode(encoded) == [at, over]  # a fresh codec: read from the store


async def test_small_payloads_never_touch_the_store(store: DirectoryStore) -> None:
    payloads = [payload_of_size(n) for n in (30, 500, THRESHOLD)]
    c = codec(store)
    encoded = await c.encode(payloads)
    decoded = await c.decode(encoded)
    assert all(a is b for a, b in zip(encoded, payloads, strict=True))
    assert all(a is b for a, b in zip(decoded, payloads, strict=True))
    assert not store.root.exists()


async def test_the_threshold_is_measured_after_encryption(store: DirectoryStore) -> None:
    # Encryption adds a nonce, a tag and metadata: a payload just under the threshold in the
    # clear is over it as Temporal would store it.
    near = payload_of_size(THRESHOLD - 10)
    [encoded] = await codec(store, encrypt=True).encode([near])
    assert encoded.metadata["encoding"] == ENCODING
    assert await codec(store, encrypt=True).decode([encoded]) == [near]


async def test_the_same_bytes_are_stored_once(store: DirectoryStore) -> None:
    big = payload_of_size(10 * THRESHOLD)
    first = await codec(store).encode([big, big])
    second = await codec(store).encode([big])
    assert first[0] == first[1] == second[0]
    assert len(stored_files(store)) == 1


# -- encryption ---------------------------------------------------------------------------


async def test_with_encryption_the_store_holds_ciphertext_only(store: DirectoryStore) -> None:
    big = Payload(metadata={"encoding": b"json/plain"}, data=MARKER * 1000)
    c = codec(store, encrypt=True)
    [encoded] = await c.encode([big])
    [blob] = stored_files(store)
    stored = blob.read_bytes()
    assert MARKER not in stored and Payload.FromString(stored).metadata["encoding"] == ENCRYPTED
    assert MARKER not in encoded.SerializeToString()
    assert await codec(store, encrypt=True).decode([encoded]) == [big]
    # Without the key, the blob resolves but cannot be read: the encryption codec's error.
    with pytest.raises(PayloadCodecError, match="key id 'ka'"):
        await ClaimCheckCodec(store, AesGcmCodec(parse_keyring("kb:" + KEY[3:], "t"))).decode([encoded])


# -- what goes wrong ------------------------------------------------------------------------


async def test_a_missing_blob_is_a_clear_retryable_error(tmp_path: Path, store: DirectoryStore) -> None:
    [encoded] = await codec(store).encode([payload_of_size(5 * THRESHOLD)])
    sha = reference_of(encoded).sha256
    elsewhere = DirectoryStore(tmp_path / "another")
    with pytest.raises(BlobMissingError) as caught:
        await codec(elsewhere).decode([encoded])
    message = str(caught.value)
    assert sha in message and str(store.root) in message and str(elsewhere.root) in message
    assert "PITSTOP_PAYLOAD_STORE" in message and "restore the blob" in message
    # A ValueError, not an ApplicationError: a worker fails the workflow task and Temporal retries.
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, PayloadCodecError)


async def test_an_altered_blob_is_refused(store: DirectoryStore) -> None:
    [encoded] = await codec(store).encode([payload_of_size(5 * THRESHOLD)])
    sha = reference_of(encoded).sha256
    path = store.path_of(sha)
    os.chmod(path, 0o600)
    path.write_bytes(path.read_bytes().replace(b"xxxx", b"yyyy", 1))
    with pytest.raises(BlobTamperedError) as caught:
        await codec(store).decode([encoded])
    assert sha in str(caught.value) and "altered or damaged" in str(caught.value)
    assert str(store.root) in str(caught.value)


async def test_the_cache_serves_blobs_already_read(store: DirectoryStore) -> None:
    big = payload_of_size(5 * THRESHOLD)
    writer, reader = codec(store), codec(store)
    [encoded] = await writer.encode([big])
    assert await reader.decode([encoded]) == [big]
    store.delete(reference_of(encoded).sha256)
    assert await reader.decode([encoded]) == [big]  # from memory
    assert await writer.decode([encoded]) == [big]  # what it wrote, too
    with pytest.raises(BlobMissingError):
        await codec(store).decode([encoded])


async def test_a_blob_larger_than_the_cache_still_decodes(store: DirectoryStore) -> None:
    big = payload_of_size(5 * THRESHOLD)
    [encoded] = await codec(store, cache_bytes=THRESHOLD).encode([big])
    tiny_cache = codec(store, cache_bytes=THRESHOLD)
    assert await tiny_cache.decode([encoded]) == [big]
    assert len(tiny_cache.cache) == 0


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"not json", "valid reference"),
        (json.dumps({"sha256": "../../etc/passwd", "size": 1, "store": "x"}).encode(), "valid reference"),
        (json.dumps({"sha256": "a" * 64, "size": -1, "store": "x"}).encode(), "valid reference"),
        (json.dumps({"sha256": "a" * 64, "size": 1, "store": "x", "url": "http://x"}).encode(), "valid"),
    ],
)
async def test_a_reference_that_is_not_one_is_refused(
    store: DirectoryStore, data: bytes, problem: str
) -> None:
    with pytest.raises(BadReferenceError, match=problem):
        await codec(store).decode([Payload(metadata={"encoding": ENCODING}, data=data)])


async def test_a_store_that_cannot_be_written_fails_the_encode_clearly(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    c = ClaimCheckCodec(DirectoryStore(tmp_path / "file" / "payloads"), threshold=THRESHOLD)
    with pytest.raises(BlobStoreUnavailableError, match="could not be stored: cannot write blob"):
        await c.encode([payload_of_size(5 * THRESHOLD)])


# -- the directory store ------------------------------------------------------------------


def test_directory_blobs_are_private_and_whole(store: DirectoryStore) -> None:
    data = b"blob" * 100
    sha = hashlib.sha256(data).hexdigest()
    store.put(sha, data)
    store.put(sha, data)  # again: harmless
    path = store.path_of(sha)
    assert path.read_bytes() == data and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in stored_files(store)] == [sha]  # no temporary file left
    [info] = list(store.blobs())
    assert (info.digest, info.size) == (sha, len(data))
    store.delete(sha)
    store.delete(sha)
    assert store.get(sha) is None and list(store.blobs()) == []


def test_a_key_is_a_sha256_never_a_path(store: DirectoryStore) -> None:
    with pytest.raises(PayloadStoreError, match="not a SHA-256"):
        store.get("../" * 5 + "etc/passwd")


def test_the_store_setting(tmp_path: Path) -> None:
    default = open_store(None, tmp_path)
    assert isinstance(default, DirectoryStore) and default.root == (tmp_path / "payloads").resolve()
    assert open_store(f"dir:{tmp_path}/x", tmp_path).describe() == f"dir:{tmp_path}/x"
    s3 = open_store("s3://pitstop-payloads/prod/run", tmp_path, "http://127.0.0.1:9000")
    assert isinstance(s3, S3Store) and (s3.bucket, s3.prefix) == ("pitstop-payloads", "prod/run")
    assert s3.key_of("ab" + "0" * 62) == "prod/run/ab/ab" + "0" * 62
    for bad, says in (
        ("/tmp/payloads", "use dir:/path"),
        ("dir:", "names no directory"),
        ("s3://Bad_Bucket/x", "not a valid S3 bucket name"),
        ("s3://bucket/x?endpoint=http://evil", "use s3://bucket/prefix"),
    ):
        with pytest.raises(PayloadStoreError, match=says):
            open_store(bad, tmp_path)


def test_settings_read_the_payload_store_from_the_environment(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "PITSTOP_HOME": str(tmp_path),
            "PITSTOP_PAYLOAD_STORE": f"dir:{tmp_path}/blobs",
            "PITSTOP_PAYLOAD_THRESHOLD": "65536",
            "PITSTOP_PAYLOAD_CACHE_BYTES": "1000",
        }
    )
    converter = data_converter(settings)
    codec = converter.payload_codec
    assert isinstance(codec, ClaimCheckCodec) and codec.inner is None
    assert (codec.threshold, codec.cache.max_bytes) == (65536, 1000)
    assert payload_store_summary(converter) == f"payloads over 65536 bytes go to dir:{tmp_path}/blobs"
    assert encryption_summary(converter) == "off"
    with pytest.raises(ValueError, match="payload_threshold"):
        Settings.from_env({"PITSTOP_PAYLOAD_THRESHOLD": str(1024 * 1024)})


def test_encryption_and_claim_check_chain_in_the_converter(tmp_path: Path) -> None:
    converter = converter_for(parse_keyring(KEY, "test"), DirectoryStore(tmp_path))
    codec = converter.payload_codec
    assert isinstance(codec, ClaimCheckCodec) and isinstance(codec.inner, AesGcmCodec)
    assert encryption_summary(converter) == "on, active key id ka (from test)"


# -- the cache --------------------------------------------------------------------------------


def test_the_cache_is_bounded_by_bytes_least_recently_used_first() -> None:
    cache = BlobCache(max_bytes=10)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    assert cache.get("a") == b"1234"  # a is now the most recent
    cache.put("c", b"1234")  # 12 bytes: b goes
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    assert cache.size == 8
    cache.put("huge", b"x" * 11)  # never fits: not kept, evicts nothing
    assert cache.get("huge") is None and len(cache) == 2
