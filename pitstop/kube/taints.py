"""Node taint lists: add, replace or remove one taint, reporting whether anything changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pitstop.kube.objects import Obj


def describe(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def with_taint(taints: list[Obj], key: str, value: str | None, effect: str) -> tuple[list[Obj], bool]:
    """The list with `key:effect` holding `value` (replaced if present with another value)."""
    wanted: Obj = {"key": key, "effect": effect}
    if value:
        wanted["value"] = value
    out: list[Obj] = []
    changed = True
    for taint in taints:
        if taint.get("key") == key and taint.get("effect") == effect:
            if (taint.get("value") or None) == (value or None):
                changed = False
                out.append(taint)
            continue
        out.append(taint)
    if changed:
        out.append(wanted)
    return out, changed


def without_taint(taints: list[Obj], key: str, effect: str | None = None) -> tuple[list[Obj], list[Obj]]:
    """The list without `key` (of `effect`, or of any effect), and the taints removed."""
    kept: list[Obj] = []
    removed: list[Obj] = []
    for taint in taints:
        if taint.get("key") == key and (effect is None or taint.get("effect") == effect):
            removed.append(taint)
        else:
            kept.append(taint)
    return kept, removed
