"""The filters and tests of runbook expressions: Ansible's common ones, and jinja2's with their
size arguments capped. Regular expressions are in `_regex` (RE2). Every filter and test is
charged to the render's budget (`_limits`), and those whose cost grows with their input are
charged for it.
"""

from __future__ import annotations

import functools
import json
import operator
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jinja2
from jinja2 import filters as jinja_filters

from pitstop.runbook._limits import (
    MAX_FORMAT_WIDTH,
    MAX_LIST_LENGTH,
    STEPS_PER_CALL,
    TemplateError,
    check_length,
    check_printf,
    check_string_result,
    check_text_size,
    check_width,
    current,
    limit_error,
    plain_args,
    text_of,
)
from pitstop.runbook._regex import (
    regex_escape,
    regex_findall,
    regex_replace,
    regex_search,
    test_match,
    test_search,
)

_TRUE_STRINGS = frozenset({"yes", "on", "1", "true", "y", "t"})
_FALSE_STRINGS = frozenset({"no", "off", "0", "false", "n", "f", ""})


# ---------------------------------------------------------------- Ansible conversions


def to_bool(value: Any) -> bool:
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
    except (TypeError, ValueError, OverflowError):
        return default


def _to_float(value: Any, default: float = 0.0) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return default


def _to_string(value: Any) -> str:
    if value is None:
        return ""
    return text_of(value)


def quote(value: Any) -> str:
    """Ansible's `quote`: the value as one shell word (shlex.quote); None is ''."""
    if value is None:
        value = ""
    return shlex.quote(text_of(value))


# ---------------------------------------------------------------- Ansible data filters


def _to_json(value: Any, indent: int | None = None, sort_keys: bool = False) -> str:
    check_width(indent, "to_json indent")
    check_text_size(value, "the value")
    text = json.dumps(value, indent=indent, sort_keys=sort_keys, default=_json_default)
    return check_length(text)  # type: ignore[no-any-return]


def _json_default(value: Any) -> Any:
    if isinstance(value, jinja2.Undefined):
        str(value)  # raises, naming the missing variable
    if isinstance(value, range | type({}.keys()) | type({}.values())):
        return list(value)
    raise TemplateError(f"to_json: a Python {type(value).__name__} has no JSON form")


def _from_json(value: Any) -> Any:
    text = _to_string(value)
    current().charge(len(text))
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
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
    current().charge(len(base) + len(extra))
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
    return {item[key_name]: item[value_name] for item in _bounded(value, "items2dict")}


def _mandatory(value: Any, msg: str | None = None) -> Any:
    if isinstance(value, jinja2.Undefined):
        raise TemplateError(msg or f"mandatory variable {value._undefined_name!r} is not defined")
    return value


def _ternary(value: Any, true_val: Any, false_val: Any, none_val: Any = None) -> Any:
    if value is None and none_val is not None:
        return none_val
    return true_val if value else false_val


def _bounded(value: Iterable[Any], what: str) -> list[Any]:
    """The items of `value`, at most MAX_LIST_LENGTH of them, one step each."""
    if isinstance(value, str) and len(value) > MAX_LIST_LENGTH:
        raise limit_error(
            f"{what} over a string of {len(value)} characters", MAX_LIST_LENGTH, "MAX_LIST_LENGTH"
        )
    budget = current()
    out: list[Any] = []
    for item in value:
        out.append(item)
        if len(out) > MAX_LIST_LENGTH:
            raise limit_error(f"{what}'s items", MAX_LIST_LENGTH, "MAX_LIST_LENGTH")
    budget.step(len(out))
    return out


def _unique(value: Iterable[Any]) -> list[Any]:
    # Hashable items are tracked in a set (linear); the rest fall back to comparisons.
    out: list[Any] = []
    seen: set[Any] = set()
    unhashable: list[Any] = []
    for item in _bounded(value, "unique"):
        try:
            if item in seen:
                continue
            seen.add(item)
        except TypeError:
            current().charge(len(unhashable) + 1)
            if item in unhashable:
                continue
            unhashable.append(item)
        out.append(item)
    return out


def _flatten(value: Iterable[Any], levels: int | None = None) -> list[Any]:
    out: list[Any] = []
    _flatten_into(out, value, levels)
    return out


def _flatten_into(out: list[Any], value: Iterable[Any], levels: int | None) -> None:
    budget = current()
    for item in value:
        budget.step()
        if isinstance(item, list | tuple) and (levels is None or levels > 0):
            _flatten_into(out, item, None if levels is None else levels - 1)
        elif item is not None:
            out.append(item)
            if len(out) > MAX_LIST_LENGTH:
                raise limit_error("flatten's items", MAX_LIST_LENGTH, "MAX_LIST_LENGTH")


def _difference(value: Iterable[Any], other: Iterable[Any]) -> list[Any]:
    exclude = _unique(other)
    return [item for item in _unique(value) if item not in _as_lookup(exclude)]


def _intersect(value: Iterable[Any], other: Iterable[Any]) -> list[Any]:
    keep = _unique(other)
    return [item for item in _unique(value) if item in _as_lookup(keep)]


def _union(value: Iterable[Any], other: Iterable[Any]) -> list[Any]:
    return _unique([*_bounded(value, "union"), *_bounded(other, "union")])


def _as_lookup(items: list[Any]) -> Any:
    try:
        return frozenset(items)
    except TypeError:
        current().charge(len(items))
        return items


@jinja2.pass_environment
def _extract(env: jinja2.Environment, item: Any, container: Any, morekeys: Any = None) -> Any:
    value = env.getitem(container, item)
    if morekeys is not None:
        for key in morekeys if isinstance(morekeys, list) else [morekeys]:
            value = env.getitem(value, key)
    return value


# ---------------------------------------------------------------- Ansible tests


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
_VERSION_SPLIT = re.compile(r"[.\-_+]")


def _version_key(version: Any) -> tuple[tuple[int, int, str], ...]:
    # Loose versions: split into dotted/dashed segments, then runs of digits and letters,
    # so '1.31.2', 'v1.31', '535.104.05' and '96.00.9F.00.04' all compare segment-wise;
    # numbers compare as numbers, anything else as text, and numbers sort before text.
    text = str(version).strip()
    if text[:1] in ("v", "V") and text[1:2].isdigit():
        text = text[1:]
    parts: list[tuple[int, int, str]] = []
    for segment in _VERSION_SPLIT.split(text):
        if segment.isdigit():
            parts.append((0, int(segment[-1000:]), ""))
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


def _result_flag(value: Any, flag: str) -> bool:
    if not isinstance(value, Mapping):
        raise TemplateError(f"the '{flag}' test expects a registered result, got {type(value).__name__}")
    return bool(value.get(flag, False))


def test_truthy(value: Any) -> bool:
    try:
        return to_bool(value)
    except TemplateError:
        return bool(value)


# ---------------------------------------------------------------- jinja2's filters, capped


def _center(value: Any, width: int = 80) -> str:
    check_width(width, "center width")
    return jinja_filters.do_center(_to_string(value), width)


def _format(value: Any, *args: Any, **kwargs: Any) -> str:
    text = _to_string(value)
    check_printf(text, kwargs or args)
    return str(text % plain_args(kwargs or args))


def _indent(value: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    text = _to_string(value)
    if isinstance(width, int):
        check_width(width, "indent width")
        pad = width
    else:
        pad = len(str(width))
        check_width(pad, "indent string of length")
    check_string_result(len(text) + (text.count("\n") + 1) * pad, "the indented text")
    return jinja_filters.do_indent(text, width, first, blank)


@jinja2.pass_environment
def _truncate(
    env: jinja2.Environment,
    value: Any,
    length: int = 255,
    killwords: bool = False,
    end: str = "...",
    leeway: Any = None,
) -> str:
    if not isinstance(length, int) or length < 0:
        raise TemplateError("truncate: the length must be a number of characters, 0 or more")
    return jinja_filters.do_truncate(env, _to_string(value), length, killwords, end, leeway)


# Wrapping a long word cuts copies of the rest of it; the input is bounded so that stays cheap.
_WORDWRAP_MAX_INPUT = 16 * 1024


@jinja2.pass_environment
def _wordwrap(
    env: jinja2.Environment,
    value: Any,
    width: int = 79,
    break_long_words: bool = True,
    wrapstring: str | None = None,
    break_on_hyphens: bool = True,
) -> str:
    text = _to_string(value)
    if not isinstance(width, int) or width < 1:
        raise TemplateError("wordwrap: the width must be 1 or more")
    if len(text) > _WORDWRAP_MAX_INPUT:
        raise limit_error(
            f"wordwrap of {len(text)} characters", _WORDWRAP_MAX_INPUT, "wordwrap's input limit"
        )
    current().charge(len(text) * max(1, min(64, len(text) // width)))
    return jinja_filters.do_wordwrap(env, text, width, break_long_words, wrapstring, break_on_hyphens)


def _replace(value: Any, old: Any, new: Any, count: int | None = None) -> str:
    text, old_s, new_s = _to_string(value), _to_string(old), _to_string(new)
    occurrences = len(text) + 1 if old_s == "" else text.count(old_s)
    if count is not None and count >= 0:
        occurrences = min(occurrences, count)
    check_string_result(len(text) + occurrences * (len(new_s) - len(old_s)), "replace's result")
    return text.replace(old_s, new_s, -1 if count is None else count)


@jinja2.pass_environment
def _join(env: jinja2.Environment, value: Iterable[Any], d: str = "", attribute: Any = None) -> str:
    sep = _to_string(d)
    pieces: list[str] = []
    length = 0
    budget = current()
    for item in _bounded(value, "join"):
        if attribute is not None:
            item = env.getitem(item, attribute)
        text = text_of(item)
        length += len(text) + (len(sep) if pieces else 0)
        check_string_result(length, "join's result")
        pieces.append(text)
    budget.charge(length)
    return sep.join(pieces)


def _batch(value: Iterable[Any], linecount: int, fill_with: Any = None) -> Any:
    check_width(linecount, "batch size")
    return list(jinja_filters.do_batch(_bounded(value, "batch"), linecount, fill_with))


def _slice(value: Iterable[Any], slices: int, fill_with: Any = None) -> Any:
    check_width(slices, "slice count")
    return list(jinja_filters.sync_do_slice(_bounded(value, "slice"), slices, fill_with))


def _round(value: Any, precision: int = 0, method: Any = "common") -> float:
    check_width(precision, "round precision")
    return jinja_filters.do_round(value, precision, method)


def _list(value: Any) -> list[Any]:
    return _bounded(value, "list")


@jinja2.pass_environment
def _sum(env: Any, iterable: Iterable[Any], attribute: Any = None, start: Any = 0) -> Any:
    items = _bounded(iterable, "sum")
    if attribute is not None:
        items = [env.getitem(item, attribute) for item in items]
    if isinstance(start, list):
        # Adding lists one by one copies the total each time: build it once, bounded.
        out = list(start)
        for item in items:
            out.extend(_bounded(item, "sum"))
            if len(out) > MAX_LIST_LENGTH:
                raise limit_error("sum's items", MAX_LIST_LENGTH, "MAX_LIST_LENGTH")
        return out
    total = start
    for item in items:
        total = env.call_binop(None, "+", total, item)
    return total


def _input_of(func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    # A filter marked pass_environment/pass_eval_context gets that first, its input second.
    return args[1] if getattr(func, "jinja_pass_arg", None) is not None else args[0]


def _text_filter(func: Callable[..., Any], what: str) -> Callable[..., Any]:
    """A jinja2 filter that turns its input into text: refuse the input when that text would
    be over MAX_STRING_LENGTH, charge the input's size."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        check_text_size(_input_of(func, args), f"the input of {what}")
        return func(*args, **kwargs)

    return wrapper


def _charged_input(func: Callable[..., Any]) -> Callable[..., Any]:
    """A filter whose cost grows with the number of items of its input (sort, dictsort...)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value = _input_of(func, args)
        if hasattr(value, "__len__"):
            current().charge(len(value))
        return func(*args, **kwargs)

    return wrapper


def ansible_filters() -> dict[str, Callable[..., Any]]:
    return {
        "bool": to_bool,
        "int": _to_int,
        "float": _to_float,
        "string": _to_string,
        "quote": quote,
        "regex_search": regex_search,
        "regex_replace": regex_replace,
        "regex_findall": regex_findall,
        "regex_escape": regex_escape,
        "to_json": _to_json,
        "from_json": _from_json,
        "combine": _combine,
        "dict2items": _dict2items,
        "items2dict": _items2dict,
        "version": version_compare,
        "version_compare": version_compare,
        "basename": lambda v: posixpath.basename(_to_string(v)),
        "dirname": lambda v: posixpath.dirname(_to_string(v)),
        "mandatory": _mandatory,
        "ternary": _ternary,
        "unique": _unique,
        "flatten": _flatten,
        "difference": _difference,
        "intersect": _intersect,
        "union": _union,
        "extract": _extract,
        # jinja2's own, with their size arguments capped
        "center": _center,
        "format": _format,
        "indent": _indent,
        "truncate": _truncate,
        "wordwrap": _wordwrap,
        "replace": _replace,
        "join": _join,
        "batch": _batch,
        "slice": _slice,
        "round": _round,
        "list": _list,
        "sum": _sum,
        "tojson": _text_filter(jinja_filters.do_tojson, "tojson"),
        "pprint": _text_filter(jinja_filters.do_pprint, "pprint"),
        "urlencode": _text_filter(jinja_filters.do_urlencode, "urlencode"),
        "upper": _text_filter(jinja_filters.do_upper, "upper"),
        "lower": _text_filter(jinja_filters.do_lower, "lower"),
        "title": _text_filter(jinja_filters.do_title, "title"),
        "capitalize": _text_filter(jinja_filters.do_capitalize, "capitalize"),
        "trim": _text_filter(jinja_filters.do_trim, "trim"),
        "wordcount": _text_filter(jinja_filters.do_wordcount, "wordcount"),
        "filesizeformat": _text_filter(jinja_filters.do_filesizeformat, "filesizeformat"),
        "sort": _charged_input(jinja_filters.do_sort),
        "dictsort": _charged_input(jinja_filters.do_dictsort),
        "reverse": _charged_input(jinja_filters.do_reverse),
        "min": _charged_input(jinja_filters.do_min),
        "max": _charged_input(jinja_filters.do_max),
    }


# HTML helpers with regexes that are quadratic on hostile input, and randomness: no use in
# runbooks, so not offered.
REMOVED_FILTERS = ("random", "striptags", "urlize", "xmlattr", "forceescape")


def ansible_tests() -> dict[str, Callable[..., Any]]:
    return {
        "version": version_compare,
        "version_compare": version_compare,
        "match": test_match,
        "search": test_search,
        "regex": test_search,
        "failed": lambda v: _result_flag(v, "failed"),
        "succeeded": lambda v: not _result_flag(v, "failed"),
        "success": lambda v: not _result_flag(v, "failed"),
        "changed": lambda v: _result_flag(v, "changed"),
        "skipped": lambda v: _result_flag(v, "skipped"),
        "truthy": test_truthy,
        "falsy": lambda v: not test_truthy(v),
    }


def charged(func: Callable[..., Any]) -> Callable[..., Any]:
    """Every filter and test: one step, and its result within the size limits. Outside a
    render this raises, so jinja2 never folds a filter into a constant at compile time."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        current().step(STEPS_PER_CALL)
        return check_length(func(*args, **kwargs))

    return wrapper


__all__ = [
    "MAX_FORMAT_WIDTH",
    "REMOVED_FILTERS",
    "ansible_filters",
    "ansible_tests",
    "charged",
    "quote",
    "test_truthy",
    "to_bool",
    "version_compare",
]
