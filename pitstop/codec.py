"""AES-256-GCM payload encryption: what Temporal stores of a run is ciphertext.

Every payload a pitstop client or worker writes (run requests and their vars, module results
with stdout, facts, statuses, votes, failure messages) is serialized whole, metadata included,
and encrypted with the keyring's active key. The encrypted payload says how to read it back,
in the layout of Temporal's own encryption sample, so other tools recognise it:

    metadata: encoding = binary/encrypted, encryption-key-id = <key id>
    data:     12-byte random nonce || AES-GCM ciphertext and tag

The associated data binds the format version and the key id, so a payload cannot be relabelled
with another id. Payloads without `binary/encrypted` are plaintext written before encryption
was turned on (or by a client without keys); they are passed through unchanged, so turning
encryption on mid-life keeps old runs readable. Accepting them does not weaken anything the
codec promises: it provides confidentiality of what is stored, not proof of who sent a message
(anyone the namespace lets in could send plaintext, or simply terminate a run).

A payload that cannot be decrypted raises `PayloadCodecError` (a ValueError, never a
non-retryable ApplicationError): in a worker that fails the workflow task, which Temporal
retries, so adding a missing key repairs the run instead of failing it for good.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from pitstop.codec_keys import KEY_ENV, KEY_FILE_ENV, Keyring

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
NONCE_BYTES = 12
TAG_BYTES = 16
_AAD_PREFIX = b"pitstop/payload-codec/v1\x00"


class PayloadCodecError(ValueError):
    """A payload could not be decrypted; the message says why and what to do."""


class UnknownKeyError(PayloadCodecError):
    pass


class TamperedPayloadError(PayloadCodecError):
    pass


def is_encrypted(payload: Payload) -> bool:
    return payload.metadata.get("encoding") == ENCODING


def _shown(raw: bytes) -> str:
    # The key id comes from stored data, which anyone with access to the namespace can write.
    return repr(raw[:64].decode("utf-8", errors="replace"))


def _associated_data(key_id: str) -> bytes:
    return _AAD_PREFIX + key_id.encode()


class AesGcmCodec(PayloadCodec):
    """Encrypts with the keyring's active key; decrypts with whichever key a payload names."""

    def __init__(self, keyring: Keyring) -> None:
        self.keyring = keyring
        self._ciphers = {k.key_id: AESGCM(k.secret) for k in keyring.keys}

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        if is_encrypted(payload):
            # Already ciphertext (a raw payload handed back, e.g. a described schedule's action).
            return payload
        key_id = self.keyring.active.key_id
        nonce = os.urandom(NONCE_BYTES)  # random per payload: never reused under one key in practice
        sealed = self._ciphers[key_id].encrypt(nonce, payload.SerializeToString(), _associated_data(key_id))
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: key_id.encode()},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        if not is_encrypted(payload):
            return payload
        raw_id = payload.metadata.get(KEY_ID_METADATA)
        if not raw_id:
            raise TamperedPayloadError(
                "an encrypted payload carries no encryption-key-id: it was not written by pitstop's "
                "codec or was altered; it was not decoded"
            )
        key_id = raw_id.decode("utf-8", errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise UnknownKeyError(
                f"payload was encrypted with key id {_shown(raw_id)} which this process does not have; "
                f"add it to {KEY_ENV} or {KEY_FILE_ENV} after the active key "
                f"(this process has: {', '.join(self.keyring.key_ids)}; from {self.keyring.source})"
            )
        data = payload.data
        if len(data) < NONCE_BYTES + TAG_BYTES:
            raise TamperedPayloadError(
                f"payload encrypted with key id {key_id!r} is truncated ({len(data)} bytes); "
                "it was altered and was not decoded"
            )
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], _associated_data(key_id))
        except InvalidTag:
            raise TamperedPayloadError(
                f"payload encrypted with key id {key_id!r} failed authentication: it was altered, "
                "or encrypted with a different key under the same id; it was not decoded"
            ) from None
        try:
            return Payload.FromString(plain)
        except DecodeError:
            raise TamperedPayloadError(
                f"payload encrypted with key id {key_id!r} decrypted to something that is not a payload"
            ) from None
