"""Which fleet-wide variables a task list can read, found by reading its expressions.

`hostvars`, `groups`, `stage` (hosts, done/failed hosts, results) and `run` (every stage's
hosts, every gate's votes) grow with the fleet. A host workflow's input carries only what its
tasks can name (a 10,000-node run would otherwise copy every host's variables into every
child: 615 KB each at 1,000 nodes, past gRPC's 4 MB once a workflow task starts a few
children). This module finds, for each of those variables, the keys the expressions name
literally (`hostvars['localhost']`, `groups.gpu_canary`, `stage.name`), or that they are read
with a computed key (`hostvars[item]`, `groups[g]`, `vars['groups']`, a bare `groups`), in
which case the whole variable is sent.

It errs on the side of sending: every string of a task is read both as a template (its
`{{ }}`/`{% %}` parts) and as a bare expression (`when`, `assert: that`, `debug: var`), and a
string that does not parse names nothing (the engine cannot evaluate it either). Names bound
inside a template (`{% for run in ... %}`) still count as the fleet variable: sending more
is safe, sending less is not. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import nodes

from pitstop.runbook._sandbox import make_environment

FLEET_VARIABLES = ("hostvars", "groups", "stage", "run")
# Key of `hostvars` that is always the host itself (`hostvars[inventory_hostname]`).
SELF_KEY = "inventory_hostname"
# A variable read with a computed key: the whole variable is needed.
ANY_KEY: frozenset[str] = frozenset({"*"})


@dataclass(frozen=True)
class FleetRefs:
    """For each fleet variable a task list reads: the keys it names, or `ANY_KEY`."""

    named: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def reads(self, variable: str) -> bool:
        return variable in self.named

    def keys(self, variable: str) -> frozenset[str] | None:
        """The keys named literally, or None when any key may be read (or none is read: see
        `reads`)."""
        keys = self.named.get(variable)
        return None if keys is None or keys is ANY_KEY or "*" in keys else keys

    def union(self, other: FleetRefs) -> FleetRefs:
        merged = dict(self.named)
        for variable, keys in other.named.items():
            merged[variable] = merged.get(variable, frozenset()) | keys
        return FleetRefs(merged)


def fleet_refs(values: Iterable[Any]) -> FleetRefs:
    """What the strings anywhere in `values` (task dumps, vars) read of the fleet variables."""
    found: dict[str, frozenset[str]] = {}
    for text in _strings(values):
        for variable, keys in _refs_of(text).items():
            found[variable] = found.get(variable, frozenset()) | keys
    return FleetRefs(found)


def _strings(values: Iterable[Any]) -> Iterator[str]:
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            stack.extend(value.values())  # keys are names (`vars`, `when`), never expressions
        elif isinstance(value, list | tuple | set | frozenset):
            stack.extend(value)


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return make_environment()


@lru_cache(maxsize=8192)
def _refs_of(text: str) -> dict[str, frozenset[str]]:
    found: dict[str, frozenset[str]] = {}
    sources = [text]
    if "{{" not in text and "{%" not in text:
        sources.append("{{ " + text + " }}")  # a bare expression (`when`, `assert: that`)
    for source in sources:
        try:
            tree = _environment().parse(source)
        except (jinja2.TemplateSyntaxError, RecursionError):
            continue  # not an expression: the engine could not evaluate it either
        _walk(tree, found)
    return found


def _add(found: dict[str, frozenset[str]], variable: str, key: str | None) -> None:
    found[variable] = found.get(variable, frozenset()) | (ANY_KEY if key is None else frozenset({key}))


def _literal_key(node: nodes.Node) -> str | None:
    """The key of `x.key` / `x['key']` / `hostvars[inventory_hostname]`, or None if computed."""
    if isinstance(node, nodes.Getattr):
        return str(node.attr)
    if isinstance(node, nodes.Getitem):
        arg = node.arg
        if isinstance(arg, nodes.Const) and isinstance(arg.value, str | int):
            return str(arg.value)
        if isinstance(arg, nodes.Name) and arg.name == SELF_KEY:
            return SELF_KEY
    return None


def _walk(node: nodes.Node, found: dict[str, frozenset[str]]) -> None:
    if isinstance(node, nodes.Getattr | nodes.Getitem) and isinstance(node.node, nodes.Name):
        name = node.node.name
        key = _literal_key(node)
        if name in FLEET_VARIABLES:
            _add(found, name, key)
            if isinstance(node, nodes.Getitem) and key is None:
                _walk(node.arg, found)
            return
        if name == "vars":
            # `vars['groups']` is `groups`; `vars[x]` may be any of them.
            if key in FLEET_VARIABLES:
                _add(found, key, None)
            elif key is None:
                for variable in FLEET_VARIABLES:
                    _add(found, variable, None)
                if isinstance(node, nodes.Getitem):
                    _walk(node.arg, found)
            return
    if isinstance(node, nodes.Name):
        if node.name in FLEET_VARIABLES:
            _add(found, node.name, None)
        elif node.name == "vars":
            for variable in FLEET_VARIABLES:
                _add(found, variable, None)
        return
    for child in node.iter_child_nodes():
        _walk(child, found)
