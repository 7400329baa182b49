"""Payload encryption keys: where they come from, how they are written, which one encrypts.

A key is written `<key id>:<base64 of 32 random bytes>` (`pitstop codec keygen` prints one).
Several keys make a keyring, separated by commas (`PITSTOP_CODEC_KEY`) or by lines (a key
file, `#` comments allowed). The first key is the active one: it encrypts everything this
process writes. Every key decrypts what was written with it, so rotation is: put the new key
first, keep the old ones after it until no history that needs them is left.

Where a process finds its keys, first match wins:
  1. `PITSTOP_CODEC_KEY` (the keyring itself),
  2. `PITSTOP_CODEC_KEY_FILE` (a file holding it),
  3. `<PITSTOP_HOME>/codec.keys` (written by `pitstop dev up --codec` for the embedded stack),
and no keys at all means payloads are not encrypted.

Error messages never contain key material: entries are named by position, and a key id is
shown only when it is valid, which a base64 key (43 characters or more) never is.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pitstop.settings import Settings

KEY_ENV = "PITSTOP_CODEC_KEY"
KEY_FILE_ENV = "PITSTOP_CODEC_KEY_FILE"
HOME_KEY_FILE = "codec.keys"
KEY_BYTES = 32  # AES-256
# At most 40 characters: a base64 key (43+) can never pass for an id and end up in a message.
KEY_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
KEY_ID_RULE = "1-40 letters, digits, '.', '_' or '-', starting with a letter or digit"
_FORMAT = "`<key id>:<base64 of 32 bytes>`"
_GENERATE = "generate one with `pitstop codec keygen`"


class CodecKeyError(ValueError):
    """The configured keys cannot be used; the message says which entry and what to do."""


@dataclass(frozen=True)
class CodecKey:
    key_id: str
    # repr=False: a key must never show up in a log line, a traceback or a test failure.
    secret: bytes = field(repr=False)


@dataclass(frozen=True)
class Keyring:
    """The keys of one process; `keys[0]` encrypts, every key decrypts."""

    keys: tuple[CodecKey, ...]
    source: str

    def __post_init__(self) -> None:
        if not self.keys:
            raise CodecKeyError(f"{self.source} holds no key; expected {_FORMAT} ({_GENERATE})")

    @property
    def active(self) -> CodecKey:
        return self.keys[0]

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(k.key_id for k in self.keys)

    def get(self, key_id: str) -> CodecKey | None:
        return next((k for k in self.keys if k.key_id == key_id), None)

    def describe(self) -> str:
        """One line for logs and status: never a key, only ids and where they came from."""
        others = self.key_ids[1:]
        rest = f", also decrypting with {', '.join(others)}" if others else ""
        return f"active key id {self.active.key_id}{rest} (from {self.source})"


def _decode_secret(text: str, where: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    try:
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise CodecKeyError(f"{where}: the key is not base64 ({_GENERATE})") from None
    if len(raw) != KEY_BYTES:
        raise CodecKeyError(
            f"{where}: the key is {len(raw)} bytes; AES-256-GCM needs exactly {KEY_BYTES} ({_GENERATE})"
        )
    return raw


def parse_keyring(text: str, source: str) -> Keyring:
    """Keys written as `id:base64`, separated by commas or lines; `#` starts a comment line."""
    entries = [
        part.strip()
        for line in text.splitlines()
        if not line.strip().startswith("#")
        for part in line.split(",")
        if part.strip()
    ]
    keys: list[CodecKey] = []
    for number, entry in enumerate(entries, start=1):
        where = f"{source}, entry {number}"
        key_id, sep, secret = entry.partition(":")
        key_id, secret = key_id.strip(), secret.strip()
        if not sep or not secret:
            raise CodecKeyError(f"{where}: expected {_FORMAT} ({_GENERATE})")
        if not KEY_ID_PATTERN.match(key_id):
            raise CodecKeyError(
                f"{where}: the key id is not valid ({KEY_ID_RULE}); expected {_FORMAT} ({_GENERATE})"
            )
        where = f"{source}, key id {key_id!r}"
        if any(k.key_id == key_id for k in keys):
            raise CodecKeyError(f"{where} appears twice; each key needs its own id")
        keys.append(CodecKey(key_id, _decode_secret(secret, where)))
    return Keyring(tuple(keys), source)


def load_keyring_file(path: Path, source: str | None = None) -> Keyring:
    label = source or f"key file {path}"
    try:
        text = path.read_text()
    except OSError as exc:
        raise CodecKeyError(f"cannot read {label}: {exc.strerror or exc}") from None
    return parse_keyring(text, label)


def home_key_file(home: Path) -> Path:
    return home / HOME_KEY_FILE


def resolve_keyring(key: str | None, key_file: Path | None, home: Path) -> Keyring | None:
    """The keys this process uses (see the module docstring for the order), or None."""
    if key is not None and key_file is not None:
        raise CodecKeyError(f"both {KEY_ENV} and {KEY_FILE_ENV} are set; set only one of them")
    if key is not None:
        return parse_keyring(key, KEY_ENV)
    if key_file is not None:
        return load_keyring_file(key_file, f"{KEY_FILE_ENV} {key_file}")
    in_home = home_key_file(home)
    if in_home.is_file():
        return load_keyring_file(in_home)
    return None


def keyring_for(settings: Settings) -> Keyring | None:
    """The keys a process with `settings` uses (None: payloads are not encrypted).

    Raises CodecKeyError when keys are configured but unusable.
    """
    key = settings.codec_key.get_secret_value() if settings.codec_key is not None else None
    return resolve_keyring(key, settings.codec_key_file, settings.home)


def new_key_id() -> str:
    """A key id that sorts by creation day and does not collide within a day."""
    return f"k{time.strftime('%Y%m%d')}-{secrets.token_hex(2)}"


def generate_key(key_id: str | None = None) -> str:
    """A new key as written in a keyring: `<key id>:<base64 of 32 random bytes>`."""
    key_id = key_id or new_key_id()
    if not KEY_ID_PATTERN.match(key_id):
        raise CodecKeyError(f"key id {key_id!r} is not valid ({KEY_ID_RULE})")
    return f"{key_id}:{base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()}"


def write_key_file(path: Path, key_id: str | None = None) -> Keyring:
    """Create `path` (mode 0600) holding one new key; refuses to overwrite an existing file,
    whose keys may be the only way to read history written with them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = generate_key(key_id)
    header = (
        "# pitstop payload encryption keys: `<key id>:<base64 of 32 bytes>`, one per line.\n"
        "# The first key encrypts; every key decrypts. Keep old keys while history needs them.\n"
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(header + line + "\n")
    return load_keyring_file(path)
