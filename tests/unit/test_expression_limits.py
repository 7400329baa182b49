"""The expression budget in-process: what each limit allows and refuses, no constant folding,
plain JSON results, RE2 regexes and the `quote` filter. (The hostile probes themselves run in
a bounded child process: tests/security/test_expressions.py.)"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pitstop.runbook import _limits
from pitstop.runbook.templating import (
    LIMITS,
    LimitError,
    TemplateError,
    _environment,
    check_expression,
    check_syntax,
    evaluate_bool,
    probing_constants,
    render,
)


def test_limits_are_named_and_documented() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "runbook-language.md").read_text(encoding="utf-8")
    for name, value in LIMITS.items():
        assert getattr(_limits, name) == value
        assert f"`{name}`" in docs, f"{name} is not documented in docs/runbook-language.md"


def test_user_constants_are_not_folded_at_compile_time() -> None:
    # Folded, the generated code would hold 'AB' and 3; kept, it calls the filter and the
    # operator when rendering (under the budget).
    code = _environment().compile("{{ 'ab' | upper }} {{ 1 + 2 }} {{ 'x' ~ 'y' }}", raw=True)
    assert "'AB'" not in code and "'xy'" not in code
    assert "environment.call_binop" in code and "environment.budget_concat" in code
    # So checking syntax never evaluates: this would be refused if it were evaluated.
    check_syntax("{{ 'a' | center(10**9) }}")
    check_expression("10 ** (10 ** 7) > 1")


def test_validation_probes_only_expressions_without_variables() -> None:
    with probing_constants():
        with pytest.raises(
            TemplateError, match=r"uses no variable and fails when evaluated.*MAX_FORMAT_WIDTH"
        ):
            check_syntax("{{ 'a' | center(10**9) }}")
        with pytest.raises(TemplateError, match="MAX_INT_BITS"):
            check_expression("10 ** (10 ** 7) > 1")
        check_syntax("{{ width | default(10**9) }}")  # depends on a variable: left to the run
        check_syntax("{{ range(3) | list }} fine")


def test_limits_allow_what_real_runbooks_do() -> None:
    hosts = [f"gpu-{i:05d}" for i in range(10_000)]
    variables = {
        "groups": {"gpu_fleet": hosts},
        "hostvars": {h: {"failure_domain": f"zone-{i % 8}"} for i, h in enumerate(hosts)},
    }
    assert render("{{ groups['gpu_fleet'] }}", variables) == hosts
    assert render("{{ groups['gpu_fleet'] | join(',') }}", variables) == ",".join(hosts)
    domains = render(
        "{{ groups['gpu_fleet'] | map('extract', hostvars, 'failure_domain') | unique | sort }}", variables
    )
    assert domains == [f"zone-{i}" for i in range(8)]
    assert evaluate_bool("groups['gpu_fleet'] | select('match', 'gpu-0999') | list | length == 10", variables)
    assert render("{{ 2 ** 64 }}", {}) == 2**64
    assert render("{{ '%08.3f' | format(3.14159) }}", {}) == "0003.142"
    assert render("{{ 'x' | center(20) }}", {}) == "x".center(20)


def test_every_render_has_its_own_budget() -> None:
    # Each render may take most of the step budget; the next one starts afresh.
    loop = "{% for i in range(100000) %}{% endfor %}done"
    assert render(loop, {}) == "done"
    assert render(loop, {}) == "done"
    # One render of two such loops goes over it (a task's arguments share one budget).
    with pytest.raises(LimitError, match="MAX_RENDER_STEPS"):
        render({"a": loop, "b": loop}, {})


def test_the_same_expression_fails_the_same_way_every_time() -> None:
    # Counters, not clocks: a replay sees exactly the same outcome.
    messages = set()
    for _ in range(3):
        with pytest.raises(LimitError) as caught:
            render("{% for i in range(100000) %}{% for j in range(3) %}{% endfor %}{% endfor %}", {})
        messages.add(str(caught.value))
    assert len(messages) == 1


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("{{ d.keys() }}", ["a", "b"]),
        ("{{ d.items() }}", [["a", 1], ["b", 2]]),
        ("{{ range(2, 5) }}", [2, 3, 4]),
        ("{{ d.values() | map('string') }}", ["1", "2"]),
        ("{{ (1, [2, (3,)]) }}", [1, [2, [3]]]),
        ("{{ {2: 'a', none: 'b', true: 'c'} }}", {"2": "a", "null": "b", "true": "c"}),
        ("{{ 'x' | safe }}", "x"),
    ],
)
def test_results_are_plain_json(expression: str, value: Any) -> None:
    result = render(expression, {"d": {"a": 1, "b": 2}})
    assert result == value
    assert type(result) is type(value)


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        ("{{ cycler(1, 2) }}", "a cycler"),
        ("{{ joiner(',') }}", "a joiner"),
        ("{{ namespace(a=1) }}", "a namespace"),
        ("{{ self }}", "'self'"),
        ("{{ 'x'.encode() }}", "a Python bytes"),
        ("{{ 1e308 * 10 }}", "JSON cannot carry"),
    ],
)
def test_values_without_a_json_form_are_refused_by_type(expression: str, named: str) -> None:
    with pytest.raises(TemplateError, match=named):
        render(expression, {})


def test_undefined_inside_a_result_names_what_is_missing() -> None:
    with pytest.raises(TemplateError, match="no attribute 'name'"):
        render("{{ items | map(attribute='name') }}", {"items": [{"id": 1}]})


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("{{ 'Node-07' | regex_search('node-(\\\\d+)', '\\\\1', ignorecase=True) }}", ["07"]),
        ("{{ 'a1b22' | regex_findall('\\\\d+') }}", ["1", "22"]),
        ("{{ 'k=v' | regex_findall('(\\\\w)=(\\\\w)') }}", [["k", "v"]]),
        ("{{ 'v1.31.2' | regex_replace('^v(?P<major>\\\\d+)\\\\..*$', '\\\\g<major>') }}", "1"),
        ("{{ 'aaa' | regex_replace('a', 'b', count=2) }}", "bba"),
        ("{{ 'x\\ny' | regex_findall('^\\\\w$', multiline=True) }}", ["x", "y"]),
        ("{{ 'gpu-01' is match('gpu-\\\\d+') }}", True),
        ("{{ 'my gpu-01' is match('gpu') }}", False),
        ("{{ 'my gpu-01' is search('gpu') }}", True),
        ("{{ 'a.b' | regex_escape }}", "a\\.b"),
    ],
)
def test_regex_filters_keep_ansible_semantics_on_re2(expression: str, value: Any) -> None:
    assert render(expression, {}) == value


def test_patterns_re2_cannot_run_are_refused_saying_why() -> None:
    with pytest.raises(TemplateError, match=r"not supported.*RE2.*backreferences"):
        render("{{ 'aa' | regex_replace('(a)\\\\1', 'b') }}", {})


@given(st.one_of(st.text(max_size=40), st.integers(), st.none()))
def test_quote_is_shlex_quote_as_in_ansible(value: Any) -> None:
    quoted = render("{{ v | quote }}", {"v": value})
    assert quoted == shlex.quote("" if value is None else str(value))
    assert shlex.split(f"echo {quoted}")[1:] == ["" if value is None else str(value)]


def test_quote_in_a_command_keeps_one_argument() -> None:
    command = render("ls {{ path | quote }}", {"path": "/tmp/a b; rm -rf /"})
    assert command == "ls '/tmp/a b; rm -rf /'"
    assert shlex.split(command) == ["ls", "/tmp/a b; rm -rf /"]
