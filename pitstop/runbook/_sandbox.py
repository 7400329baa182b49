"""The jinja2 environment of runbook expressions: an immutable sandbox whose every costly
operation is charged to the render's budget (`_limits`).

What is intercepted, and where:
- `for` loops: the compiled loop iterates through `budget_iter`, one step per item plus the
  literal text its body writes (an AST pass wraps every loop's iterable);
- calls (functions, macros, `caller()`, recursive `loop()`), attribute and item lookups,
  slices: the sandbox hooks, one step each; macro nesting is bounded;
- `+ - * / // % **` and unary minus: `call_binop`/`call_unop`, refusing oversized results
  before computing them; `~` concatenation and comparisons (`==`, `in`, ...): compiled to
  `budget_concat` / `budget_compare`, charged by the size of what they touch;
- `str.format`/`%`-formatting: widths and precisions capped;
- `{{ }}` output: `finalize` refuses values whose text would be over the limit.
Nothing is folded at compile time: the environment is not optimized, and every hook raises
when no render is under way, which makes jinja2 give up on constant folding.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment

from pitstop.runbook import _filters
from pitstop.runbook._limits import (
    MAX_CALL_DEPTH,
    MAX_FORMAT_WIDTH,
    STEPS_PER_CALL,
    STEPS_PER_MACRO_CALL,
    TemplateError,
    check_binop,
    check_format_spec,
    check_length,
    check_string_result,
    check_text_size,
    check_width,
    current,
    limit_error,
    plain_args,
    text_of,
    to_plain,
    weigh,
)

_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "gt": operator.gt,
    "gteq": operator.ge,
    "lt": operator.lt,
    "lteq": operator.le,
    "in": lambda a, b: a in b,
    "notin": lambda a, b: a not in b,
}
# str/bytes methods whose integer argument is a width of the result.
_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})


def _literal_size(node: nodes.Node) -> int:
    return sum(len(data.data) for data in node.find_all(nodes.TemplateData))


def _is_budgeted(node: nodes.Node) -> bool:
    return (
        isinstance(node, nodes.Call)
        and isinstance(node.node, nodes.EnvironmentAttribute)
        and node.node.name == "budget_iter"
    )


def _wrap_loops(template: nodes.Template) -> None:
    """`for x in ITER` becomes `for x in environment.budget_iter(ITER, COST)`, COST being the
    literal text one iteration of the body may write."""
    for loop in template.find_all(nodes.For):
        if _is_budgeted(loop.iter):
            continue
        cost = sum(_literal_size(child) for child in loop.body) + 1
        lineno = loop.iter.lineno
        call = nodes.Call(
            nodes.EnvironmentAttribute("budget_iter", lineno=lineno),
            [loop.iter, nodes.Const(cost, lineno=lineno)],
            [],
            None,
            None,
            lineno=lineno,
        )
        if loop.environment is not None:
            call.set_environment(loop.environment)
        loop.iter = call


class _BudgetCodeGenerator(CodeGenerator):
    """jinja2's code generator, routing loops, `~`, comparisons and slices through the budget."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        _wrap_loops(node)
        super().visit_Template(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.budget_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def visit_Compare(self, node: nodes.Compare, frame: Frame) -> None:
        # Later operands stay lazy, as in Python's chained comparisons.
        self.write("environment.budget_compare(")
        self.visit(node.expr, frame)
        for op in node.ops:
            self.write(f", {op.op!r}, lambda: ")
            self.visit(op.expr, frame)
        self.write(")")

    def visit_Getitem(self, node: nodes.Getitem, frame: Frame) -> None:
        if not isinstance(node.arg, nodes.Slice):
            super().visit_Getitem(node, frame)
            return
        # jinja2 compiles slices to plain Python; here they are charged like any copy.
        self.write("environment.budget_slice(")
        self.visit(node.node, frame)
        self.write(", ")
        for part in (node.arg.start, node.arg.stop, node.arg.step):
            if part is None:
                self.write("None")
            else:
                self.visit(part, frame)
            self.write(", ")
        self.write(")")


class Sandbox(ImmutableSandboxedEnvironment):
    """Immutable sandbox that also refuses every underscore attribute, not only dunders, and
    charges every operation to the render's budget."""

    code_generator_class = _BudgetCodeGenerator
    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    intercepted_unops = frozenset({"-", "+"})

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if attr.startswith("_"):
            return False
        return bool(super().is_safe_attribute(obj, attr, value))

    # -- operators

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        current().step()
        check_binop(operator, left, right)
        if operator == "%" and isinstance(left, str):
            right = plain_args(right)  # what `%s` writes of it must be plain data
        return check_length(self.binop_table[operator](left, right))

    def call_unop(self, context: Any, operator: str, arg: Any) -> Any:
        current().step()
        return self.unop_table[operator](arg)

    def budget_concat(self, values: tuple[Any, ...]) -> str:
        budget = current()
        budget.step()
        pieces: list[str] = []
        length = 0
        for value in values:
            text = text_of(value)
            length += len(text)
            check_string_result(length, "joining with '~'")
            pieces.append(text)
        budget.charge(length)
        return "".join(pieces)

    def budget_compare(self, left: Any, *ops: Any) -> Any:
        budget = current()
        budget.step()
        result: Any = True
        for index in range(0, len(ops), 2):
            op, later = ops[index], ops[index + 1]
            right = later()
            budget.charge(_compare_cost(op, left, right))
            result = _COMPARE[op](left, right)
            if not result:
                return result
            left = right
        return result

    def budget_slice(self, obj: Any, start: Any, stop: Any, step: Any) -> Any:
        current().step()
        return check_length(obj[start:stop:step])

    def budget_iter(self, iterable: Iterable[Any], cost: int) -> Iterator[Any]:
        budget = current()
        budget.step()
        for item in iterable:
            budget.step()
            budget.charge(cost)
            yield item

    # -- lookups and calls

    def getattr(self, obj: Any, attribute: str) -> Any:
        current().step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        current().step()
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = current()
        budget.step(STEPS_PER_MACRO_CALL if isinstance(__obj, Macro) else STEPS_PER_CALL)
        if isinstance(__obj, LoopContext) and args:
            # A recursive loop's `loop(children)` iterates too: through the budget.
            args = (__self.budget_iter(args[0], 1), *args[1:])
        _check_method_call(__obj, args, kwargs)
        budget.call_depth += 1
        try:
            if budget.call_depth > MAX_CALL_DEPTH:
                raise limit_error("the nesting of macro calls", MAX_CALL_DEPTH, "MAX_CALL_DEPTH")
            result = super().call(__context, __obj, *args, **kwargs)
        finally:
            budget.call_depth -= 1
        return check_length(result)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        formatter = super().wrap_str_format(value)
        if formatter is None:
            return None
        text: str = value.__self__
        is_format_map = value.__name__ == "format_map"

        def checked(*args: Any, **kwargs: Any) -> str:
            current().step()
            if is_format_map:
                mapping = args[0] if args and isinstance(args[0], Mapping) else {}
                check_format_spec(text, (), mapping)
                args = (to_plain(mapping),)
            else:
                check_format_spec(text, args, kwargs)
                args = plain_args(tuple(args))
                kwargs = {k: to_plain(v) for k, v in kwargs.items()}
            return check_length(formatter(*args, **kwargs))  # type: ignore[no-any-return]

        return checked


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes | list | tuple | dict | set | frozenset) else 1


def _compare_cost(op: str, left: Any, right: Any) -> int:
    if op in ("in", "notin"):
        if isinstance(right, Mapping | set | frozenset):
            return _size(left)  # hashing
        return _size(right) * max(1, _size(left))
    if isinstance(left, str) and isinstance(right, str):
        return min(len(left), len(right))
    containers = (list, tuple, dict)
    if isinstance(left, containers) and isinstance(right, containers):
        limit = current().remaining_work() + 1
        return min(weigh(left, limit), weigh(right, limit))
    return 1


def _check_method_call(obj: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Methods of strings and numbers that build a result from a size argument."""
    owner = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", "")
    if isinstance(owner, str | bytes):
        if name in _WIDTH_METHODS:
            for value in (*args, *kwargs.values()):
                check_width(value, f"the width given to {name}() of")
        elif name == "replace" and len(args) >= 2:
            old, new = str(args[0]), str(args[1])
            occurrences = len(owner) + 1 if old == "" else owner.count(old)  # type: ignore[arg-type]
            check_string_result(len(owner) + occurrences * (len(new) - len(old)), "replace's result")
        elif name == "join" and args:
            check_text_size(args[0], "the values given to join()")
    elif isinstance(owner, int) and name == "to_bytes":
        for value in (*args, *kwargs.values()):
            check_width(value, "the length given to to_bytes() of")


def finalize(value: Any) -> Any:
    """Every `{{ }}` output: plain data only (`text_of`), within the limit, and charged."""
    budget = current()
    budget.step()
    text = text_of(value)
    budget.charge(len(text))
    return text


def make_environment() -> Sandbox:
    env = Sandbox(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        loader=None,
        extensions=(),
        finalize=finalize,
        # No compile-time constant folding of anything a runbook writes.
        optimized=False,
    )
    # Anything that could produce randomness goes; the other globals are deterministic.
    env.globals.pop("lipsum", None)
    for name in _filters.REMOVED_FILTERS:
        env.filters.pop(name, None)
    env.filters.update(_filters.ansible_filters())
    env.tests.update(_filters.ansible_tests())
    # Comparison tests (`select('in', hosts)`, `is eq`) cost what the comparison operators do.
    for names, op in _COMPARISON_TESTS.items():
        for name in names:
            env.tests[name] = _compare_test(env, op)
    filters: dict[str, Callable[..., Any]] = dict(env.filters)
    tests: dict[str, Callable[..., Any]] = dict(env.tests)  # type: ignore[arg-type]
    env.filters = {name: _filters.charged(func) for name, func in filters.items()}
    env.tests = {name: _filters.charged(func) for name, func in tests.items()}
    return env


_COMPARISON_TESTS = {
    ("in",): "in",
    ("==", "eq", "equalto"): "eq",
    ("!=", "ne"): "ne",
    (">", "gt", "greaterthan"): "gt",
    (">=", "ge"): "gteq",
    ("<", "lt", "lessthan"): "lt",
    ("<=", "le"): "lteq",
}


def _compare_test(env: Sandbox, op: str) -> Callable[..., Any]:
    def test(value: Any, other: Any) -> Any:
        return env.budget_compare(value, op, lambda: other)

    return test


__all__ = ["MAX_FORMAT_WIDTH", "Sandbox", "TemplateError", "make_environment"]
