"""A usage error (missing argument, unknown option or command) is one line naming the
command's --help, where click would draw a box; help and exit codes stay as they were."""

from __future__ import annotations

from typer.testing import CliRunner

from pitstop.cli.app import build_app


def test_a_missing_argument_is_one_line_naming_the_commands_help() -> None:
    result = CliRunner().invoke(build_app(["run"]), ["status"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["error: Missing argument 'run_id'. (see `pitstop status --help`)"]


def test_an_unknown_option_or_command_is_one_line() -> None:
    option = CliRunner().invoke(build_app(["run"]), ["approve", "run-1", "--bogus"])
    assert (option.exit_code, option.stderr.splitlines()) == (
        2,
        ["error: No such option: --bogus (see `pitstop approve --help`)"],
    )
    command = CliRunner().invoke(build_app(), ["bogus"])
    assert (command.exit_code, command.stderr.splitlines()) == (
        2,
        ["error: No such command 'bogus'. (see `pitstop --help`)"],
    )


def test_help_and_a_commands_own_exit_code_are_unchanged() -> None:
    helped = CliRunner().invoke(build_app(["run"]), ["status", "--help"])
    assert helped.exit_code == 0 and "Usage: pitstop status" in helped.stdout
    version = CliRunner().invoke(build_app([]), ["version"])
    assert version.exit_code == 0 and version.stdout.strip()
    refused = CliRunner().invoke(build_app(["run"]), ["run", "missing.yaml"])
    assert refused.exit_code == 1 and refused.stderr.startswith("error: runbook missing.yaml does not exist")
