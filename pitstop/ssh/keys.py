"""Private keys from secrets (ed25519, ECDSA, RSA; OpenSSH or PEM format) and fingerprints."""

from __future__ import annotations

import base64
import hashlib
import io

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from pitstop.ssh.errors import precondition


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's fingerprint: `SHA256:` + unpadded base64 of the key blob's SHA-256."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def load_private_key(text: str, secret_name: str) -> paramiko.PKey:
    """Parse the key held in secret `secret_name`; the message never contains the key."""
    data = text.strip().encode() + b"\n"
    loaded: object
    try:
        try:
            loaded = serialization.load_ssh_private_key(data, password=None)
        except ValueError:
            loaded = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise precondition(
            f"the SSH key in secret {secret_name!r} is encrypted with a passphrase; store an "
            "unencrypted key in the secret (the secret store protects it at rest)"
        ) from None
    except (ValueError, paramiko.SSHException):
        raise precondition(
            f"secret {secret_name!r} does not hold a private key pitstop can read "
            "(ed25519, ECDSA or RSA, in OpenSSH or PEM format)"
        ) from None
    key_class: type[paramiko.PKey]
    if isinstance(loaded, ed25519.Ed25519PrivateKey):
        key_class = paramiko.Ed25519Key
    elif isinstance(loaded, ec.EllipticCurvePrivateKey):
        key_class = paramiko.ECDSAKey
    elif isinstance(loaded, rsa.RSAPrivateKey):
        key_class = paramiko.RSAKey
    else:
        raise precondition(
            f"secret {secret_name!r} holds a {type(loaded).__name__} key; use ed25519, ECDSA or RSA"
        )
    return key_class.from_private_key(io.StringIO(data.decode()))
