"""Label and field selectors, as the apiserver applies them to lists and watches.

Label selectors are `pitstop.kube.selectors` (one parser and one rule for the objects' form in
the code base: the apiserver's, which the runbook language's inventories use too); field
selectors are `path=value`, `path==value`, `path!=value`, comma-joined, limited to the field
labels each resource supports (the apiserver answers others with 400, so do we).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pitstop.kube.selectors import Requirement, parse_selector
from pitstop_sim.errors import ApiError, bad_request
from pitstop_sim.resources import ResourceType

Obj = dict[str, Any]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """A `labelSelector` query parameter; a syntax error is the apiserver's 400."""
    if not text:
        return []
    try:
        return parse_selector(text)
    except ValueError as exc:
        raise bad_request(f"unable to parse requirement: {exc}") from None


def selector_string(selector: Mapping[str, Any] | None) -> str:
    """`app=x,tier in (a,b)`: how the apiserver prints a LabelSelector (tables, status.selector)."""
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op = expr.get("operator")
        values = ",".join(expr.get("values") or ())
        if op == "In":
            parts.append(f"{expr['key']} in ({values})")
        elif op == "NotIn":
            parts.append(f"{expr['key']} notin ({values})")
        elif op == "Exists":
            parts.append(expr["key"])
        else:
            parts.append(f"!{expr['key']}")
    return ",".join(parts) or "<none>"


@dataclass(frozen=True)
class FieldTerm:
    path: str
    equal: bool
    value: str

    def matches(self, obj: Obj) -> bool:
        return (field_value(obj, self.path) == self.value) == self.equal


def field_value(obj: Obj, path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, dict):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    if isinstance(current, dict):
        # `source` on events is an object whose component is the selectable value.
        return str(current.get("component", ""))
    return str(current)


def parse_field_selector(text: str | None, rt: ResourceType) -> list[FieldTerm]:
    if not text:
        return []
    allowed = {"metadata.name", "metadata.namespace", *rt.fields}
    terms: list[FieldTerm] = []
    for raw in _split_unescaped(text):
        term = raw.strip()
        if not term:
            continue
        parsed = _split_term(term)
        if parsed is None:
            raise _field_error(rt, text, f"invalid selector: '{term}'; can't understand '{term}'")
        path, equal, value = parsed
        if path not in allowed:
            raise _field_error(rt, text, f"field label not supported: {path}")
        terms.append(FieldTerm(path, equal, value.replace("\\,", ",").replace("\\=", "=")))
    return terms


def _split_term(term: str) -> tuple[str, bool, str] | None:
    """`path!=value` -> (path, False, value); the first operator in the term wins."""
    found = [(term.find(op), op, equal) for op, equal in (("!=", False), ("==", True), ("=", True))]
    found = [f for f in found if f[0] > 0]
    if not found:
        return None
    index, op, equal = min(found, key=lambda f: (f[0], -len(f[1])))
    return term[:index].strip(), equal, term[index + len(op) :].strip()


def _split_unescaped(text: str) -> list[str]:
    parts: list[str] = []
    current = ""
    escaped = False
    for char in text:
        if char == "," and not escaped:
            parts.append(current)
            current = ""
            continue
        escaped = char == "\\" and not escaped
        current += char
    parts.append(current)
    return parts


def _field_error(rt: ResourceType, text: str, problem: str) -> ApiError:
    return bad_request(
        f'Unable to find "{rt.api_version}, Resource={rt.plural}" that match label selector "", '
        f'field selector "{text}": {problem}'
    )


def equality_terms(requirements: list[Requirement]) -> list[tuple[str, str]]:
    """`(key, value)` pairs a label index can answer directly (single-value `in`)."""
    return [(r.key, next(iter(r.values))) for r in requirements if r.op == "in" and len(r.values) == 1]
