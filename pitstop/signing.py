"""HMAC-SHA256 over canonical JSON, with a purpose in front so that a signature made for one
kind of thing (a message between workflows, a run's state, a vote) is never valid for another.

`canonical` and `digest` are pure and deterministic, so workflow code uses them too (through
`imports_passed_through`) to reduce a large value to the digest a local activity signs.
`sign` and `valid` take a KeyRing and so run only in worker, bridge and CLI processes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Literal

from pydantic import BaseModel

from pitstop.keys import KeyRing

Purpose = Literal["message", "host-input", "state", "vote", "requester", "child-run"]


def canonical(value: Any) -> bytes:
    """One byte string per JSON value: sorted keys, no spaces, UTF-8."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def digest(value: Any) -> str:
    """SHA-256 of the canonical form, hex."""
    return hashlib.sha256(canonical(value)).hexdigest()


def model_digest(model: BaseModel) -> str:
    """SHA-256 of a pydantic model's own JSON, hex: for large models, where `digest` (canonical
    Python JSON) costs seconds. Equal for equal models of one class, and stable across a JSON
    round trip of the model."""
    return hashlib.sha256(model.model_dump_json().encode()).hexdigest()


def _mac(key: bytes, purpose: Purpose, value: Any) -> str:
    return hmac.new(key, f"pitstop/{purpose}/v1\x00".encode() + canonical(value), hashlib.sha256).hexdigest()


def sign(ring: KeyRing, purpose: Purpose, value: Any) -> str:
    return _mac(ring.signing, purpose, value)


def valid(ring: KeyRing, purpose: Purpose, value: Any, signature: str) -> bool:
    """Whether `signature` was made over `value` for `purpose` with any key of the ring."""
    if not signature:
        return False
    return any(hmac.compare_digest(_mac(key, purpose, value), signature) for key in ring.keys)


__all__ = ["Purpose", "canonical", "digest", "sign", "valid"]
