"""The two HMAC keys pitstop's trust rests on, read from the environment or a file.

- worker key (`PITSTOP_WORKER_KEY` or `PITSTOP_WORKER_KEY_FILE`), held by workers only: signs
  every message between a run and its host workflows, each host's input, and the state a run
  carries across continue-as-new.
- vote key (`PITSTOP_VOTE_KEY` or `PITSTOP_VOTE_KEY_FILE`), held by the Slack bridge and the
  workers (in development also by the CLI and the demo): signs verified votes and requesters.

A key is at least 32 random bytes written as hexadecimal (`openssl rand -hex 32`, or
`pitstop keys new FILE`). Several keys, one per line (or comma-separated), rotate a key:
the first signs, every one verifies. Without either variable, the embedded stack's key
(`<PITSTOP_HOME>/keys/<kind>.key`, written 0600 by `pitstop dev up`) is used when it exists,
so a development machine needs no set-up. Keys live in worker, bridge and CLI processes only:
workflow code asks local activities to sign and check, and never sees a key.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

KeyKind = Literal["worker", "vote"]
MIN_KEY_BYTES = 32
DEFAULT_HOME = Path(".pitstop")
KEYS_DIR = "keys"

_VARIABLE: dict[KeyKind, str] = {"worker": "PITSTOP_WORKER_KEY", "vote": "PITSTOP_VOTE_KEY"}


class KeyConfigError(ValueError):
    """A key is missing or unusable; the message says which variable or file and what to do."""


@dataclass(frozen=True)
class KeyRing:
    """One kind of key: the signing key first, then older keys still accepted (rotation)."""

    kind: KeyKind
    keys: tuple[bytes, ...]
    origin: str

    @property
    def signing(self) -> bytes:
        return self.keys[0]

    @property
    def key_id(self) -> str:
        """A short fingerprint of the signing key, safe to print (it reveals nothing of the key)."""
        return hashlib.sha256(b"pitstop-key-id\x00" + self.signing).hexdigest()[:12]

    def __repr__(self) -> str:  # never the key bytes, whatever prints this
        return f"KeyRing({self.kind}, id={self.key_id}, {len(self.keys)} key(s) from {self.origin})"

    __str__ = __repr__


def new_key_text() -> str:
    """A fresh key in the format `parse_keys` reads."""
    return secrets.token_hex(MIN_KEY_BYTES)


def how_to_make(kind: KeyKind) -> str:
    var = _VARIABLE[kind]
    return (
        f"create one with `pitstop keys new /etc/pitstop/{kind}.key` (or `openssl rand -hex 32`) and set "
        f"{var}_FILE to its path (or {var} to its text); `pitstop dev up` writes one for the embedded "
        f"stack under .pitstop/{KEYS_DIR}/"
    )


def parse_keys(kind: KeyKind, text: str, origin: str) -> KeyRing:
    """Keys from their text: hexadecimal, at least 32 bytes each, one per line or comma-separated."""
    items = [item.strip() for line in text.splitlines() for item in line.split(",")]
    items = [item for item in items if item and not item.startswith("#")]
    if not items:
        raise KeyConfigError(f"the {kind} key from {origin} is empty; {how_to_make(kind)}")
    keys: list[bytes] = []
    for n, item in enumerate(items, start=1):
        which = f"the {kind} key from {origin}" + (f" (key {n})" if len(items) > 1 else "")
        try:
            raw = bytes.fromhex(item)
        except ValueError:
            raise KeyConfigError(
                f"{which} is not hexadecimal; a key is {2 * MIN_KEY_BYTES}+ hex characters "
                f"({MIN_KEY_BYTES}+ random bytes); {how_to_make(kind)}"
            ) from None
        if len(raw) < MIN_KEY_BYTES:
            raise KeyConfigError(
                f"{which} is {len(raw)} bytes; at least {MIN_KEY_BYTES} random bytes "
                f"({2 * MIN_KEY_BYTES} hex characters) are required; {how_to_make(kind)}"
            )
        if len(set(raw)) < 8:
            raise KeyConfigError(f"{which} is not random (too few distinct bytes); {how_to_make(kind)}")
        keys.append(raw)
    return KeyRing(kind=kind, keys=tuple(keys), origin=origin)


def home_key_path(kind: KeyKind, home: Path) -> Path:
    return home / KEYS_DIR / f"{kind}.key"


def _home(environ: Mapping[str, str], home: Path | None) -> Path:
    if home is not None:
        return home
    return Path(environ.get("PITSTOP_HOME") or DEFAULT_HOME)


def load_key(
    kind: KeyKind, environ: Mapping[str, str] = os.environ, home: Path | None = None
) -> KeyRing | None:
    """The key of `kind` from `PITSTOP_<KIND>_KEY`, `..._KEY_FILE`, or the embedded stack's home;
    None when none is configured. A configured key that cannot be used raises KeyConfigError."""
    var = _VARIABLE[kind]
    value = environ.get(var, "").strip()
    path = environ.get(f"{var}_FILE", "").strip()
    if value and path:
        raise KeyConfigError(f"both {var} and {var}_FILE are set; set only one of them")
    if value:
        return parse_keys(kind, value, var)
    if path:
        return _from_file(kind, Path(path), f"{var}_FILE={path}")
    local = home_key_path(kind, _home(environ, home))
    if local.is_file():
        return _from_file(kind, local, str(local))
    return None


def require_key(kind: KeyKind, environ: Mapping[str, str] = os.environ, home: Path | None = None) -> KeyRing:
    ring = load_key(kind, environ, home)
    if ring is None:
        var = _VARIABLE[kind]
        raise KeyConfigError(f"no {kind} key: neither {var} nor {var}_FILE is set; {how_to_make(kind)}")
    return ring


def _from_file(kind: KeyKind, path: Path, origin: str) -> KeyRing:
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise KeyConfigError(f"{origin}: no such file; {how_to_make(kind)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyConfigError(f"{origin}: cannot read it ({exc}); {how_to_make(kind)}") from None
    return parse_keys(kind, text, origin)


def write_key_file(path: Path) -> None:
    """A new key in `path`, readable by its owner only; never overwrites an existing file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(new_key_text() + "\n")


def ensure_home_keys(home: Path) -> list[Path]:
    """The embedded stack's keys under `home` (created 0600 when missing); returns their paths."""
    keys_dir = home / KEYS_DIR
    keys_dir.mkdir(parents=True, exist_ok=True)
    keys_dir.chmod(0o700)
    paths: list[Path] = []
    for kind in ("worker", "vote"):
        path = home_key_path(kind, home)
        if not path.exists():
            # Another process may make it first: then its key is the one.
            with contextlib.suppress(FileExistsError):
                write_key_file(path)
        paths.append(path)
    return paths


__all__ = [
    "KeyConfigError",
    "KeyKind",
    "KeyRing",
    "ensure_home_keys",
    "home_key_path",
    "how_to_make",
    "load_key",
    "new_key_text",
    "parse_keys",
    "require_key",
    "write_key_file",
]
