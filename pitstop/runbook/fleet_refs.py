"""Which fleet-wide variables a task list can read, found by reading its expressions.

`hostvars`, `groups`, `stage` (hosts, done/failed hosts, results) and `run` (every stage's
hosts, every gate's votes) grow with the fleet. A host workflow's input carries only what its
tasks can name (a 10,000-node run would otherwise copy every host's variables into every
child: 615 KB each at 1,000 nodes, past gRPC's 4 MB once a workflow task starts a few
children). This module finds, for each of those variables, the keys the expressions name
literally (`hostvars['localhost']`, `groups.gpu_canary`, `stage.name`), or that they are read
with a computed key (`hostvars[item]`, `groups[g]`, `groups.get(g)`, `vars['groups']`, a bare
`groups`), in which case the whole variable is sent.

Only what the engine renders is read: template strings (`{{ }}`/`{% %}`) anywhere in a task,
its keys included (`set_fact: {"{{ name }}": ...}`), and the bare expressions of `when`,
`until`, `failed_when`, `changed_when`, `assert: that` and `debug: var`. Variable *values*
(inventory, play, stage and extra vars, facts) are never rendered a second time, so they read
nothing — and are not parsed, so a node label cannot make an input large or a run slow. It errs
on the side of sending: a name bound inside a template (`{% for run in ... %}`) still counts as
the fleet variable, `hostvars[inventory_hostname]` is the host itself only where nothing
rebinds `inventory_hostname`, and a string that does not parse names nothing (the engine cannot
evaluate it either). Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import nodes

from pitstop.runbook._sandbox import make_environment
from pitstop.runbook.models import Task

FLEET_VARIABLES = ("hostvars", "groups", "stage", "run")
# Key of `hostvars` that is always the host itself (`hostvars[inventory_hostname]`).
SELF_KEY = "inventory_hostname"
# A variable read with a computed key: the whole variable is needed.
ANY_KEY: frozenset[str] = frozenset({"*"})
# `groups.get(g)`, `hostvars.items()`: a dict's own methods read any key.
DICT_METHODS = frozenset(name for name in dir(dict) if not name.startswith("__"))
# Task fields the engine evaluates as bare expressions (braces optional).
BARE_FIELDS = ("when", "until", "failed_when", "changed_when")


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
        return None if keys is None or "*" in keys else keys

    def union(self, other: FleetRefs) -> FleetRefs:
        merged = dict(self.named)
        for variable, keys in other.named.items():
            merged[variable] = merged.get(variable, frozenset()) | keys
        return FleetRefs(merged)


def task_refs(tasks: Sequence[Task], rebinds_self: bool = False) -> FleetRefs:
    """What `tasks` (and every task nested in their blocks) read of the fleet variables.
    `rebinds_self`: some variable layer sets `inventory_hostname` (then
    `hostvars[inventory_hostname]` may be any host)."""
    found: dict[str, frozenset[str]] = {}
    for task in (t for top in tasks for t in top.walk()):
        dumped = task.model_dump(mode="json", exclude={"source", "block", "rescue", "always"})
        for text in _template_strings(dumped):
            _merge(found, _refs_of(text, bare=False))
        for text in _bare_expressions(task):
            _merge(found, _refs_of(text, bare=True))
        if task.loop_var == SELF_KEY or SELF_KEY in task.vars:
            rebinds_self = True
    if rebinds_self and SELF_KEY in found.get("hostvars", frozenset()):
        found["hostvars"] = ANY_KEY
    return FleetRefs(found)


def expression_refs(expressions: Iterable[str]) -> FleetRefs:
    """What bare expressions (as in `when:`; braces optional) read of the fleet variables."""
    found: dict[str, frozenset[str]] = {}
    for text in expressions:
        _merge(found, _refs_of(text, bare=True))
    return FleetRefs(found)


def _merge(found: dict[str, frozenset[str]], refs: Mapping[str, frozenset[str]]) -> None:
    for variable, keys in refs.items():
        found[variable] = found.get(variable, frozenset()) | keys


def _bare_expressions(task: Task) -> Iterator[str]:
    for name in BARE_FIELDS:
        value = getattr(task, name)
        if isinstance(value, str):
            yield value
        elif value:
            yield from (str(v) for v in value)
    if task.module == "assert":
        that = task.args.get("that")
        yield from [that] if isinstance(that, str) else [str(v) for v in that or []]
    if task.module == "debug" and isinstance(task.args.get("var"), str):
        # `var` is rendered, then evaluated: a templated name may name anything.
        var = str(task.args["var"])
        yield "vars" if "{{" in var or "{%" in var else var


def _template_strings(value: Any) -> Iterator[str]:
    """Every string (mapping keys included) that the engine would render as a template."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "{{" in item or "{%" in item:
                yield item
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return make_environment()


@lru_cache(maxsize=8192)
def _refs_of(text: str, bare: bool) -> dict[str, frozenset[str]]:
    source = text if not bare or "{{" in text or "{%" in text else "{{ " + text + " }}"
    try:
        tree = _environment().parse(source)
    except (jinja2.TemplateSyntaxError, RecursionError):
        return {}  # not an expression: the engine could not evaluate it either
    found: dict[str, frozenset[str]] = {}
    _walk(tree, found)
    if SELF_KEY in found.get("hostvars", frozenset()) and _binds(tree, SELF_KEY):
        found["hostvars"] = ANY_KEY
    return found


def _add(found: dict[str, frozenset[str]], variable: str, key: str | None) -> None:
    found[variable] = found.get(variable, frozenset()) | (ANY_KEY if key is None else frozenset({key}))


def _literal_key(node: nodes.Getattr | nodes.Getitem) -> str | None:
    """The key of `x.key` / `x['key']` / `hostvars[inventory_hostname]`, or None if computed
    (or a dict method: `x.get(...)`, `x.items()`)."""
    if isinstance(node, nodes.Getattr):
        return None if node.attr in DICT_METHODS else str(node.attr)
    arg = node.arg
    if isinstance(arg, nodes.Const) and isinstance(arg.value, str | int):
        return str(arg.value)
    if isinstance(arg, nodes.Name) and arg.name == SELF_KEY:
        return SELF_KEY
    return None


def _walk(tree: nodes.Node, found: dict[str, frozenset[str]]) -> None:
    # Iterative: an expression may chain thousands of links (`a.b.c...`, `x[0][0]...`).
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, nodes.Getattr | nodes.Getitem) and isinstance(node.node, nodes.Name):
            name = node.node.name
            if name in FLEET_VARIABLES or name == "vars":
                _access(node, name, found)
                if isinstance(node, nodes.Getitem):
                    stack.append(node.arg)
                continue
        if isinstance(node, nodes.Name):
            if node.name in FLEET_VARIABLES:
                _add(found, node.name, None)
            elif node.name == "vars":
                for variable in FLEET_VARIABLES:
                    _add(found, variable, None)
            continue
        stack.extend(node.iter_child_nodes())


def _access(node: nodes.Getattr | nodes.Getitem, name: str, found: dict[str, frozenset[str]]) -> None:
    key = _literal_key(node)
    if name != "vars":
        _add(found, name, key)
    elif key in FLEET_VARIABLES:
        _add(found, key, None)  # `vars['groups']` is `groups`, all of it
    elif key is None:
        for variable in FLEET_VARIABLES:  # `vars[x]`, `vars.get(x)` may be any of them
            _add(found, variable, None)


def _binds(tree: nodes.Node, name: str) -> bool:
    """Whether the template assigns `name` (a for loop, `{% set %}`, a macro argument)."""
    try:
        return any(n.name == name and n.ctx in ("store", "param") for n in tree.find_all(nodes.Name))
    except RecursionError:
        return True  # too deep to tell: assume it does
