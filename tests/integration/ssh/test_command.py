"""ssh.command and ssh.script against a real sshd on loopback."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from activities.ssh import ssh_command, ssh_script
from pitstop.contracts import MAX_FIELD_BYTES
from tests.integration.ssh.lab import SshLab
from tests.sshd import process_alive


def _scratch(lab: SshLab) -> Path:
    path = lab.base / f"scratch-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    return path


def test_command_reports_rc_stdout_and_stderr(lab: SshLab) -> None:
    result = lab.run(ssh_command, lab.call("ssh.command", {"cmd": "echo out; echo err >&2; exit 3"}))
    assert (result.rc, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert result.failed and result.changed
    assert result.msg == "non-zero return code"


def test_command_given_as_a_list_is_passed_as_exact_arguments(lab: SshLab) -> None:
    result = lab.run(ssh_command, lab.call("ssh.command", {"cmd": ["printf", "%s|", "a b", "$HOME", "*"]}))
    assert not result.failed
    assert result.stdout == "a b|$HOME|*|"


def test_command_string_runs_through_the_shell_in_chdir(lab: SshLab) -> None:
    scratch = _scratch(lab)
    result = lab.run(ssh_command, lab.call("ssh.command", {"cmd": "pwd | tr a-z A-Z", "chdir": str(scratch)}))
    assert result.stdout == f"{str(scratch).upper()}\n"


def test_output_kept_in_the_result_is_bounded(lab: SshLab) -> None:
    result = lab.run(ssh_command, lab.call("ssh.command", {"cmd": "head -c 300000 /dev/zero | tr '\\0' a"}))
    assert result.rc == 0
    assert result.stdout is not None
    assert len(result.stdout.encode()) <= MAX_FIELD_BYTES
    assert result.stdout.startswith("a" * 1000)
    assert result.stdout.endswith(f"[{300000 - (MAX_FIELD_BYTES - 256)} more bytes not kept by pitstop]")


def test_timeout_kills_the_command_and_its_children_on_the_host(lab: SshLab) -> None:
    scratch = _scratch(lab)
    pids = scratch / "pids"
    # The shell starts a child and records both pids, then waits far past the timeout.
    cmd = f"sleep 300 & echo $$ $! > {pids}; wait"
    result = lab.run(ssh_command, lab.call("ssh.command", {"cmd": cmd, "timeout": 1}))
    assert result.failed
    assert result.rc == 124
    assert result.data["timed_out"] is True
    assert "timed out after 1s" in result.msg and "killed on the host" in result.msg
    shell_pid, sleep_pid = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (process_alive(shell_pid) or process_alive(sleep_pid)):
        time.sleep(0.05)
    assert not process_alive(shell_pid), "the remote shell survived the timeout"
    assert not process_alive(sleep_pid), "the remote command's child survived the timeout"


def test_creates_skips_the_command_when_the_path_exists(lab: SshLab) -> None:
    scratch = _scratch(lab)
    (scratch / "done").write_text("")
    witness = scratch / "ran"
    args = {"cmd": f"touch {witness}", "creates": str(scratch / "done")}
    result = lab.run(ssh_command, lab.call("ssh.command", args))
    assert not result.changed and not result.failed
    assert "since" in result.msg and "exists" in result.msg
    assert not witness.exists()


def test_creates_runs_the_command_once_then_reports_unchanged(lab: SshLab) -> None:
    scratch = _scratch(lab)
    marker = scratch / "marker"
    args = {"cmd": f"echo run >> {scratch / 'log'}; touch {marker}", "creates": str(marker)}
    first = lab.run(ssh_command, lab.call("ssh.command", args))
    second = lab.run(ssh_command, lab.call("ssh.command", args))
    assert first.changed and not second.changed
    assert (scratch / "log").read_text() == "run\n"


def test_removes_runs_only_when_the_path_exists(lab: SshLab) -> None:
    scratch = _scratch(lab)
    target = scratch / "stale"
    args = {"cmd": f"rm {target}", "removes": str(target)}
    skipped = lab.run(ssh_command, lab.call("ssh.command", args))
    target.write_text("x")
    ran = lab.run(ssh_command, lab.call("ssh.command", args))
    assert not skipped.changed and "does not exist" in skipped.msg
    assert ran.changed and not target.exists()


def test_become_runs_the_command_through_sudo(lab: SshLab) -> None:
    as_root = lab.run(ssh_command, lab.call("ssh.command", {"cmd": "id -un", "become": True}))
    as_nobody = lab.run(
        ssh_command, lab.call("ssh.command", {"cmd": "id -un", "become": True, "become_user": "nobody"})
    )
    assert as_root.stdout == "root\n"
    assert as_nobody.stdout == "nobody\n"


def test_command_in_check_mode_is_skipped_without_running(lab: SshLab) -> None:
    scratch = _scratch(lab)
    result = lab.run(ssh_command, lab.call("ssh.command", {"cmd": f"touch {scratch / 'x'}"}, check_mode=True))
    assert result.skipped and not result.changed
    assert "check_mode: false" in result.msg
    assert not (scratch / "x").exists()


def test_invalid_arguments_are_refused_with_the_field_named(lab: SshLab) -> None:
    from temporalio.exceptions import ApplicationError

    with pytest.raises(ApplicationError) as err:
        lab.run(ssh_command, lab.call("ssh.command", {"cmd": "true", "timeout": "soon"}))
    assert err.value.type == "InvalidArgs" and err.value.non_retryable
    assert "timeout" in str(err.value)


def test_script_is_uploaded_run_with_arguments_and_removed(lab: SshLab) -> None:
    script = '#!/bin/sh\necho "args: $1 / $2"\necho "from $(dirname $0)"\n'
    result = lab.run(ssh_script, lab.call("ssh.script", {"content": script, "args": ["one", "two words"]}))
    assert not result.failed, result.stderr
    lines = (result.stdout or "").splitlines()
    assert lines[0] == "args: one / two words"
    uploaded_dir = Path(lines[1].removeprefix("from "))
    assert uploaded_dir.name.startswith(".pitstop-script-")
    assert not uploaded_dir.exists()


def test_script_from_the_runbook_directory_with_an_interpreter(
    lab: SshLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "hello.sh").write_text('echo "hello $1 from ${BASH_VERSION:+bash}"\n')
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    args = {"src": "scripts/hello.sh", "args": ["node"], "executable": "/bin/bash"}
    result = lab.run(ssh_script, lab.call("ssh.script", args))
    assert result.stdout == "hello node from bash\n"
    assert result.data["script"] == "scripts/hello.sh"
