"""Label selectors, one parser and one matching rule for every caller: the string form
(`app=web,tier in (a,b)`, `!canary`; the runbook language's inventories and the list/watch
`labelSelector` parameter) and the API's `LabelSelector` objects (matchLabels +
matchExpressions, on PDBs and controllers).

The object form follows k8s.io/apimachinery `metav1.LabelSelectorAsSelector` and
`labels.NewRequirement` (pkg/apis/meta/v1/helpers.go, pkg/labels/selector.go): a nil selector
selects nothing, an empty one everything; an unknown operator, an `In`/`NotIn` without values
or an `Exists`/`DoesNotExist` with values is an error. Where the apiserver meets such a
selector on a stored PDB (the eviction subresource) it treats it as selecting nothing
(pkg/registry/core/pod/storage/eviction.go: "This object has an invalid selector, it does not
match the pod"), which `object_selector_matches` does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_SET_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*$")

# LabelSelectorOperator -> the requirement's operator.
_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return self.key in labels and labels[self.key] in self.values
        return labels.get(self.key) not in self.values


# --- the string form -------------------------------------------------------------------------


def _split(selector: str) -> list[str]:
    # Commas separate requirements, except inside `in (a,b)` parentheses.
    parts: list[str] = []
    depth = 0
    current = ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def parse_selector(selector: str) -> list[Requirement]:
    """Requirements of a selector string (all must hold); raises ValueError on bad syntax."""
    requirements: list[Requirement] = []
    for part in _split(selector):
        if match := _SET_RE.match(part):
            values = frozenset(v.strip() for v in match.group(3).split(",") if v.strip())
            requirements.append(Requirement(match.group(1), match.group(2), values))
        elif match := _EQ_RE.match(part):
            op = "notin" if match.group(2) == "!=" else "in"
            requirements.append(Requirement(match.group(1), op, frozenset({match.group(3)})))
        elif match := _EXISTS_RE.match(part):
            requirements.append(Requirement(match.group(2), "!exists" if match.group(1) else "exists"))
        else:
            raise ValueError(f"invalid label selector term {part.strip()!r}")
    return requirements


def selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    return all(r.matches(labels) for r in parse_selector(selector))


def check_selector(text: str | None) -> str | None:
    """The selector unchanged if it parses; ValueError naming the bad term otherwise."""
    if text:
        parse_selector(text)
    return text


def matches(text: str | None, labels: Mapping[str, str]) -> bool:
    """A selector string; empty or None matches everything."""
    if not text:
        return True
    return selector_matches(text, labels)


# --- the object form -------------------------------------------------------------------------


def selector_requirements(selector: Mapping[str, Any] | None) -> list[Requirement] | None:
    """Requirements of a `LabelSelector` object; None for a nil selector (selects nothing),
    `[]` for an empty one (selects everything). ValueError where LabelSelectorAsSelector errs."""
    if selector is None:
        return None
    out = [Requirement(k, "in", frozenset({str(v)})) for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        operator = expr.get("operator", "")
        op = _OPERATORS.get(str(operator))
        if op is None:
            raise ValueError(f"{operator!r} is not a valid label selector operator")
        values = frozenset(str(v) for v in expr.get("values") or ())
        if op in ("in", "notin") and not values:
            raise ValueError("for 'in', 'notin' operators, values set can't be empty")
        if op in ("exists", "!exists") and values:
            raise ValueError("values set must be empty for exists and does not exist")
        out.append(Requirement(str(expr.get("key", "")), op, values))
    return out


def labels_match(requirements: list[Requirement] | None, labels: Mapping[str, str] | None) -> bool:
    """Requirements from `selector_requirements`: None matches nothing."""
    if requirements is None:
        return False
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


def object_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A `LabelSelector` object: None matches nothing, `{}` everything, an invalid one nothing
    (as the eviction subresource treats a PDB's)."""
    try:
        return labels_match(selector_requirements(selector), labels)
    except ValueError:
        return False
