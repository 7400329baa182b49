"""The type of every task keyword's value, checked when the runbook is loaded.

Ansible finds `retries: "three"`, `loop: 3` or `when: 5` only when the task runs, on the first
host that reaches it; pitstop refuses them in `pitstop validate` (and before a run starts),
at the value's file:line:col, saying what the keyword takes and what it got:

    rb.yaml:6:14: 'retries' must be a whole number (0 or more), got the string 'three'

One rule per class of keyword; `KEYWORD_RULES` names the rule of every keyword in
`TASK_KEYWORDS` (a test holds the two equal). `block`, `rescue`, `always`, `gate` and `vars`
are checked where they are parsed (they are task lists and mappings with rules of their own).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pitstop.runbook._yaml import Node
from pitstop.runbook.durations import parse_duration
from pitstop.runbook.templating import is_template

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The strings pydantic's bool accepts (and Ansible's `bool` filter): `ignore_errors: "yes"`.
_BOOL_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "1", "0", "t", "f", "y", "n"})

# A rule returns None when the value is fine, else (what the keyword takes, the offending
# item's index in a list or None for the value itself).
Problem = tuple[str, int | None]
Rule = Callable[[Any], Problem | None]


def describe(value: Any) -> str:
    """What a person wrote, in words: `the string 'three'`, `the number 5`, `a mapping`."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"the string {shown!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _boolean(value: Any) -> Problem | None:
    if isinstance(value, bool) or (isinstance(value, str) and value.strip().lower() in _BOOL_WORDS):
        return None
    return "true or false", None


def _count(value: Any) -> Problem | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return None
    return "a whole number (0 or more)", None


def _duration(value: Any) -> Problem | None:
    expected = "a duration of 0 or more: a number of seconds or e.g. '90s', '30m', '1h30m'"
    try:
        parse_duration(value)
    except ValueError:
        return expected, None
    return None


def _expressions(value: Any) -> Problem | None:
    # `when: true` and `changed_when: false` are YAML booleans Ansible accepts as conditions.
    expected = 'an expression (a string such as "x > 1", or true/false) or a list of them'
    items = value if isinstance(value, list) else [value]
    for index, item in enumerate(items):
        if not isinstance(item, str | bool):
            return expected, index if isinstance(value, list) else None
    return None


def _expression(value: Any) -> Problem | None:
    return None if isinstance(value, str) else ('an expression (a string such as "x > 1")', None)


def _names(value: Any) -> Problem | None:
    expected = "a name or a list of names"
    if isinstance(value, str):
        return None
    if not isinstance(value, list):
        return expected, None
    for index, item in enumerate(value):
        if not isinstance(item, str):
            return expected, index
    return None


def _text(value: Any) -> Problem | None:
    return None if isinstance(value, str) else ("a string", None)


def _identifier(value: Any) -> Problem | None:
    if isinstance(value, str) and _IDENTIFIER.match(value):
        return None
    return "a variable name (letters, digits and _, not starting with a digit)", None


def _loop(value: Any) -> Problem | None:
    if isinstance(value, list) or is_template(value):
        return None
    return "a list, or a template that renders one (e.g. \"{{ groups['gpu'] }}\")", None


def _mapping(value: Any) -> Problem | None:
    return None if isinstance(value, dict) else ("a mapping", None)


def _task_list(value: Any) -> Problem | None:
    return None if isinstance(value, list) else ("a list of tasks", None)


def _path(value: Any) -> Problem | None:
    return None if isinstance(value, str) and value else ("the path of a task file", None)


KEYWORD_RULES: dict[str, Rule] = {
    "name": _text,
    "when": _expressions,
    "failed_when": _expressions,
    "changed_when": _expressions,
    "until": _expression,
    "register": _identifier,
    "loop": _loop,
    "loop_control": _mapping,
    "retries": _count,
    "delay": _duration,
    "timeout": _duration,
    "ignore_errors": _boolean,
    "run_once": _boolean,
    "delegate_facts": _boolean,
    "check_mode": _boolean,
    "notify": _names,
    "tags": _names,
    "delegate_to": _text,
    "vars": _mapping,
    "block": _task_list,
    "rescue": _task_list,
    "always": _task_list,
    "gate": _mapping,
    "import_tasks": _path,
}


def check_keyword_types(node: Node, raw: Mapping[str, Any]) -> None:
    """Raise a RunbookError at the first task keyword whose value has the wrong type."""
    for key, value in raw.items():
        rule = KEYWORD_RULES.get(key)
        problem = rule(value) if rule is not None else None
        if problem is not None:
            _raise(node.child(key), key, value, problem)
    control = raw.get("loop_control")
    if isinstance(control, dict) and "loop_var" in control:
        problem = _identifier(control["loop_var"])
        if problem is not None:
            _raise(
                node.child("loop_control", "loop_var"), "loop_control.loop_var", control["loop_var"], problem
            )


def _raise(node: Node, key: str, value: Any, problem: Problem) -> None:
    expected, index = problem
    if index is None:
        raise node.error(f"'{key}' must be {expected}, got {describe(value)}", key=key)
    raise node.child(index).error(
        f"'{key}' must be {expected}, got {describe(value[index])} in the list", key=key
    )
