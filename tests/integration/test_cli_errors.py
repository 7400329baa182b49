"""Every error of `pitstop run | status | approve | pause ...` on bad input is one line on
stderr saying what is wrong and what to do (CliRunner, against the session's Temporal where
the error needs one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pitstop.cli.app import build_app
from pitstop.devstack import DevStack


def pitstop(*argv: str) -> tuple[int, str]:
    """(exit code, stderr) of `pitstop ARGV`, asserting the error is exactly one line."""
    result = CliRunner().invoke(build_app(["run"]), list(argv))
    lines = result.stderr.splitlines()
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert len(lines) == 1, lines
    return result.exit_code, lines[0]


@pytest.fixture
def runbook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "hello.yaml"
    path.write_text("name: hello\nhosts: localhost\ntasks:\n  - debug: {msg: hi}\n")
    return path


@pytest.fixture
def at_stack(stack: DevStack, monkeypatch: pytest.MonkeyPatch) -> DevStack:
    monkeypatch.setenv("TEMPORAL_ADDRESS", stack.temporal_address)
    monkeypatch.setenv("PITSTOP_UI_URL", stack.ui_url)
    return stack


def test_an_unknown_run_id_says_so_and_where_to_find_runs(at_stack: DevStack) -> None:
    where = (
        f"no run 'nope-123' in namespace 'default' at {at_stack.temporal_address}: check the id that "
        "`pitstop run` printed (runs are listed in the Temporal UI, "
        f"{at_stack.ui_url}/namespaces/default/workflows)"
    )
    assert pitstop("status", "nope-123") == (1, f"error: {where}")
    assert pitstop("pause", "nope-123") == (1, f"error: {where}")
    assert pitstop("approve", "nope-123", "--gate", "g") == (1, f"error: {where}")


def test_an_unreachable_temporal_is_one_line_with_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
    assert pitstop("status", "any") == (
        1,
        "error: cannot reach Temporal at 127.0.0.1:1 (is `pitstop dev up` running?): Connection refused; "
        "or set TEMPORAL_ADDRESS to your Temporal's host:port",
    )


def test_a_missing_runbook_or_inventory_names_the_path_and_the_directory(
    runbook: Path, tmp_path: Path
) -> None:
    assert pitstop("run", "nope.yaml") == (
        1,
        f"error: runbook nope.yaml does not exist (relative to {tmp_path}): check the path, or use "
        "--on-worker for one in the worker's directory",
    )
    assert pitstop("run", str(runbook), "-i", "inv.yaml") == (
        1,
        f"error: inventory inv.yaml does not exist (relative to {tmp_path}): check the path given to -i",
    )
    assert pitstop("run", ".") == (1, "error: runbook . is a directory: give the runbook file itself")


def test_bad_extra_vars_say_which_form_is_expected(runbook: Path, tmp_path: Path) -> None:
    assert pitstop("run", str(runbook), "-e", "version") == (
        1,
        "error: -e 'version': expected key=value or @file.json",
    )
    assert pitstop("run", str(runbook), "-e", "@vars.json") == (
        1,
        "error: -e @vars.json: cannot read vars.json: No such file or directory; give the path of a JSON "
        "file after @",
    )
    (tmp_path / "list.json").write_text(json.dumps([1, 2]))
    assert pitstop("run", str(runbook), "-e", "@list.json") == (
        1,
        "error: -e @list.json: list.json holds a JSON list; write an object of variables",
    )
    (tmp_path / "bad.json").write_text("{version: 2}")
    code, said = pitstop("run", str(runbook), "-e", "@bad.json")
    assert code == 1 and said.startswith("error: -e @bad.json: bad.json is not JSON (Expecting property name")
    assert said.endswith('write an object such as {"version": "2.1.0"}')


def test_an_unusable_vote_key_file_says_how_to_make_one(
    at_stack: DevStack, runbook: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "vote.key").write_text("not a key\n")
    monkeypatch.delenv("PITSTOP_VOTE_KEY", raising=False)
    monkeypatch.setenv("PITSTOP_VOTE_KEY_FILE", str(tmp_path / "vote.key"))
    code, said = pitstop("approve", "any-run", "--gate", "g")
    assert code == 1
    assert said.startswith(
        f"error: the vote key from PITSTOP_VOTE_KEY_FILE={tmp_path / 'vote.key'} is not hexadecimal"
    )
    assert "create one with `pitstop keys new" in said
