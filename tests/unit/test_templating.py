"""Expressions: native values, Ansible's filters and tests, and the sandbox."""

from __future__ import annotations

from typing import Any

import pytest

from pitstop.runbook.templating import (
    TemplateError,
    check_syntax,
    evaluate,
    evaluate_bool,
    is_template,
    render,
    version_compare,
)


def test_single_expression_keeps_its_native_type() -> None:
    variables = {"n": 3, "items": [1, 2], "d": {"a": 1}}
    assert render("{{ n }}", variables) == 3
    assert render("{{ items }}", variables) == [1, 2]
    assert render("  {{ d }} ", variables) == {"a": 1}
    assert render("n={{ n }}", variables) == "n=3"
    assert render({"x": ["{{ n + 1 }}", "plain"]}, variables) == {"x": [4, "plain"]}


def test_evaluate_accepts_bare_and_braced_expressions() -> None:
    assert evaluate("n > 2", {"n": 3}) is True
    assert evaluate("{{ n > 2 }}", {"n": 3}) is True
    assert evaluate_bool("flag", {"flag": "yes"}) is True
    assert evaluate_bool("flag", {"flag": "false"}) is False
    assert evaluate_bool(True, {}) is True


def test_undefined_variable_is_named() -> None:
    with pytest.raises(TemplateError, match="undefined variable 'missing'"):
        render("{{ missing }}", {})
    with pytest.raises(TemplateError, match="undefined variable 'nope'"):
        evaluate("nope | length > 0", {})


def test_an_undefined_value_inside_a_result_is_an_error_not_a_value() -> None:
    # e.g. `map(attribute=...)` over items without that attribute: the task must fail with
    # the reason, not hand a module an object no history can carry.
    items = {"xs": [{"a": 1}, {"a": 2}]}
    with pytest.raises(TemplateError, match="has no attribute 'summary'"):
        render("{{ xs | map(attribute='summary') | list }}", items)
    with pytest.raises(TemplateError, match="has no attribute 'summary'"):
        render({"nested": ["{{ {'k': xs[0].summary} }}"]}, items)


def test_mapping_keys_are_templates_too() -> None:
    assert render({"{{ host }}": "{{ n }}", "plain": 1}, {"host": "gpu-node-001", "n": 2}) == {
        "gpu-node-001": 2,
        "plain": 1,
    }


def test_a_lazy_sequence_becomes_a_list() -> None:
    assert render("{{ xs | map(attribute='a') }}", {"xs": [{"a": 1}, {"a": 2}]}) == [1, 2]


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("x | default(5)", 5),
        ("x | d('a')", "a"),
        ("[1,2,3] | length", 3),
        ("'42' | int", 42),
        ("'1.5' | float", 1.5),
        ("'yes' | bool", True),
        ("'off' | bool", False),
        ("5 | string", "5"),
        ("'AbC' | lower", "abc"),
        ("'AbC' | upper", "ABC"),
        ("'node-17' | regex_search('\\\\d+')", "17"),
        ("'a-b-c' | regex_replace('-', '_')", "a_b_c"),
        ("'a1b22' | regex_findall('\\\\d+')", ["1", "22"]),
        ("{'a': 1} | to_json", '{"a": 1}'),
        ("'{\"a\": [1]}' | from_json", {"a": [1]}),
        (
            "{'a': 1, 'b': {'c': 1}} | combine({'b': {'d': 2}}, recursive=true)",
            {"a": 1, "b": {"c": 1, "d": 2}},
        ),
        ("{'a': 1} | dict2items", [{"key": "a", "value": 1}]),
        ("[{'key': 'a', 'value': 1}] | items2dict", {"a": 1}),
        ("'535.104.05' | version('535.0', '>=')", True),
        ("'/etc/kube/config' | basename", "config"),
        ("true | ternary('y', 'n')", "y"),
        ("[1, 1, 2] | unique", [1, 2]),
        ("[1, [2, [3]]] | flatten", [1, 2, 3]),
        ("[3, 1, 2] | min", 1),
        ("[3, 1, 2] | max", 3),
        ("[3, 1, 2] | sum", 6),
        ("[1, 2, 3] | select('odd') | list", [1, 3]),
        ("[{'n': 1}, {'n': 2}] | map(attribute='n') | join(',')", "1,2"),
        ("[1, 2] | first", 1),
        ("[1, 2] | last", 2),
        ("[{'ok': true}, {'ok': false}] | selectattr('ok') | list | length", 1),
    ],
)
def test_filters(expr: str, expected: Any) -> None:
    assert evaluate(expr, {}) == expected


def test_mandatory_filter_fails_on_undefined() -> None:
    with pytest.raises(TemplateError, match="mandatory"):
        evaluate("x | mandatory", {})


@pytest.mark.parametrize(
    ("left", "right", "op", "expected"),
    [
        ("1.31.2", "1.31", ">=", True),
        ("1.31", "1.31.0", "==", True),
        ("1.9", "1.10", "<", True),
        ("v1.30.4", "1.31", "lt", True),
        ("96.00.9F.00.04", "96.00.9F.00.03", ">", True),
        ("96.00.9F.00.04", "96.00.A0.00.01", "<", True),
        ("535.104.05", "535.104.5", "eq", True),
        ("2.0", "10.0", "ge", False),
        ("1.2", "1.3", "!=", True),
        ("1.2", "1.2", "le", True),
    ],
)
def test_version_comparisons(left: str, right: str, op: str, expected: bool) -> None:
    assert version_compare(left, right, op) is expected
    assert evaluate(f"'{left}' is version('{right}', '{op}')", {}) is expected


def test_tests_on_registered_results_and_regexes() -> None:
    variables = {"r": {"failed": False, "changed": True, "skipped": False}}
    assert evaluate("r is succeeded and r is success and r is changed", variables) is True
    assert evaluate("r is failed or r is skipped", variables) is False
    assert evaluate("'gpu-01' is match('gpu-\\\\d+')", {}) is True
    assert evaluate("'node gpu-01' is search('gpu')", {}) is True
    assert evaluate("'node gpu-01' is regex('^gpu')", {}) is False
    assert evaluate("'yes' is truthy", {}) is True


@pytest.mark.parametrize(
    "expr",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ x.__globals__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ [].append(1) }}",
        "{{ {}.update(a=1) }}",
        "{{ x.__class__.__subclasses__() }}",
        "{{ range.__self__ }}",
        "{{ x._private }}",
    ],
)
def test_sandbox_refuses_escapes(expr: str) -> None:
    with pytest.raises(TemplateError, match="not allowed in the expression sandbox"):
        render(expr, {"x": 1})


def test_no_randomness_or_io_helpers_are_available() -> None:
    with pytest.raises(TemplateError):
        render("{{ lipsum() }}", {})
    with pytest.raises(TemplateError):
        render("{{ [1, 2] | random }}", {})
    with pytest.raises(TemplateError):
        render("{% include 'x' %}", {})


def test_syntax_checks_and_template_detection() -> None:
    assert is_template("a {{ b }}") and is_template("{% if a %}x{% endif %}") and not is_template("plain")
    check_syntax("a {{ b | default(1) }}")
    with pytest.raises(TemplateError, match="syntax"):
        check_syntax("{{ b ")
