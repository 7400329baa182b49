"""Jinja2 expressions for runbooks, in an immutable sandbox with a budget.

This code also runs inside Temporal workflows, so it must be deterministic: no clock, no
randomness, no environment, no loaders, no I/O. The sandbox refuses Python internals and
mutation of values, so a runbook cannot reach outside the variables it is given; the budget
(`_limits`, enforced by `_sandbox`) bounds what one render may cost with counters and sizes,
so no expression can stall or exhaust a worker; and every rendered value is plain JSON data.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.exceptions import SecurityError

from pitstop.runbook._filters import quote, test_truthy, version_compare
from pitstop.runbook._limits import (
    MAX_CALL_DEPTH,
    MAX_FORMAT_WIDTH,
    MAX_INT_BITS,
    MAX_LIST_LENGTH,
    MAX_REGEX_LENGTH,
    MAX_RENDER_STEPS,
    MAX_RENDER_WORK,
    MAX_RESULT_SIZE,
    MAX_STRING_LENGTH,
    MAX_VALUE_DEPTH,
    LimitError,
    TemplateError,
    check_string_result,
    current,
    no_budget,
    render_budget,
    to_plain,
)
from pitstop.runbook._sandbox import make_environment

_SANDBOX_MESSAGE = "not allowed in the expression sandbox"


def is_template(value: Any) -> bool:
    """True for strings that Jinja would render (`{{ }}`, `{% %}`); literals stay literal."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return make_environment()


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
    if isinstance(exc, RecursionError):
        return TemplateError("the expression nests too deeply (recursion)")
    if isinstance(exc, MemoryError):
        return TemplateError("the expression ran out of memory")
    return TemplateError(f"{type(exc).__name__}: {exc}")


@lru_cache(maxsize=4096)
def _compile_template(source: str) -> jinja2.Template:
    # Compiled with no budget active: jinja2 may try to fold constants, and every hook
    # refuses outside a render, so nothing the runbook wrote runs here.
    with no_budget():
        return _environment().from_string(source)


@lru_cache(maxsize=4096)
def _compile_expression(source: str) -> Callable[..., Any]:
    with no_budget():
        return _environment().compile_expression(source, undefined_to_none=False)


def _single_expression(source: str) -> str | None:
    """The inner expression when `source` is exactly one `{{ expr }}`, else None."""
    text = source.strip()
    if not (text.startswith("{{") and text.endswith("}}")):
        return None
    try:
        body = _environment().parse(text).body
    except (jinja2.TemplateSyntaxError, RecursionError):
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
    """Raise TemplateError when `source` (a template, e.g. 'a {{ b }}') does not compile, or,
    while `probing_constants()`, when it uses no variable and fails when evaluated."""
    try:
        _compile_template(source)
    except Exception as exc:
        raise _describe(exc) from None
    _probe(source, template=True)


def check_expression(source: str) -> None:
    """Raise TemplateError when a bare expression (as in `when:`) does not compile (or, while
    `probing_constants()`, uses no variable and fails when evaluated)."""
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
    if inner is None and is_template(source):
        _probe(source, template=True)
    else:
        _probe(inner if inner is not None else source, template=False)


# ---------------------------------------------------------------- validation of constants

# Steps all the probes of one validation may spend together (each probe also has a whole
# budget of its own, so that its error names the limit it went over): a few renders' worth.
PROBE_STEPS = 3 * MAX_RENDER_STEPS
_PROBES: ContextVar[list[int] | None] = ContextVar("pitstop_constant_probes", default=None)


@contextmanager
def probing_constants() -> Iterator[None]:
    """Within this block, `check_syntax`/`check_expression` also evaluate every expression that
    uses no variable at all (`{{ 'a' | center(10**9) }}`), under the same budget as a run, so
    that validation refuses what every run would refuse. Nothing is folded at compile time:
    this is an ordinary, bounded render, and all probes together stop after PROBE_STEPS."""
    token = _PROBES.set([PROBE_STEPS])
    try:
        yield
    finally:
        _PROBES.reset(token)


def _probe(source: str, *, template: bool) -> None:
    allowance = _PROBES.get()
    if allowance is None or allowance[0] <= 0:
        return
    env = _environment()
    try:
        tree = env.parse(source if template else "{{ " + source + " }}")
    except Exception:
        return
    if meta.find_undeclared_variables(tree) - set(env.globals):
        return  # depends on variables: evaluated at run time
    with no_budget(), render_budget() as budget:
        try:
            if template:
                _render_string(source, {})
            else:
                evaluate(source, {})
        except TemplateError as exc:
            raise TemplateError(f"this expression uses no variable and fails when evaluated: {exc}") from None
        finally:
            allowance[0] -= max(budget.steps, 1)


@contextmanager
def _rendering() -> Iterator[None]:
    """One budget for the whole value being rendered (a task's arguments, a condition)."""
    with render_budget():
        try:
            yield
        except TemplateError:
            raise
        except Exception as exc:
            raise _describe(exc) from None


def _plain(value: Any) -> Any:
    """A rendered value as plain JSON data. An undefined value anywhere inside it (e.g.
    `map(attribute='x')` over items without `x`) is an error naming what is missing; a lazy
    sequence (a bare `map(...)`), a `range` and dict views (`d.keys()`) become lists, as
    Ansible makes them; anything else that is not JSON (a cycler, a namespace, a macro, a set)
    is refused naming what came out, rather than an object that no module argument and no
    workflow history can carry."""
    return to_plain(value, jinja2.Undefined)


def _render_text(template: jinja2.Template, variables: Mapping[str, Any]) -> str:
    # Written piece by piece so that the output is refused as soon as it is too long.
    pieces: list[str] = []
    length = 0
    for piece in template.generate(**variables):
        length += len(piece)
        check_string_result(length, "the rendered text")
        pieces.append(piece)
    current().charge(length)
    return "".join(pieces)


def _render_string(source: str, variables: Mapping[str, Any]) -> Any:
    if not is_template(source):
        return source
    inner = _single_expression(source)
    with _rendering():
        if inner is not None:
            # Ansible keeps native types for a lone expression: "{{ 3 }}" is 3, not "3".
            return _plain(_compile_expression(inner)(**variables))
        return _render_text(_compile_template(source), variables)


def render(value: Any, variables: Mapping[str, Any]) -> Any:
    """Render every template string inside `value` (dicts and lists recursively), within one
    budget; the result is plain JSON data. Raises TemplateError (LimitError for a limit)."""
    with _rendering():
        return _render_value(value, variables)


def _render_value(value: Any, variables: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        return _render_string(value, variables)
    if isinstance(value, Mapping):
        # Keys are templates too, as in Ansible (`set_fact: {"{{ name }}": ...}`).
        return {
            (str(_render_string(k, variables)) if isinstance(k, str) else k): _render_value(v, variables)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_render_value(v, variables) for v in value]
    return value


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """Value of a bare expression (as in `when:`); `{{ expr }}` is accepted too. The value is
    plain JSON data."""
    if not isinstance(expression, str):
        return expression
    inner = _single_expression(expression)
    if inner is None and is_template(expression):
        return _render_string(expression, variables)
    with _rendering():
        return _plain(_compile_expression(inner if inner is not None else expression)(**variables))


def evaluate_bool(expression: str | bool, variables: Mapping[str, Any]) -> bool:
    """Truth of a condition; strings such as 'yes'/'false' follow Ansible's meaning."""
    if isinstance(expression, bool):
        return expression
    value = evaluate(expression, variables)
    if isinstance(value, str):
        return test_truthy(value)
    return bool(value)


LIMITS: dict[str, int] = {
    "MAX_RENDER_STEPS": MAX_RENDER_STEPS,
    "MAX_RENDER_WORK": MAX_RENDER_WORK,
    "MAX_STRING_LENGTH": MAX_STRING_LENGTH,
    "MAX_LIST_LENGTH": MAX_LIST_LENGTH,
    "MAX_INT_BITS": MAX_INT_BITS,
    "MAX_FORMAT_WIDTH": MAX_FORMAT_WIDTH,
    "MAX_CALL_DEPTH": MAX_CALL_DEPTH,
    "MAX_VALUE_DEPTH": MAX_VALUE_DEPTH,
    "MAX_RESULT_SIZE": MAX_RESULT_SIZE,
    "MAX_REGEX_LENGTH": MAX_REGEX_LENGTH,
}

__all__ = [
    "LIMITS",
    "LimitError",
    "TemplateError",
    "check_expression",
    "check_syntax",
    "evaluate",
    "evaluate_bool",
    "is_template",
    "probing_constants",
    "quote",
    "render",
    "version_compare",
]
