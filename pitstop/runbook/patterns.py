"""Ansible host patterns over an inventory: `a:b`, `a,b`, `a:&b`, `a:!b`, `!b`, `gpu-0*`, `~re`."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence

from pitstop.runbook.errors import suggest


class PatternError(ValueError):
    """A pattern names something that is neither a host nor a group."""

    def __init__(self, message: str, name: str, suggestion: str | None) -> None:
        super().__init__(message)
        self.name = name
        self.suggestion = suggestion


def split_pattern(pattern: str) -> list[str]:
    """Terms of a pattern; `:` and `,` both separate (a `~regex` term runs to a comma)."""
    terms: list[str] = []
    for chunk in pattern.split(","):
        chunk = chunk.strip()
        if not chunk:
            continue
        if chunk.startswith("~"):
            terms.append(chunk)
        else:
            terms.extend(t.strip() for t in chunk.split(":") if t.strip())
    return terms


def resolve_pattern(
    pattern: str,
    host_order: Sequence[str],
    groups: dict[str, list[str]],
    group_hosts: Callable[[str], list[str]],
) -> list[str]:
    """Hosts matched by `pattern`, in inventory order.

    As in Ansible, unions are applied first, then intersections (`&`), then exclusions (`!`),
    whatever order they are written in; a pattern of only `&`/`!` terms starts from `all`.
    """
    terms = split_pattern(pattern)
    if not terms:
        raise PatternError("empty host pattern", pattern, None)
    plain = [t for t in terms if t[0] not in "&!"]
    intersect = [t[1:] for t in terms if t[0] == "&"]
    exclude = [t[1:] for t in terms if t[0] == "!"]
    selected: set[str] = set()
    for term in plain or ["all"]:
        selected |= _match_term(term, host_order, groups, group_hosts)
    for term in intersect:
        selected &= _match_term(term, host_order, groups, group_hosts)
    for term in exclude:
        selected -= _match_term(term, host_order, groups, group_hosts)
    return [h for h in host_order if h in selected]


def _match_term(
    term: str,
    host_order: Sequence[str],
    groups: dict[str, list[str]],
    group_hosts: Callable[[str], list[str]],
) -> set[str]:
    if term in ("all", "*"):
        return set(host_order)
    if term in groups:
        return set(group_hosts(term))
    if term in host_order:
        return {term}
    names = [*groups, *host_order]
    if term.startswith("~"):
        try:
            regex = re.compile(term[1:])
        except re.error as exc:
            raise PatternError(
                f"invalid regular expression in host pattern '{term}': {exc}", term, None
            ) from None
        matched = [n for n in names if regex.match(n)]
    elif any(c in term for c in "*?["):
        matched = [n for n in names if fnmatch.fnmatchcase(n, term)]
    else:
        raise PatternError(f"unknown host or group '{term}' in host pattern", term, suggest(term, names))
    if not matched:
        raise PatternError(f"host pattern '{term}' matches no host or group", term, None)
    hosts: set[str] = set()
    for name in matched:
        hosts |= set(group_hosts(name)) if name in groups else {name}
    return hosts
