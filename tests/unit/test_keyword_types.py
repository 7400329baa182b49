"""`pitstop validate` refuses a task keyword whose value has the wrong type, at load time and at
the value's file:line:col (Ansible finds these only when the task runs). One test per class of
keyword, asserting the one line a person reads on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pitstop.cli.app import build_app
from pitstop.runbook.keyword_types import KEYWORD_RULES
from pitstop.runbook.tasks import TASK_KEYWORDS


def validate(tmp_path: Path, *task_lines: str, module: str = "debug: {msg: hi}") -> tuple[int, str]:
    """`pitstop validate rb.yaml` of a runbook whose one task is `module` plus `task_lines`."""
    path = tmp_path / "rb.yaml"
    lines = [
        "name: t",
        "hosts: localhost",
        "tasks:",
        f"  - {module}",
        *(f"    {line}" for line in task_lines),
    ]
    path.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(build_app(["runbook"]), ["validate", str(path)])
    return result.exit_code, result.stderr.strip().replace(f"{tmp_path}/", "")


def test_every_keyword_the_parser_accepts_has_a_type_rule() -> None:
    assert set(KEYWORD_RULES) == set(TASK_KEYWORDS)


def test_a_count_keyword_takes_a_whole_number(tmp_path: Path) -> None:
    assert validate(tmp_path, 'retries: "three"') == (
        1,
        "rb.yaml:5:14: 'retries' must be a whole number (0 or more), got the string 'three'",
    )
    assert validate(tmp_path, "retries: true")[1].endswith("got the boolean true")


def test_a_condition_keyword_takes_expressions(tmp_path: Path) -> None:
    expected = 'an expression (a string such as "x > 1", or true/false) or a list of them'
    assert validate(tmp_path, "when: 5") == (1, f"rb.yaml:5:11: 'when' must be {expected}, got the number 5")
    assert validate(tmp_path, "changed_when: [ok, 1]") == (
        1,
        f"rb.yaml:5:24: 'changed_when' must be {expected}, got the number 1 in the list",
    )
    assert validate(tmp_path, "until: {done: true}", "retries: 3") == (
        1,
        "rb.yaml:5:12: 'until' must be an expression (a string such as \"x > 1\"), got a mapping",
    )


def test_loop_takes_a_list_or_a_template(tmp_path: Path) -> None:
    assert validate(tmp_path, "loop: 3") == (
        1,
        "rb.yaml:5:11: 'loop' must be a list, or a template that renders one "
        "(e.g. \"{{ groups['gpu'] }}\"), got the number 3",
    )


def test_a_switch_keyword_takes_true_or_false(tmp_path: Path) -> None:
    assert validate(tmp_path, 'ignore_errors: "yes please"') == (
        1,
        "rb.yaml:5:20: 'ignore_errors' must be true or false, got the string 'yes please'",
    )
    for keyword in ("run_once", "check_mode"):
        code, said = validate(tmp_path, f"{keyword}: maybe")
        assert code == 1 and said.endswith(f"'{keyword}' must be true or false, got the string 'maybe'")


def test_register_and_loop_var_take_a_variable_name(tmp_path: Path) -> None:
    name = "a variable name (letters, digits and _, not starting with a digit)"
    assert validate(tmp_path, "register: [x]") == (1, f"rb.yaml:5:15: 'register' must be {name}, got a list")
    assert validate(tmp_path, "loop: [1]", "loop_control: {loop_var: 5}") == (
        1,
        f"rb.yaml:6:30: 'loop_control.loop_var' must be {name}, got the number 5",
    )


def test_a_duration_keyword_takes_a_duration(tmp_path: Path) -> None:
    duration = "a duration of 0 or more: a number of seconds or e.g. '90s', '30m', '1h30m'"
    assert validate(tmp_path, "retries: 2", "delay: -1") == (
        1,
        f"rb.yaml:6:12: 'delay' must be {duration}, got the number -1",
    )
    assert validate(tmp_path, "timeout: [1]") == (
        1,
        f"rb.yaml:5:14: 'timeout' must be {duration}, got a list",
    )


def test_a_names_keyword_takes_a_name_or_a_list_of_names(tmp_path: Path) -> None:
    assert validate(tmp_path, "tags: {a: 1}") == (
        1,
        "rb.yaml:5:11: 'tags' must be a name or a list of names, got a mapping",
    )
    assert validate(tmp_path, "notify: [restart, 2]") == (
        1,
        "rb.yaml:5:23: 'notify' must be a name or a list of names, got the number 2 in the list",
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("name: [a]", "rb.yaml:4:11: 'name' must be a string, got a list"),
        ("delegate_to: 5", "rb.yaml:5:18: 'delegate_to' must be a string, got the number 5"),
        ("vars: [a]", "rb.yaml:5:11: 'vars' must be a mapping, got a list"),
        ("loop_control: 5", "rb.yaml:5:19: 'loop_control' must be a mapping, got the number 5"),
    ],
)
def test_a_text_or_mapping_keyword_takes_its_type(tmp_path: Path, line: str, message: str) -> None:
    if line.startswith("name:"):
        assert validate(tmp_path, "debug: {msg: hi}", module=line) == (1, message)
    else:
        assert validate(tmp_path, line) == (1, message)


def test_a_task_list_keyword_and_an_import_take_their_types(tmp_path: Path) -> None:
    assert validate(tmp_path, module="block: {debug: x}") == (
        1,
        "rb.yaml:4:12: 'block' must be a list of tasks, got a mapping",
    )
    assert validate(tmp_path, module="import_tasks: [a.yaml]") == (
        1,
        "rb.yaml:4:19: 'import_tasks' must be the path of a task file, got a list",
    )
    assert validate(tmp_path, "tags: 5", module="import_tasks: x.yaml")[1] == (
        "rb.yaml:5:11: 'tags' must be a name or a list of names, got the number 5"
    )


def test_an_ansible_keyword_pitstop_does_not_have_is_named(tmp_path: Path) -> None:
    code, said = validate(tmp_path, "become: maybe")
    assert code == 1 and said.startswith("rb.yaml:5:5: unknown task keyword or module 'become'")


def test_what_ansible_accepts_still_loads(tmp_path: Path) -> None:
    code, said = validate(
        tmp_path,
        "when: true",
        "changed_when: false",
        'ignore_errors: "yes"',
        "loop: \"{{ groups['all'] }}\"",
        'retries: "3"',
        "delay: 90s",
        "until: done",
        "tags: slow",
        "register: out",
    )
    assert (code, said) == (0, "")
