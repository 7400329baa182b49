"""Which runs a run started itself: a promotion's children (activities/runs_children.py).

A child run's id is predictable (`<parent>.<host>[.<suffix>]`), so any Temporal client could
start a run under that id first, with other arguments (check mode, another requester) or at
another time (before the ring's gate). The child's memo therefore carries a marker signed with
the worker key — which only the workers hold — naming the parent run, the host, the suffix and
the digest of the very request it was started with. A run found under a child's id counts as
that child only when its marker verifies and says exactly that; otherwise it is refused, never
adopted. Host names that map to the same id (`prod/1`, `prod 1`) are refused the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from pitstop import signing
from pitstop.contracts import RunRequest, request_digest
from pitstop.keys import KeyRing

MEMO_KEY = "pitstop_child"


class ChildMarker(BaseModel):
    parent: str
    host: str
    suffix: str | None = None
    request: str
    signature: str = ""

    def signed_part(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"signature"})


def mark(ring: KeyRing, parent: str, host: str, suffix: str | None, request: RunRequest) -> ChildMarker:
    marker = ChildMarker(parent=parent, host=host, suffix=suffix, request=request_digest(request))
    return marker.model_copy(update={"signature": signing.sign(ring, "child-run", marker.signed_part())})


def verified(ring: KeyRing, memo: Mapping[str, Any]) -> ChildMarker | None:
    """The memo's marker when the worker key signed it; None for anything else."""
    try:
        marker = ChildMarker.model_validate(memo.get(MEMO_KEY))
    except ValidationError:
        return None
    if not marker.signature or not signing.valid(ring, "child-run", marker.signed_part(), marker.signature):
        return None
    return marker


__all__ = ["MEMO_KEY", "ChildMarker", "mark", "verified"]
