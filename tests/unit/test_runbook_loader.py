"""The YAML loader keeps positions, and errors print as path:line:col: message."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pitstop.runbook import RunbookError
from pitstop.runbook._yaml import parse_yaml
from pitstop.runbook.durations import parse_duration


def test_loader_records_key_value_and_item_positions() -> None:
    doc = parse_yaml("name: x\nstages:\n  - name: a\n    hosts: [h1, h2]\n", "rb.yaml")
    assert doc.data == {"name": "x", "stages": [{"name": "a", "hosts": ["h1", "h2"]}]}
    assert doc.key_pos[("stages",)] == (2, 1)
    assert doc.value_pos[("stages", 0)] == (3, 5)
    assert doc.key_pos[("stages", 0, "hosts")] == (4, 5)
    assert doc.value_pos[("stages", 0, "hosts", 1)] == (4, 17)


def test_loader_returns_plain_python_types() -> None:
    doc = parse_yaml("a: 1.5\nb: [1, {c: true}]\n", "f.yaml")
    assert type(doc.data) is dict and type(doc.data["b"]) is list and type(doc.data["a"]) is float


def test_duplicate_key_is_an_error_at_the_second_key() -> None:
    with pytest.raises(RunbookError) as info:
        parse_yaml("a: 1\nb: 2\na: 3\n", "f.yaml")
    assert (info.value.line, info.value.column) == (3, 1)
    assert "duplicate key 'a'" in info.value.message


def test_syntax_error_reports_ruamels_position() -> None:
    with pytest.raises(RunbookError) as info:
        parse_yaml("a: [1, 2\nb: 3\n", "f.yaml")
    assert str(info.value).startswith("f.yaml:")
    assert "YAML syntax error" in str(info.value)


def test_error_string_has_position_and_suggestion() -> None:
    err = RunbookError("unknown key 'serail' in stage", path="rb.yaml", line=4, column=5, suggestion="serial")
    assert str(err) == "rb.yaml:4:5: unknown key 'serail' in stage (did you mean 'serial'?)"
    assert str(RunbookError("bad", path="p", line=1, column=2)) == "p:1:2: bad"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("4h", 14400),
        ("1d", 86400),
        ("1h30m", 5400),
        (12, 12),
        (2.5, 2.5),
        ("45", 45),
    ],
)
def test_durations_accept_units_combinations_and_numbers(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["4 hours", "h", "", "-5", "10x", True, None])
def test_durations_refuse_other_forms(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_models_are_frozen() -> None:
    from pitstop.runbook import Rolling

    rolling = Rolling(max_in_flight="10%")
    with pytest.raises(ValidationError):
        rolling.max_in_flight = 2  # type: ignore[misc]
