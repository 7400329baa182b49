"""What one expression may cost: deterministic budgets and size limits.

Expressions render inside workflow code, where one slow render stops every run on the worker
(the GIL) and a value no converter can carry wedges the run. So every limit here is a counter
or a size, never a clock or a thread: the same expression over the same variables passes or
fails the same way on every worker and on replay. A render opens a `Budget`; the sandbox's
hooks (loop iterations, calls, lookups, operators, filters and tests) charge it, and anything
that would build an oversized string, list or number is refused before it is built.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import jinja2

# Steps one render may take: a loop iteration, a lookup or an operator is one step, a filter,
# test or function call eight, a macro call (jinja2's costliest operation) twenty-five. A loop
# over a 10,000-host group with a lookup and a filter per host is ~120,000.
MAX_RENDER_STEPS = 200_000
STEPS_PER_CALL = 8
STEPS_PER_MACRO_CALL = 25
# Characters and items that one render may produce or scan in operations whose cost grows
# with their input (strings built, joins, regex matching, comparisons of large values).
MAX_RENDER_WORK = 20_000_000
# Longest string an expression may build (and the rendered output of a template string).
MAX_STRING_LENGTH = 1024 * 1024
# Most items a list or mapping built by an expression may hold (jinja2's own `range` limit).
MAX_LIST_LENGTH = 100_000
# Largest integer an expression may build, in bits (~1,200 decimal digits).
MAX_INT_BITS = 4096
# Largest width, precision, padding or count argument of a formatting filter or method
# (`center`, `format`, `%`-formatting, `indent`, `truncate`, `round`, `batch`, ...).
MAX_FORMAT_WIDTH = 1000
# Deepest nesting of macro / `caller()` / call-block calls.
MAX_CALL_DEPTH = 50
# Deepest nesting of lists and mappings in a rendered value.
MAX_VALUE_DEPTH = 64
# Size of a rendered value: characters of its strings plus its items, summed over the value
# (a value this size no longer fits in a workflow history payload anyway).
MAX_RESULT_SIZE = 2 * 1024 * 1024
# Longest regular expression pattern.
MAX_REGEX_LENGTH = 4096


class TemplateError(ValueError):
    """An expression could not be compiled or evaluated; the message says why in plain words."""


class LimitError(TemplateError):
    """An expression went over one of the limits above; the message names the limit."""


class NoBudget(RuntimeError):
    """Raised by every hook when no render is under way: jinja2 tries to fold constants at
    compile time, and this makes it give up, so nothing a runbook writes runs while compiling."""


def limit_error(what: str, limit: int, name: str, advice: str = "", unit: str = "") -> LimitError:
    text = f"{what} exceeds the limit of {limit}{' ' + unit if unit else ''} ({name})"
    return LimitError(f"{text}; {advice}" if advice else text)


class Budget:
    """The counters of one render."""

    __slots__ = ("call_depth", "steps", "work")

    def __init__(self) -> None:
        self.steps = 0
        self.work = 0
        self.call_depth = 0

    def step(self, count: int = 1) -> None:
        self.steps += count
        if self.steps > MAX_RENDER_STEPS:
            raise limit_error(
                "the number of steps (loop iterations, calls, lookups) the expression takes",
                MAX_RENDER_STEPS,
                "MAX_RENDER_STEPS",
                "loop over fewer items or compute the value in a module",
            )

    def charge(self, amount: int) -> None:
        self.work += amount
        if self.work > MAX_RENDER_WORK:
            raise limit_error(
                "the size of what the expression builds or scans (characters and items)",
                MAX_RENDER_WORK,
                "MAX_RENDER_WORK",
                "work on smaller values or compute the value in a module",
            )

    def remaining_work(self) -> int:
        return max(0, MAX_RENDER_WORK - self.work)


_ACTIVE: ContextVar[Budget | None] = ContextVar("pitstop_render_budget", default=None)


def current() -> Budget:
    budget = _ACTIVE.get()
    if budget is None:
        raise NoBudget("expressions are evaluated only while rendering")
    return budget


@contextmanager
def render_budget() -> Iterator[Budget]:
    """The budget of the render under way, or a new one for a new render."""
    budget = _ACTIVE.get()
    if budget is not None:
        yield budget
        return
    budget = Budget()
    token = _ACTIVE.set(budget)
    try:
        yield budget
    finally:
        _ACTIVE.reset(token)


@contextmanager
def no_budget() -> Iterator[None]:
    """Compile with no budget active, so that jinja2 folds no user constant."""
    token = _ACTIVE.set(None)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


# ---------------------------------------------------------------- sizes


def check_int(value: int) -> int:
    if value.bit_length() > MAX_INT_BITS:
        raise limit_error("an integer of the expression", MAX_INT_BITS, "MAX_INT_BITS", unit="bits")
    return value


def check_length(value: Any) -> Any:
    """Refuse a string or collection over its limit; charge what was built."""
    if isinstance(value, str | bytes | bytearray):
        if len(value) > MAX_STRING_LENGTH:
            raise limit_error(f"a string of {len(value)} characters", MAX_STRING_LENGTH, "MAX_STRING_LENGTH")
        current().charge(len(value))
    elif isinstance(value, list | tuple | dict | set | frozenset):
        if len(value) > MAX_LIST_LENGTH:
            raise limit_error(f"a collection of {len(value)} items", MAX_LIST_LENGTH, "MAX_LIST_LENGTH")
        current().charge(len(value))
    elif isinstance(value, int) and not isinstance(value, bool):
        check_int(value)
    return value


def check_width(value: Any, what: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_FORMAT_WIDTH:
        raise limit_error(f"{what} {value}", MAX_FORMAT_WIDTH, "MAX_FORMAT_WIDTH")


def check_string_result(length: int, what: str) -> None:
    """Refuse, before building it, a string that would be `length` characters long."""
    if length > MAX_STRING_LENGTH:
        raise limit_error(
            f"{what} would be {length} characters, which", MAX_STRING_LENGTH, "MAX_STRING_LENGTH"
        )


def weigh(value: Any, limit: int) -> int:
    """Characters of the strings plus the items in `value` (what turning it into text costs),
    counting at most up to `limit`: past that, the limit error of the caller applies. The walk
    itself is charged, so a value made of many references to one big string is caught early;
    nesting deeper than MAX_VALUE_DEPTH is refused (text of it would recurse that deep)."""
    total = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    budget = current()
    while stack:
        item, depth = stack.pop()
        if depth > MAX_VALUE_DEPTH:
            raise limit_error("the nesting of a value", MAX_VALUE_DEPTH, "MAX_VALUE_DEPTH")
        if isinstance(item, str | bytes | bytearray):
            total += len(item) + 1
        elif isinstance(item, Mapping):
            total += len(item) + 1
            for key, sub in item.items():
                stack.append((key, depth + 1))
                stack.append((sub, depth + 1))
        elif isinstance(item, list | tuple | set | frozenset):
            total += len(item) + 1
            stack.extend((sub, depth + 1) for sub in item)
        else:
            total += 1
        if total > limit:
            budget.charge(limit)
            return total
    budget.charge(total)
    return total


def check_text_size(value: Any, what: str) -> None:
    """Refuse turning `value` into text when the text would exceed MAX_STRING_LENGTH."""
    if isinstance(value, str):
        return
    if weigh(value, MAX_STRING_LENGTH) > MAX_STRING_LENGTH:
        raise limit_error(f"{what} as text", MAX_STRING_LENGTH, "MAX_STRING_LENGTH")


# ---------------------------------------------------------------- operators


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _repeat_count(value: Any) -> int | None:
    return int(value) if isinstance(value, int) else None


def check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse, before computing it, an operation whose result would be over a limit."""
    if operator == "**" and isinstance(left, int) and isinstance(right, int):
        if right > 0 and abs(left) > 1 and left.bit_length() * right > MAX_INT_BITS:
            raise limit_error(f"{left} ** {right}", MAX_INT_BITS, "MAX_INT_BITS", unit="bits")
    elif operator == "*":
        if isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
                raise limit_error("the product", MAX_INT_BITS, "MAX_INT_BITS", unit="bits")
            return
        for seq, count in ((left, _repeat_count(right)), (right, _repeat_count(left))):
            if count is not None and hasattr(seq, "__len__") and not isinstance(seq, int):
                _check_built(seq, len(seq) * max(count, 0), "repeating a value")
    elif operator == "+" and hasattr(left, "__len__") and hasattr(right, "__len__"):
        _check_built(left, len(left) + len(right), "joining two values")
    elif operator == "%" and isinstance(left, str):
        check_printf(left, right)


def _check_built(seq: Any, length: int, what: str) -> None:
    if isinstance(seq, str | bytes | bytearray):
        check_string_result(length, what)
    elif length > MAX_LIST_LENGTH:
        raise limit_error(f"{what} would give {length} items, which", MAX_LIST_LENGTH, "MAX_LIST_LENGTH")


# printf-style conversions: %[(key)][flags][width][.precision][length]type
_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.DOTALL)
# Numbers in a str.format spec: fill/align/sign/width/grouping/precision/type.
_DIGITS = re.compile(r"\d+")


def check_printf(fmt: str, args: Any) -> None:
    """`'%0999999999d' % 1` would build a gigabyte: refuse widths and precisions over
    MAX_FORMAT_WIDTH, and `*` (a width taken from the arguments)."""
    for match in _PRINTF.finditer(fmt):
        width, precision, _kind = match.groups()
        for number in (width, precision):
            if number == "*":
                raise TemplateError("'%' formatting with '*' widths is not allowed; write the width")
            if number:
                check_width(int(number), "a '%' format width or precision of")
    check_text_size(args, "the values given to '%' formatting")


def check_format_spec(fmt: str, args: Iterable[Any], kwargs: Mapping[str, Any]) -> None:
    """The same for `'{:>999999999}'.format(x)`: numbers in a format spec are widths or
    precisions; nested `{}` inside a spec are refused."""
    import string

    for _literal, field, spec, _conversion in string.Formatter().parse(fmt):
        if field is None or not spec:
            continue
        if "{" in spec:
            raise TemplateError("str.format: a '{}' inside a format spec is not allowed; write the width")
        for number in _DIGITS.findall(spec):
            check_width(int(number), "a format width or precision of")
    check_text_size(list(args), "the values given to str.format")
    check_text_size(dict(kwargs), "the values given to str.format")


# ---------------------------------------------------------------- plain values


_OPAQUE_NAMES = {
    "Cycler": "a cycler",
    "Joiner": "a joiner",
    "Namespace": "a namespace",
    "Macro": "a macro",
    "LoopContext": "the loop variable",
    "TemplateReference": "'self'",
    "Context": "a template context",
}


def describe_type(value: Any) -> str:
    name = type(value).__name__
    return _OPAQUE_NAMES.get(name, f"a Python {name}")


def _key(key: Any) -> str:
    # The same keys JSON would write; anything else has no JSON form.
    if isinstance(key, str):
        return str(key)
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int | float):
        return str(key)
    raise TemplateError(f"a mapping key of the result is {describe_type(key)}; keys must be strings")


class _Plain:
    """Turns a rendered value into JSON data, or refuses it saying what came out."""

    def __init__(self, undefined_type: type) -> None:
        self.undefined_type = undefined_type
        self.size = 0

    def grow(self, amount: int) -> None:
        self.size += amount
        if self.size > MAX_RESULT_SIZE:
            raise limit_error("the size of the rendered value", MAX_RESULT_SIZE, "MAX_RESULT_SIZE")
        current().charge(amount)

    def convert(self, value: Any, depth: int) -> Any:
        if depth > MAX_VALUE_DEPTH:
            raise limit_error("the nesting of the rendered value", MAX_VALUE_DEPTH, "MAX_VALUE_DEPTH")
        if value is None or isinstance(value, bool):
            self.grow(1)
            return value
        if isinstance(value, int):
            self.grow(1)
            return int(check_int(value))
        if isinstance(value, float):
            if not math.isfinite(value):
                raise TemplateError(f"the result is {value}, which JSON cannot carry")
            self.grow(1)
            return float(value)
        if isinstance(value, self.undefined_type):
            # Raises UndefinedError naming the missing variable.
            str(value)
        if isinstance(value, str):  # str, and Markup (a str subclass) as plain text
            self.grow(len(value) + 1)
            return str(value)
        if isinstance(value, Mapping) and type(value).__name__ != "Namespace":
            self.grow(len(value) + 1)
            return {_key(k): self.convert(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple | range) or _is_lazy(value):
            # A bare `map(...)`/`select(...)` (a generator), a `range` and dict views become
            # lists, as Ansible makes them; a tuple is a list in JSON.
            items: list[Any] = []
            budget = current()
            for item in value:
                budget.step()
                self.grow(1)
                items.append(self.convert(item, depth + 1))
            self.grow(1)
            return items
        if isinstance(value, set | frozenset):
            raise TemplateError(
                "the result is a set, whose order is not fixed; make it a sorted list (| sort)"
            )
        raise TemplateError(
            f"the result is {describe_type(value)}, which is not plain data "
            "(a string, number, boolean, null, list or mapping)"
        )


_LAZY_TYPES: tuple[type, ...] = (type({}.keys()), type({}.values()), type({}.items()))


def _is_lazy(value: Any) -> bool:
    return isinstance(value, _LAZY_TYPES) or type(value).__name__ == "generator"


def to_plain(value: Any, undefined_type: type | None = None) -> Any:
    """`value` as JSON data (dict/list/str/int/float/bool/None), within MAX_RESULT_SIZE and
    MAX_VALUE_DEPTH; anything that has no JSON form is a TemplateError naming its type."""
    return _Plain(undefined_type or jinja2.Undefined).convert(value, 0)


def text_of(value: Any) -> str:
    """The text of a value as templates write it. Only plain data is written: the text of a
    generator or a cycler holds a memory address, which would differ between a run and its
    replay; a lazy sequence (`map(...)`) is written as the list it gives."""
    if isinstance(value, str):
        return str(value)
    check_text_size(value, "the value written")
    return str(to_plain(value))


def plain_args(value: Any) -> Any:
    """Arguments of `%` and str.format as plain data (a tuple stays a tuple of them)."""
    if isinstance(value, tuple):
        return tuple(to_plain(item) for item in value)
    return to_plain(value)
