"""Jinja2 expressions for runbooks, in an immutable sandbox.

This code also runs inside Temporal workflows, so it must be deterministic: no clock, no
randomness, no environment, no loaders, no I/O. The sandbox refuses Python internals and
mutation of values, so a runbook cannot reach outside the variables it is given.
"""

from __future__ import annotations

import json
import operator
import posixpath
import re
import types
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup


class TemplateError(ValueError):
    """An expression could not be compiled or evaluated; the message says why in plain words."""


_SANDBOX_MESSAGE = "not allowed in the expression sandbox"
_TRUE_STRINGS = frozenset({"yes", "on", "1", "true", "y", "t"})
_FALSE_STRINGS = frozenset({"no", "off", "0", "false", "n", "f", ""})


def is_template(value: Any) -> bool:
    """True for strings that Jinja would render (`{{ }}`, `{% %}`); literals stay literal."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


# ---------------------------------------------------------------- filters


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE_STRINGS:
            return True
        if text in _FALSE_STRINGS:
            return False
        raise TemplateError(f"cannot convert {value!r} to a boolean")
    if isinstance(value, int | float):
        return value == 1
    return bool(value)


def _to_int(value: Any, default: int = 0, base: int = 10) -> int:
    try:
        if isinstance(value, str):
            text = value.strip()
            try:
                return int(text, base)
            except ValueError:
                return int(float(text))
        return int(value)
    except (TypeError, ValueError):
        return default


def _to_float(value: Any, default: float = 0.0) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _regex_search(value: Any, pattern: str, *groups: str, ignorecase: bool = False) -> Any:
    flags = re.IGNORECASE if ignorecase else 0
    match = re.search(pattern, str(value), flags)
    if match is None:
        return None
    if not groups:
        return match.group(0)
    out: list[Any] = []
    for group in groups:
        # Ansible spells group references as '\\1' or '\\g<name>'.
        if group.startswith("\\g<"):
            out.append(match.group(group[3:-1]))
        elif group.startswith("\\"):
            out.append(match.group(int(group[1:])))
        else:
            out.append(match.group(group))
    return out


def _regex_replace(value: Any, pattern: str = "", replacement: str = "", ignorecase: bool = False) -> str:
    flags = re.IGNORECASE if ignorecase else 0
    return re.sub(pattern, replacement, str(value), flags=flags)


def _regex_findall(value: Any, pattern: str, ignorecase: bool = False) -> list[Any]:
    flags = re.IGNORECASE if ignorecase else 0
    return re.findall(pattern, str(value), flags)


def _to_json(value: Any, indent: int | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, indent=indent, sort_keys=sort_keys, default=str)


def _from_json(value: Any) -> Any:
    try:
        return json.loads(value)
    except (TypeError, ValueError) as exc:
        raise TemplateError(f"from_json: not valid JSON: {exc}") from None


def _combine(*dicts: Any, recursive: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for item in dicts:
        for mapping in item if isinstance(item, list) else [item]:
            if not isinstance(mapping, Mapping):
                raise TemplateError(f"combine expects mappings, got {type(mapping).__name__}")
            result = _merge(result, mapping, recursive)
    return result


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any], recursive: bool) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if recursive and isinstance(out.get(key), Mapping) and isinstance(value, Mapping):
            out[key] = _merge(out[key], value, True)
        else:
            out[key] = value
    return out


def _dict2items(value: Mapping[str, Any], key_name: str = "key", value_name: str = "value") -> list[Any]:
    if not isinstance(value, Mapping):
        raise TemplateError(f"dict2items expects a mapping, got {type(value).__name__}")
    return [{key_name: k, value_name: v} for k, v in value.items()]


def _items2dict(value: Iterable[Any], key_name: str = "key", value_name: str = "value") -> dict[Any, Any]:
    return {item[key_name]: item[value_name] for item in value}


def _mandatory(value: Any, msg: str | None = None) -> Any:
    if isinstance(value, jinja2.Undefined):
        raise TemplateError(msg or f"mandatory variable {value._undefined_name!r} is not defined")
    return value


def _ternary(value: Any, true_val: Any, false_val: Any, none_val: Any = None) -> Any:
    if value is None and none_val is not None:
        return none_val
    return true_val if value else false_val


def _unique(value: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for item in value:
        if item not in out:
            out.append(item)
    return out


def _flatten(value: Iterable[Any], levels: int | None = None) -> list[Any]:
    out: list[Any] = []
    for item in value:
        if isinstance(item, list | tuple) and (levels is None or levels > 0):
            out.extend(_flatten(item, None if levels is None else levels - 1))
        elif item is not None:
            out.append(item)
    return out


# ---------------------------------------------------------------- tests


_VERSION_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "lt": operator.lt,
    "<=": operator.le,
    "le": operator.le,
    ">": operator.gt,
    "gt": operator.gt,
    ">=": operator.ge,
    "ge": operator.ge,
    "==": operator.eq,
    "=": operator.eq,
    "eq": operator.eq,
    "!=": operator.ne,
    "<>": operator.ne,
    "ne": operator.ne,
}


def _version_key(version: Any) -> tuple[tuple[int, int, str], ...]:
    # Loose versions: split into dotted/dashed segments, then runs of digits and letters,
    # so '1.31.2', 'v1.31', '535.104.05' and '96.00.9F.00.04' all compare segment-wise;
    # numbers compare as numbers, anything else as text, and numbers sort before text.
    text = str(version).strip()
    if text[:1] in ("v", "V") and text[1:2].isdigit():
        text = text[1:]
    parts: list[tuple[int, int, str]] = []
    for segment in re.split(r"[.\-_+]", text):
        if segment.isdigit():
            parts.append((0, int(segment), ""))
        elif segment:
            parts.append((1, 0, segment.lower()))
    # Trailing zero segments do not change a version: 1.31 == 1.31.0.
    while parts and parts[-1] == (0, 0, ""):
        parts.pop()
    return tuple(parts)


def version_compare(value: Any, other: Any, op: str = "==") -> bool:
    """Compare two loose version strings, as Ansible's `version` test does."""
    if op not in _VERSION_OPS:
        raise TemplateError(f"version: unknown operator {op!r}; use one of {', '.join(_VERSION_OPS)}")
    return _VERSION_OPS[op](_version_key(value), _version_key(other))


def _test_match(value: Any, pattern: str, ignorecase: bool = False) -> bool:
    return re.match(pattern, str(value), re.IGNORECASE if ignorecase else 0) is not None


def _test_search(value: Any, pattern: str, ignorecase: bool = False) -> bool:
    return re.search(pattern, str(value), re.IGNORECASE if ignorecase else 0) is not None


def _result_flag(value: Any, flag: str) -> bool:
    if not isinstance(value, Mapping):
        raise TemplateError(f"the '{flag}' test expects a registered result, got {type(value).__name__}")
    return bool(value.get(flag, False))


def _test_truthy(value: Any) -> bool:
    try:
        return _to_bool(value)
    except TemplateError:
        return bool(value)


# ---------------------------------------------------------------- environment


class _Sandbox(ImmutableSandboxedEnvironment):
    """Immutable sandbox that also refuses every underscore attribute, not only dunders."""

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if attr.startswith("_"):
            return False
        return bool(super().is_safe_attribute(obj, attr, value))


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = _Sandbox(undefined=jinja2.StrictUndefined, autoescape=False, loader=None, extensions=())
    # Anything that could produce randomness goes; the other globals are deterministic.
    env.globals.pop("lipsum", None)
    env.filters.pop("random", None)
    env.filters.update(
        {
            "bool": _to_bool,
            "int": _to_int,
            "float": _to_float,
            "string": lambda v: "" if v is None else str(v),
            "regex_search": _regex_search,
            "regex_replace": _regex_replace,
            "regex_findall": _regex_findall,
            "to_json": _to_json,
            "from_json": _from_json,
            "combine": _combine,
            "dict2items": _dict2items,
            "items2dict": _items2dict,
            "version": version_compare,
            "version_compare": version_compare,
            "basename": lambda v: posixpath.basename(str(v)),
            "dirname": lambda v: posixpath.dirname(str(v)),
            "mandatory": _mandatory,
            "ternary": _ternary,
            "unique": _unique,
            "flatten": _flatten,
        }
    )
    env.tests.update(
        {
            "version": version_compare,
            "version_compare": version_compare,
            "match": _test_match,
            "search": _test_search,
            "regex": _test_search,
            "failed": lambda v: _result_flag(v, "failed"),
            "succeeded": lambda v: not _result_flag(v, "failed"),
            "success": lambda v: not _result_flag(v, "failed"),
            "changed": lambda v: _result_flag(v, "changed"),
            "skipped": lambda v: _result_flag(v, "skipped"),
            "truthy": _test_truthy,
            "falsy": lambda v: not _test_truthy(v),
        }
    )
    return env


def _describe(exc: Exception) -> TemplateError:
    if isinstance(exc, TemplateError):
        return exc
    if isinstance(exc, SecurityError):
        text = re.sub(r"\s*is unsafe\.?$", "", str(exc))
        return TemplateError(f"{text} is {_SANDBOX_MESSAGE}")
    if isinstance(exc, jinja2.UndefinedError):
        text = str(exc)
        match = re.match(r"'([^']+)' is undefined", text)
        if match:
            return TemplateError(f"undefined variable '{match.group(1)}'")
        if "has no attribute" in text:
            attr = re.search(r"has no attribute '([^']+)'", text)
            if attr and attr.group(1).startswith("_"):
                return TemplateError(f"access to '{attr.group(1)}' is {_SANDBOX_MESSAGE}")
        return TemplateError(f"undefined value: {text}")
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return TemplateError(f"template syntax error: {exc.message}")
    return TemplateError(f"{type(exc).__name__}: {exc}")


@lru_cache(maxsize=4096)
def _compile_template(source: str) -> jinja2.Template:
    return _environment().from_string(source)


@lru_cache(maxsize=4096)
def _compile_expression(source: str) -> Callable[..., Any]:
    return _environment().compile_expression(source, undefined_to_none=False)


def _single_expression(source: str) -> str | None:
    """The inner expression when `source` is exactly one `{{ expr }}`, else None."""
    text = source.strip()
    if not (text.startswith("{{") and text.endswith("}}")):
        return None
    try:
        body = _environment().parse(text).body
    except jinja2.TemplateSyntaxError:
        return None
    if (
        len(body) == 1
        and isinstance(body[0], nodes.Output)
        and len(body[0].nodes) == 1
        and not isinstance(body[0].nodes[0], nodes.TemplateData)
    ):
        return text[2:-2]
    return None


def check_syntax(source: str) -> None:
    """Raise TemplateError when `source` (a template, e.g. 'a {{ b }}') does not compile."""
    try:
        _compile_template(source)
    except Exception as exc:
        raise _describe(exc) from None


def check_expression(source: str) -> None:
    """Raise TemplateError when a bare expression (as in `when:`) does not compile."""
    inner = _single_expression(source)
    try:
        if inner is not None:
            _compile_expression(inner)
        elif is_template(source):
            _compile_template(source)
        else:
            _compile_expression(source)
    except Exception as exc:
        raise _describe(exc) from None


def _render_string(source: str, variables: Mapping[str, Any]) -> Any:
    if not is_template(source):
        return source
    inner = _single_expression(source)
    try:
        if inner is not None:
            # Ansible keeps native types for a lone expression: "{{ 3 }}" is 3, not "3".
            return _unwrap(_compile_expression(inner)(**variables))
        return _compile_template(source).render(**variables)
    except Exception as exc:
        raise _describe(exc) from None


def _unwrap(value: Any) -> Any:
    """A rendered value as plain data. An undefined value anywhere inside it (e.g. `map(attribute=
    'x')` over items without `x`) is an error here, naming what is missing, rather than an
    object that no module argument and no workflow history can carry; a lazy sequence (a bare
    `map(...)`) becomes a list, as Ansible makes it."""
    if isinstance(value, jinja2.Undefined):
        # Raises UndefinedError with the name of the missing variable.
        str(value)
    if isinstance(value, Markup):
        return str(value)
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_unwrap(v) for v in value]
    if isinstance(value, types.GeneratorType):
        return [_unwrap(v) for v in value]
    return value


def render(value: Any, variables: Mapping[str, Any]) -> Any:
    """Render every template string inside `value` (dicts and lists recursively)."""
    if isinstance(value, str):
        return _render_string(value, variables)
    if isinstance(value, Mapping):
        # Keys are templates too, as in Ansible (`set_fact: {"{{ name }}": ...}`).
        return {
            (str(_render_string(k, variables)) if isinstance(k, str) else k): render(v, variables)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [render(v, variables) for v in value]
    return value


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """Value of a bare expression (as in `when:`); `{{ expr }}` is accepted too."""
    if not isinstance(expression, str):
        return expression
    inner = _single_expression(expression)
    if inner is None and is_template(expression):
        return _render_string(expression, variables)
    try:
        return _unwrap(_compile_expression(inner if inner is not None else expression)(**variables))
    except Exception as exc:
        raise _describe(exc) from None


def evaluate_bool(expression: str | bool, variables: Mapping[str, Any]) -> bool:
    """Truth of a condition; strings such as 'yes'/'false' follow Ansible's meaning."""
    if isinstance(expression, bool):
        return expression
    value = evaluate(expression, variables)
    if isinstance(value, str):
        return _test_truthy(value)
    return bool(value)
