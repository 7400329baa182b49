"""Label selectors: the runbook's string form (`app=web,tier in (a,b)`) and the API's
`LabelSelector` objects (matchLabels + matchExpressions), one matching rule for both."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pitstop.runbook._selectors import Requirement, parse_selector

_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


def check_selector(text: str | None) -> str | None:
    """The selector unchanged if it parses; ValueError naming the bad term otherwise."""
    if text:
        parse_selector(text)
    return text


def matches(text: str | None, labels: Mapping[str, str]) -> bool:
    """A selector string; empty or None matches everything."""
    if not text:
        return True
    return all(r.matches(labels) for r in parse_selector(text))


def object_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A `LabelSelector` object: None matches nothing, `{}` everything (policy/v1 PDB rules)."""
    if selector is None:
        return False
    requirements = [
        Requirement(k, "in", frozenset({str(v)})) for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for expr in selector.get("matchExpressions") or []:
        op = _OPERATORS.get(str(expr.get("operator", "")))
        if op is None:
            return False  # the apiserver refuses such a selector; it selects nothing here
        values = frozenset(str(v) for v in expr.get("values") or ())
        requirements.append(Requirement(str(expr.get("key", "")), op, values))
    return all(r.matches(labels) for r in requirements)
