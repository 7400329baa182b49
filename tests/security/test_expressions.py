"""Issue #13, expression budget: hostile expressions end quickly with a TemplateError naming the
limit they went over, in the render path the workflow uses and in `pitstop validate`.

Each probe runs in a child process with a memory limit and a deadline (`_bounded`): before the
budget, each of these froze or exhausted the whole worker. A probe that gets killed or times
out fails its test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.security._bounded import RenderChild, validate_in_child


@pytest.fixture(scope="module")
def child() -> Iterator[RenderChild]:
    renderer = RenderChild()
    yield renderer
    renderer.close()


DOUBLE = (
    "{%% set ns = namespace(s=%s) %%}{%% for i in range(64) %%}{%% set ns.s = %s %%}{%% endfor %%}{{ ns.s }}"
)

NEST = "{% set ns = namespace(x=1) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"

# (id, template, substrings of which the error must contain one)
REFUSED: list[tuple[str, str, tuple[str, ...]]] = [
    ("power-tower", "{{ 10**(10**7) }}", ("MAX_INT_BITS",)),
    ("big-product", "{{ (2**4000) * (2**4000) }}", ("MAX_INT_BITS",)),
    ("center", "{{ 'a' | center(10**9) }}", ("MAX_FORMAT_WIDTH",)),
    ("format-filter", "{{ '%0999999999d' | format(1) }}", ("MAX_FORMAT_WIDTH",)),
    ("percent-operator", "{{ '%0999999999d' % 1 }}", ("MAX_FORMAT_WIDTH",)),
    ("percent-star-width", "{{ '%*d' % (999999999, 1) }}", ("'*' widths",)),
    ("str-format-method", "{{ '{:>999999999}'.format(1) }}", ("MAX_FORMAT_WIDTH",)),
    ("ljust-method", "{{ 'a'.ljust(10**9) }}", ("MAX_FORMAT_WIDTH",)),
    ("to-bytes-method", "{{ (1).to_bytes(10**9, 'big') }}", ("MAX_FORMAT_WIDTH",)),
    ("indent", "{{ 'a' | indent(10**9) }}", ("MAX_FORMAT_WIDTH",)),
    ("round-huge-precision", "{{ 10 | round(-10**9) }}", ("MAX_FORMAT_WIDTH",)),
    ("batch-fill", "{{ [1] | batch(10**9, 'x') | list }}", ("MAX_FORMAT_WIDTH",)),
    ("double-with-tilde", DOUBLE % ("'ab'", "ns.s ~ ns.s"), ("MAX_STRING_LENGTH",)),
    ("double-with-plus", DOUBLE % ("'ab'", "ns.s + ns.s"), ("MAX_STRING_LENGTH",)),
    ("double-with-times", DOUBLE % ("'ab'", "ns.s * 2"), ("MAX_STRING_LENGTH",)),
    ("double-a-list", DOUBLE % ("[1]", "ns.s + ns.s"), ("MAX_LIST_LENGTH",)),
    ("repeat-a-list", "{{ [1] * 10**9 }}", ("MAX_LIST_LENGTH",)),
    ("replace-amplifies", "{{ ('a' * 1000) | replace('a', 'b' * 100000) }}", ("MAX_STRING_LENGTH",)),
    ("join-huge-list", "{{ (['x' * 1000000] * 100000) | join }}", ("MAX_STRING_LENGTH",)),
    ("urlencode-huge", "{{ (['x' * 1000000] * 100000) | urlencode }}", ("MAX_STRING_LENGTH",)),
    ("text-of-huge-list", "{{ ['x' * 1000000] * 100000 }} and more", ("MAX_STRING_LENGTH",)),
    ("result-of-huge-list", "{{ ['x' * 1000000] * 100000 }}", ("MAX_RESULT_SIZE",)),
    (
        "literal-in-a-loop",
        "{% for i in range(100000) %}" + "x" * 100 + "{% endfor %}",
        ("MAX_STRING_LENGTH",),
    ),
    (
        "nested-loops",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        ("MAX_RENDER_STEPS",),
    ),
    ("range-too-big", "{{ range(10**9) | list }}", ("MAX_RANGE",)),
    (
        "map-select-over-big-input",
        "{{ range(100000) | map('string') | select('match', '1') | map('center', 900) | list }}",
        ("MAX_RENDER_STEPS", "MAX_RENDER_WORK"),
    ),
    ("sum-of-lists", "{{ ([[1]] * 100000) | sum(start=[]) }}", ("MAX_RENDER_STEPS", "MAX_LIST_LENGTH")),
    (
        "scan-in-a-loop",
        "{% set b = 'x' * 1000000 %}{% for i in range(100000) %}{% if 'y' in b %}{% endif %}{% endfor %}",
        ("MAX_RENDER_WORK",),
    ),
    (
        "compare-huge-values",
        "{{ (['x' * 1000000] * 100000) == (['x' * 1000000] * 100000) }}",
        ("MAX_RENDER_WORK",),
    ),
    (
        "slice-in-a-loop",
        "{% set b = 'x' * 1000000 %}{% for i in range(100000) %}{% set c = b[1:] %}{% endfor %}",
        ("MAX_RENDER_WORK",),
    ),
    (
        "tojson-deep",
        NEST + "{{ ns.x | tojson }}",
        ("MAX_VALUE_DEPTH",),
    ),
    (
        "deep-result",
        NEST + "{{ ns.x }}",
        ("MAX_VALUE_DEPTH",),
    ),
    ("recursive-macro", "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", ("MAX_CALL_DEPTH",)),
    (
        "branching-macro",
        "{% macro f(n) %}{% if n > 0 %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(40) }}",
        ("MAX_RENDER_STEPS",),
    ),
    (
        "recursive-call-block",
        "{% macro m() %}{{ caller() }}{% endmacro %}{% macro r() %}{% call m() %}{{ r() }}{% endcall %}"
        "{% endmacro %}{{ r() }}",
        ("MAX_CALL_DEPTH",),
    ),
    ("recursive-loop", "{% for x in ['a' * 100] recursive %}{{ loop(x) }}{% endfor %}", ("MAX_CALL_DEPTH",)),
    ("big-integer-from-text", "{{ ('1' * 100000) | int(base=2) }}", ("MAX_INT_BITS",)),
    ("cycler-object", "{{ cycler(1, 2) }}", ("a cycler",)),
    ("joiner-object", "{{ joiner() }}", ("a joiner",)),
    ("namespace-object", "{{ namespace(a=1) }}", ("a namespace",)),
    ("self-reference", "{{ self }}", ("'self'",)),
    ("macro-object", "{% macro m() %}{% endmacro %}{{ m }}", ("a macro",)),
    # Written into text, these would carry a memory address: a run and its replay would differ.
    ("cycler-in-text", "cycle: {{ cycler(1, 2) }}", ("a cycler",)),
    ("generator-address", "{{ '%s' % (cycler(1),) }}", ("a cycler",)),
    ("dunder-class", "{{ ''.__class__.__mro__ }}", ("not allowed in the expression sandbox",)),
    ("underscore-attribute", "{{ cycler(1)._items }}", ("not allowed in the expression sandbox",)),
    ("infinity", "{{ 1e308 * 10 }}", ("JSON cannot carry",)),
    ("backreference", "{{ 'aa' | regex_search('(a)\\\\1') }}", ("RE2", "backreferences")),
    ("lookahead", "{{ 'ab' is search('a(?=b)') }}", ("RE2", "lookaround")),
    ("long-pattern", "{{ 'a' | regex_search('a' * 5000) }}", ("MAX_REGEX_LENGTH",)),
]


@pytest.mark.parametrize(("template", "expected"), [p[1:] for p in REFUSED], ids=[p[0] for p in REFUSED])
def test_hostile_expression_is_refused_naming_the_limit(
    child: RenderChild, template: str, expected: tuple[str, ...]
) -> None:
    outcome = child.render(template)
    assert "error" in outcome, f"rendered instead of refused: {str(outcome)[:300]}"
    assert outcome["type"] in ("TemplateError", "LimitError")
    assert any(word in outcome["error"] for word in expected), outcome["error"]


# Probes that are not errors: they must simply end, with the plain JSON value Ansible gives.
RENDERED: list[tuple[str, str, Any]] = [
    # Catastrophic backtracking under Python's re; RE2 matches in linear time.
    ("redos-pattern", "{{ ('a' * 100000 ~ '!') | regex_search('(a+)+$') }}", None),
    ("redos-test", "{{ ('a' * 100000 ~ '!') is match('^(a|aa)+$') }}", False),
    ("dict-keys", "{{ d.keys() }}", ["a", "b"]),
    ("dict-values", "{{ d.values() }}", [1, 2]),
    ("dict-items", "{{ d.items() }}", [["a", 1], ["b", 2]]),
    ("range", "{{ range(3) }}", [0, 1, 2]),
    ("lazy-map", "{{ d.keys() | map('upper') }}", ["A", "B"]),
    ("tuple", "{{ (1, 2) }}", [1, 2]),
    ("markup", "{{ 'x' | safe }}", "x"),
    ("fleet-group", "{{ groups['gpu_fleet'] | length }}", 10000),
    (
        "fleet-domains",
        "{{ groups['gpu_fleet'] | map('extract', hostvars, 'failure_domain') | unique | sort }}",
        [f"zone-{i}" for i in range(10)],
    ),
    (
        "fleet-loop",
        "{% for h in groups['gpu_fleet'] %}{{ hostvars[h].failure_domain[-1] }}{% endfor %}",
        "".join(str(i % 10) for i in range(10000)),
    ),
    ("quote", '{{ "it\'s; rm -rf /" | quote }}', "'it'\"'\"'s; rm -rf /'"),
    # A lazy sequence written into text is the list it gives, not "<generator object at 0x..>".
    ("lazy-map-in-text", "keys: {{ d.keys() | map('upper') }}", "keys: ['A', 'B']"),
]


@pytest.mark.parametrize(("template", "value"), [p[1:] for p in RENDERED], ids=[p[0] for p in RENDERED])
def test_expression_renders_plain_data(child: RenderChild, template: str, value: Any) -> None:
    outcome = child.render(template)
    assert outcome == {"value": value}, str(outcome)[:300]


# `pitstop validate` evaluates expressions that use no variable (bounded, like a run), so it
# refuses these with the place in the file; before, constant folding hung it.
VALIDATE = [
    p
    for p in REFUSED
    if p[0]
    in {
        "power-tower",
        "center",
        "format-filter",
        "percent-operator",
        "double-with-tilde",
        "nested-loops",
        "join-huge-list",
        "recursive-macro",
        "cycler-object",
        "backreference",
        "branching-macro",
        "deep-result",
    }
]


def _runbook(path: Path, template: str) -> Path:
    body = "\n".join("        " + line for line in template.splitlines())
    path.write_text(
        "name: probe\nhosts: localhost\ntasks:\n  - name: probe\n    debug:\n      msg: |-\n" + body + "\n"
    )
    return path


@pytest.mark.parametrize(("template", "expected"), [p[1:] for p in VALIDATE], ids=[p[0] for p in VALIDATE])
def test_validate_refuses_the_expression_quickly(
    tmp_path: Path, template: str, expected: tuple[str, ...]
) -> None:
    runbook = _runbook(tmp_path / "probe.yaml", template)
    done = validate_in_child(runbook)
    assert done.returncode == 1, done.stdout + done.stderr
    message = done.stderr.strip()
    assert message.startswith(f"{runbook}:6:"), message
    assert "uses no variable and fails when evaluated" in message
    assert any(word in message for word in expected), message


def test_validate_leaves_expressions_with_variables_to_the_run(tmp_path: Path) -> None:
    # The same width from a variable is only known at run time: validate accepts the runbook,
    # the run's render refuses it (above).
    runbook = _runbook(tmp_path / "probe.yaml", "{{ inventory_hostname | center(10**9) }}")
    done = validate_in_child(runbook)
    assert done.returncode == 0, done.stdout + done.stderr
