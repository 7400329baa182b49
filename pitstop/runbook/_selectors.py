"""Kubernetes label selectors (`k=v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_SET_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*$")


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
    """Requirements of a selector (all must hold); raises ValueError on bad syntax."""
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
