"""The AES-GCM payload codec and its keys: round trips, metadata, tampering, rotation, and
key configuration errors that say what to do without ever showing a key."""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from pitstop.client import converter_for, data_converter, encryption_summary
from pitstop.codec import (
    ENCODING,
    KEY_ID_METADATA,
    NONCE_BYTES,
    AesGcmCodec,
    PayloadCodecError,
    TamperedPayloadError,
    UnknownKeyError,
)
from pitstop.codec_claimcheck import ClaimCheckCodec
from pitstop.codec_keys import (
    CodecKeyError,
    Keyring,
    generate_key,
    keyring_for,
    parse_keyring,
    resolve_keyring,
    write_key_file,
)
from pitstop.contracts import RunRequest
from pitstop.settings import Settings

KEY_A = "ka:" + base64.b64encode(bytes(range(32))).decode()
KEY_B = "kb:" + base64.b64encode(bytes(range(32, 64))).decode()
MARKER = "MARKER-3f9c1d"


def codec(text: str) -> AesGcmCodec:
    return AesGcmCodec(parse_keyring(text, "test"))


def plain(data: bytes, encoding: bytes = b"json/plain") -> Payload:
    return Payload(metadata={"encoding": encoding}, data=data)


# -- round trip and metadata ------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    data=st.binary(max_size=4096),
    meta=st.dictionaries(st.text(min_size=1, max_size=8), st.binary(max_size=8)),
)
async def test_any_payload_round_trips_with_its_metadata(data: bytes, meta: dict[str, bytes]) -> None:
    original = Payload(metadata=meta, data=data)
    c = codec(KEY_A)
    [sealed] = await c.encode([original])
    [opened] = await c.decode([sealed])
    assert opened == original


async def test_encrypted_payload_names_encoding_and_key_id_and_hides_the_data() -> None:
    c = codec(f"{KEY_B},{KEY_A}")
    original = plain(f'{{"secret": "{MARKER}"}}'.encode())
    [sealed] = await c.encode([original])
    assert dict(sealed.metadata) == {"encoding": ENCODING, KEY_ID_METADATA: b"kb"}
    assert MARKER.encode() not in sealed.SerializeToString()
    assert b"json/plain" not in sealed.SerializeToString()  # the inner metadata is sealed too
    # nonce (12) + the serialized payload + the GCM tag (16)
    assert len(sealed.data) == NONCE_BYTES + len(original.SerializeToString()) + 16


async def test_each_encryption_uses_a_fresh_nonce() -> None:
    c = codec(KEY_A)
    sealed = await c.encode([plain(b"same")] * 20)
    assert len({p.data[:NONCE_BYTES] for p in sealed}) == 20
    assert len({p.data for p in sealed}) == 20


async def test_plaintext_from_before_encryption_passes_through_unchanged() -> None:
    old = plain(b'{"a": 1}')
    assert await codec(KEY_A).decode([old]) == [old]


async def test_encoding_an_already_encrypted_payload_leaves_it_alone() -> None:
    c = codec(KEY_A)
    [sealed] = await c.encode([plain(b"x")])
    [again] = await c.encode([sealed])
    assert again == sealed
    assert await c.decode([again]) == [plain(b"x")]


# -- tampering ------------------------------------------------------------------------------


async def sealed_by_a() -> Payload:
    [sealed] = await codec(KEY_A).encode([plain(MARKER.encode())])
    return sealed


@pytest.mark.parametrize("index", [0, NONCE_BYTES - 1, NONCE_BYTES, NONCE_BYTES + 5, -1])
async def test_a_flipped_bit_anywhere_is_refused(index: int) -> None:
    sealed = await sealed_by_a()
    data = bytearray(sealed.data)
    data[index] ^= 0x01
    tampered = Payload(metadata=sealed.metadata, data=bytes(data))
    with pytest.raises(TamperedPayloadError, match="key id 'ka' failed authentication: it was altered"):
        await codec(KEY_A).decode([tampered])


async def test_relabelling_with_another_key_id_is_refused() -> None:
    # Same key material under two ids: the id is bound as associated data, so a payload
    # relabelled from one id to the other does not open.
    secret = KEY_A.split(":", 1)[1]
    c = codec(f"one:{secret},two:{secret}")
    [sealed] = await c.encode([plain(b"x")])
    relabelled = Payload(metadata={"encoding": ENCODING, KEY_ID_METADATA: b"two"}, data=sealed.data)
    with pytest.raises(TamperedPayloadError, match="key id 'two' failed authentication"):
        await c.decode([relabelled])


async def test_truncated_and_id_less_payloads_are_refused() -> None:
    sealed = await sealed_by_a()
    with pytest.raises(TamperedPayloadError, match=r"is truncated \(20 bytes\)"):
        await codec(KEY_A).decode([Payload(metadata=sealed.metadata, data=sealed.data[:20])])
    with pytest.raises(TamperedPayloadError, match="carries no encryption-key-id"):
        await codec(KEY_A).decode([Payload(metadata={"encoding": ENCODING}, data=sealed.data)])


async def test_the_same_id_with_a_different_key_is_refused() -> None:
    sealed = await sealed_by_a()
    impostor = "ka:" + base64.b64encode(os.urandom(32)).decode()
    with pytest.raises(TamperedPayloadError, match="encrypted with a different key under the same id"):
        await codec(impostor).decode([sealed])


# -- rotation ---------------------------------------------------------------------------------


async def test_rotation_new_key_encrypts_old_key_still_decrypts() -> None:
    old = await sealed_by_a()
    rotated = codec(f"{KEY_B},{KEY_A}")
    [new] = await rotated.encode([plain(b"new")])
    assert new.metadata[KEY_ID_METADATA] == b"kb"
    assert await rotated.decode([old, new]) == [plain(MARKER.encode()), plain(b"new")]


async def test_a_process_without_the_old_key_names_it_and_says_where_to_add_it() -> None:
    old = await sealed_by_a()
    message = (
        "payload was encrypted with key id 'ka' which this process does not have; add it to "
        "PITSTOP_CODEC_KEY or PITSTOP_CODEC_KEY_FILE after the active key (this process has: kb; "
        "from test)"
    )
    with pytest.raises(UnknownKeyError, match=re.escape(message)):
        await codec(KEY_B).decode([old])


def test_decode_errors_retry_the_workflow_task_rather_than_failing_the_run() -> None:
    # The SDK fails a workflow for good on a non-retryable ApplicationError raised while
    # decoding; anything else fails the task, which is retried once the key is added.
    assert issubclass(PayloadCodecError, ValueError)
    assert not issubclass(PayloadCodecError, ApplicationError)


# -- the converter every client uses -------------------------------------------------------------


async def test_the_converter_encrypts_models_and_reads_them_back() -> None:
    converter = converter_for(parse_keyring(KEY_A, "test"))
    request = RunRequest(runbook="r.yaml", vars={"token_hint": MARKER}, requested_by="alice")
    [payload] = await converter.encode([request])
    assert payload.metadata["encoding"] == ENCODING and MARKER.encode() not in payload.data
    assert await converter.decode([payload], [RunRequest]) == [request]
    # What the SDK stored before encryption was on still reads.
    [old] = await pydantic_data_converter.encode([request])
    assert await converter.decode([old], [RunRequest]) == [request]


async def test_failure_messages_are_encrypted_with_the_codec_on() -> None:
    converter = converter_for(parse_keyring(KEY_A, "test"))
    failure = Failure()
    await converter.encode_failure(
        ApplicationError(f"command printed {MARKER}", type="ModuleFailed"), failure
    )
    assert MARKER.encode() not in failure.SerializeToString()
    assert failure.message == "Encoded failure"
    error = await converter.decode_failure(failure)
    assert isinstance(error, ApplicationError) and error.message == f"command printed {MARKER}"


def test_without_keys_the_converter_is_pydantic_with_the_claim_check_only(tmp_path: Path) -> None:
    converter = data_converter(Settings(home=tmp_path))
    codec = converter.payload_codec
    assert isinstance(codec, ClaimCheckCodec) and codec.inner is None
    assert converter.payload_converter_class is pydantic_data_converter.payload_converter_class
    assert converter.failure_converter_class is pydantic_data_converter.failure_converter_class
    assert encryption_summary(converter) == "off"
    assert converter_for(None) is pydantic_data_converter  # no store asked for: nothing added


def test_settings_read_keys_from_the_environment_and_hide_them(tmp_path: Path) -> None:
    settings = Settings.from_env({"PITSTOP_CODEC_KEY": KEY_A, "PITSTOP_HOME": str(tmp_path)})
    secret = KEY_A.split(":", 1)[1]
    assert secret not in repr(settings)
    keyring = keyring_for(settings)
    assert keyring is not None and keyring.key_ids == ("ka",)
    assert secret not in repr(keyring)
    assert encryption_summary(data_converter(settings)) == "on, active key id ka (from PITSTOP_CODEC_KEY)"


# -- key configuration ----------------------------------------------------------------------


def test_keyring_order_is_active_first_and_files_take_comments_and_lines(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"# rotated 2026-11\n{KEY_B}\n\n{KEY_A}\n")
    keyring = resolve_keyring(None, path, tmp_path)
    assert keyring is not None
    assert keyring.key_ids == ("kb", "ka") and keyring.active.key_id == "kb"
    assert (
        keyring.describe()
        == f"active key id kb, also decrypting with ka (from PITSTOP_CODEC_KEY_FILE {path})"
    )
    assert parse_keyring(f"{KEY_B}, {KEY_A}", "env").key_ids == ("kb", "ka")


def test_key_sources_in_order_environment_then_file_then_home(tmp_path: Path) -> None:
    assert resolve_keyring(None, None, tmp_path) is None
    write_key_file(tmp_path / "codec.keys", key_id="home")
    from_home = resolve_keyring(None, None, tmp_path)
    assert from_home is not None and from_home.key_ids == ("home",)
    (tmp_path / "other").write_text(KEY_B)
    from_file = resolve_keyring(None, tmp_path / "other", tmp_path)
    assert from_file is not None and from_file.key_ids == ("kb",)
    from_env = resolve_keyring(KEY_A, None, tmp_path)
    assert from_env is not None and from_env.key_ids == ("ka",)
    with pytest.raises(CodecKeyError, match="both PITSTOP_CODEC_KEY and PITSTOP_CODEC_KEY_FILE are set"):
        resolve_keyring(KEY_A, tmp_path / "other", tmp_path)


def test_the_key_file_is_private_and_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "codec.keys"
    keyring = write_key_file(path, key_id="first")
    assert path.stat().st_mode & 0o777 == 0o600
    before = path.read_bytes()
    with pytest.raises(FileExistsError):
        write_key_file(path, key_id="second")
    assert path.read_bytes() == before and keyring.key_ids == ("first",)


def test_generated_keys_parse_and_differ() -> None:
    one, two = generate_key("x1"), generate_key()
    assert parse_keyring(one, "t").key_ids == ("x1",)
    assert re.fullmatch(r"k\d{8}-[0-9a-f]{4}", parse_keyring(two, "t").active.key_id)
    assert one.split(":")[1] != two.split(":")[1]
    with pytest.raises(CodecKeyError, match="key id 'bad id' is not valid"):
        generate_key("bad id")


SECRET_16 = base64.b64encode(b"k" * 16).decode()
SECRET_32 = base64.b64encode(b"s" * 32).decode()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "PITSTOP_CODEC_KEY holds no key; expected `<key id>:<base64 of 32 bytes>`"),
        ("# only a comment", "PITSTOP_CODEC_KEY holds no key"),
        (SECRET_32, "PITSTOP_CODEC_KEY, entry 1: expected `<key id>:<base64 of 32 bytes>`"),
        (f"{SECRET_32}:k1", "PITSTOP_CODEC_KEY, entry 1: the key id is not valid"),
        (
            f"k1:{SECRET_16}",
            "PITSTOP_CODEC_KEY, key id 'k1': the key is 16 bytes; AES-256-GCM needs exactly 32",
        ),
        ("k1:not*base64!", "PITSTOP_CODEC_KEY, key id 'k1': the key is not base64"),
        (f"k1:{SECRET_32},k1:{SECRET_32}", "PITSTOP_CODEC_KEY, key id 'k1' appears twice"),
        (f"k1:{SECRET_32},k2", "PITSTOP_CODEC_KEY, entry 2: expected"),
    ],
)
def test_malformed_keys_are_refused_with_the_entry_named_and_no_key_shown(text: str, message: str) -> None:
    with pytest.raises(CodecKeyError) as caught:
        resolve_keyring(text, None, Path("/nonexistent"))
    assert message in str(caught.value)
    assert "pitstop codec keygen" in str(caught.value) or "twice" in str(caught.value)
    for secret in (SECRET_16, SECRET_32, SECRET_32.rstrip("=")):
        assert secret not in str(caught.value)


def test_urlsafe_and_unpadded_base64_are_accepted() -> None:
    raw = bytes([251] * 32)  # encodes with '+'/'/' in standard base64
    urlsafe = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    keyring = parse_keyring(f"u:{urlsafe}", "t")
    assert keyring.active.secret == raw


def test_an_unreadable_key_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(
        CodecKeyError, match=re.escape(f"cannot read PITSTOP_CODEC_KEY_FILE {missing}: No such file")
    ):
        keyring_for(Settings(home=tmp_path, codec_key_file=missing))


def test_a_keyring_needs_a_key() -> None:
    with pytest.raises(CodecKeyError, match="holds no key"):
        Keyring((), "nowhere")


def test_settings_keep_the_key_secret() -> None:
    settings = Settings(codec_key=SecretStr(KEY_A))
    assert KEY_A not in repr(settings) and KEY_A not in str(settings.model_dump())


# -- the embedded stack's switch ------------------------------------------------------------------


def test_the_home_key_file_switches_the_embedded_stack_to_encryption(tmp_path: Path) -> None:
    from pitstop.cli.dev import encryption_line
    from pitstop.devstack import DevStack, StackConfig

    config = StackConfig(home=tmp_path, codec_port=18081, ui_port=18233)
    off = DevStack(config)
    environ: dict[str, str] = {}
    assert off.codec_keyring(environ) is None and not off.codec_on
    assert off.parts == ("temporal", "s3", "etcd")
    assert "--ui-codec-endpoint" not in off.command("temporal")
    assert encryption_line(off).startswith("payload encryption: off (`pitstop dev up --codec` turns it on)")

    asked = DevStack(config.model_copy(update={"codec": True}))
    assert asked.parts == ("temporal", "s3", "etcd", "codec")
    argv = asked.command("temporal")
    assert argv[argv.index("--ui-codec-endpoint") + 1] == "http://127.0.0.1:18081"
    codec_argv = asked.command("codec")
    origins = [codec_argv[i + 1] for i, a in enumerate(codec_argv) if a == "--ui-origin"]
    assert origins == ["http://127.0.0.1:18233", "http://localhost:18233"]

    keyring = asked.ensure_codec_keys()
    assert keyring.active.key_id.startswith("dev-") and (tmp_path / "codec.keys").is_file()
    assert asked.ensure_codec_keys() == keyring  # written once, never replaced
    # From now on the file is the switch, whatever the config says.
    again = DevStack(config)
    assert again.codec_on and "codec" in again.parts
    assert again.codec_keyring(environ) == keyring
    # A process's own keys win over the home's file.
    assert again.codec_keyring({"PITSTOP_CODEC_KEY": KEY_A}) == parse_keyring(KEY_A, "PITSTOP_CODEC_KEY")
