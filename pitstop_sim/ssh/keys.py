"""Keys of the simulated nodes (one ed25519 host key each, new at every start) and of the
client pitstop logs in with (kept across restarts, so a configured worker keeps working)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519


def new_key() -> tuple[paramiko.Ed25519Key, str]:
    """A fresh ed25519 key and its private text in OpenSSH format (what `ssh-keygen` writes)."""
    private = ed25519.Ed25519PrivateKey.generate()
    text = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    return paramiko.Ed25519Key.from_private_key(io.StringIO(text)), text


def public_line(key: paramiko.PKey, comment: str = "") -> str:
    """`ssh-ed25519 AAAA... comment`, as in authorized_keys and known_hosts."""
    return f"{key.get_name()} {key.get_base64()}" + (f" {comment}" if comment else "")


def client_key(path: Path) -> paramiko.PKey:
    """The client key stored at `path` (0600), created there when missing or unreadable."""
    if path.is_file():
        try:
            return paramiko.Ed25519Key.from_private_key(io.StringIO(path.read_text()))
        except (paramiko.SSHException, ValueError, OSError):
            pass  # not a key we wrote: replace it
    key, text = new_key()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return key
