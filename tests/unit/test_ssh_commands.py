"""The shell text pitstop sends: quoting, chdir, become, timeout, and the firmware apply line.

The built commands are run here by a local `sh`, exactly as a host's shell would run them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pitstop.ssh.commands import TIMEOUT_RC, display, shell_command
from pitstop.ssh.protocol import FirmwareFiles, apply_command, marker_line, parse_apply, unwrap_become


def _sh(command: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=cwd, timeout=30)


def test_a_command_without_options_is_sent_verbatim() -> None:
    assert shell_command("nvidia-smi -q | grep -i ecc") == "nvidia-smi -q | grep -i ecc"


def test_a_list_command_reaches_the_program_as_exact_arguments() -> None:
    built = shell_command(["printf", "%s|", "a b", "$(id)", "*", "it's"])
    assert _sh(built).stdout == "a b|$(id)|*|it's|"


def test_chdir_is_quoted(tmp_path: Path) -> None:
    odd = tmp_path / "dir with 'quote' and space"
    odd.mkdir()
    assert _sh(shell_command("pwd", chdir=str(odd))).stdout == f"{odd}\n"


def test_timeout_wrapper_ends_the_command_with_rc_124() -> None:
    result = _sh(shell_command("sleep 20", timeout_s=0.3))
    # rc 124 is timeout(1)'s: the wrapper, not sleep's own end (rc 0), finished the command.
    assert result.returncode == TIMEOUT_RC


@pytest.mark.skipif(shutil.which("sudo") is None, reason="sudo not installed")
def test_become_user_runs_the_command_as_that_user() -> None:
    result = _sh(shell_command("id -un; pwd", become=True, become_user="nobody", chdir="/"))
    assert result.stdout == "nobody\n/\n", result.stderr


def test_become_wrapper_is_undone_by_unwrap_become() -> None:
    built = shell_command("cat /etc/os-release | head -1", become=True)
    assert built.startswith("sudo -n -- sh -c ")
    assert unwrap_become(built) == "cat /etc/os-release | head -1"
    assert unwrap_become("uname -r") == "uname -r"


def test_display_quotes_and_shortens() -> None:
    assert display(["echo", "a b"]) == "\"echo 'a b'\""
    assert len(display("x" * 500)) <= 202


@pytest.mark.parametrize("become", [False, True])
def test_apply_command_round_trips_through_parse_apply(become: bool) -> None:
    files = FirmwareFiles("/var/lib/pitstop", "96.00.9F.00.04")
    line = marker_line("0f3c-boot", "run-7", "stage/0/task/3", "96.00.9F.00.04")
    request = parse_apply(apply_command(files, "pitstop-fwupdate", line, become=become))
    assert request is not None
    assert request.image == "/var/lib/pitstop/firmware-96.00.9F.00.04.img"
    assert request.marker == files.marker and request.rc == files.rc and request.log == files.log
    assert request.updater == "pitstop-fwupdate"
    assert request.marker_line == "pid=$$ boot=0f3c-boot run=run-7 task=stage/0/task/3 target=96.00.9F.00.04"


def test_apply_command_runs_marker_then_updater_and_records_its_exit_status(tmp_path: Path) -> None:
    updater = tmp_path / "fwtool"
    updater.write_text('#!/bin/sh\necho "flashing $2"\nexit 5\n')
    updater.chmod(0o755)
    files = FirmwareFiles(str(tmp_path), "2.0")
    result = _sh(apply_command(files, str(updater), marker_line("b", "r", "t", "2.0")))
    assert result.returncode == 5
    marker = Path(files.marker).read_text()
    assert marker.startswith("pid=") and marker.split()[0][4:].isdigit()
    assert Path(files.rc).read_text() == "5\n"
    assert Path(files.log).read_text() == f"flashing {files.image}\n"


def test_unsafe_updater_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="unsafe"):
        apply_command(FirmwareFiles("/tmp/x; rm -rf /", "1.0"), "pitstop-fwupdate", "pid=$$")


def test_parse_apply_ignores_other_commands() -> None:
    assert parse_apply("uname -r") is None
    assert parse_apply("sh -c 'echo hi'") is None
    assert parse_apply("sh -c 'unbalanced") is None
