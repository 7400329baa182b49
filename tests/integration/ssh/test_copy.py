"""ssh.copy against a real sshd: SFTP, SHA-256 verified, atomic, changed only on a difference."""

from __future__ import annotations

import hashlib
import os
import pwd
import uuid
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.ssh import ssh_copy
from tests.integration.ssh.lab import FakeNode, SshLab


@pytest.fixture
def dest(lab: SshLab) -> Path:
    directory = lab.base / f"copy-{uuid.uuid4().hex[:8]}"
    directory.mkdir()
    return directory / "app.conf"


def _mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o7777


def test_copy_writes_the_content_with_its_checksum_and_mode(lab: SshLab, dest: Path) -> None:
    content = "threads = 8\n" * 1000
    result = lab.run(ssh_copy, lab.call("ssh.copy", {"dest": str(dest), "content": content, "mode": "0640"}))
    assert result.changed and not result.failed
    assert dest.read_text() == content
    assert result.data["checksum"] == hashlib.sha256(dest.read_bytes()).hexdigest()
    assert _mode(dest) == 0o640
    # Nothing left behind: the temporary file was renamed onto the destination.
    assert sorted(p.name for p in dest.parent.iterdir()) == ["app.conf"]


def test_second_identical_copy_reports_unchanged(lab: SshLab, dest: Path) -> None:
    args = {"dest": str(dest), "content": "a = 1\n", "mode": "0600"}
    first = lab.run(ssh_copy, lab.call("ssh.copy", args))
    inode = os.stat(dest).st_ino
    second = lab.run(ssh_copy, lab.call("ssh.copy", args))
    assert first.changed and not second.changed
    assert os.stat(dest).st_ino == inode, "an unchanged file must not be rewritten"


def test_mode_change_alone_is_a_change_and_keeps_the_content(lab: SshLab, dest: Path) -> None:
    lab.run(ssh_copy, lab.call("ssh.copy", {"dest": str(dest), "content": "x\n", "mode": "0600"}))
    result = lab.run(ssh_copy, lab.call("ssh.copy", {"dest": str(dest), "content": "x\n", "mode": "0644"}))
    assert result.changed
    assert "mode 0600 -> 0644" in (result.diff or "")
    assert _mode(dest) == 0o644 and dest.read_text() == "x\n"


def test_new_content_keeps_the_existing_mode_when_none_is_given(lab: SshLab, dest: Path) -> None:
    lab.run(ssh_copy, lab.call("ssh.copy", {"dest": str(dest), "content": "v1\n", "mode": "0751"}))
    result = lab.run(ssh_copy, lab.call("ssh.copy", {"dest": str(dest), "content": "v2\n"}))
    assert result.changed
    assert dest.read_text() == "v2\n" and _mode(dest) == 0o751


def test_copy_in_check_mode_reports_the_change_without_writing(lab: SshLab, dest: Path) -> None:
    dest.write_text("old\n")
    result = lab.run(ssh_copy, lab.call("ssh.copy", {"dest": str(dest), "content": "new\n"}, check_mode=True))
    assert result.changed
    assert result.msg.startswith("would update")
    assert dest.read_text() == "old\n"


def test_copy_from_a_worker_file_with_owner_through_become(
    lab: SshLab, dest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "motd").write_bytes(b"\x00binary\xffpayload")
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    args = {"dest": str(dest), "src": "files/motd", "owner": "nobody", "mode": "0604", "become": True}
    result = lab.run(ssh_copy, lab.call("ssh.copy", args))
    assert result.changed
    assert dest.read_bytes() == b"\x00binary\xffpayload"
    assert pwd.getpwuid(os.stat(dest).st_uid).pw_name == "nobody"
    assert not lab.run(ssh_copy, lab.call("ssh.copy", args)).changed


def test_copy_onto_a_directory_is_refused_with_advice(lab: SshLab, dest: Path) -> None:
    with pytest.raises(ApplicationError) as err:
        lab.run(ssh_copy, lab.call("ssh.copy", {"dest": str(dest.parent), "content": "x"}))
    assert err.value.type == "InvalidArgs"
    assert "is a directory" in str(err.value) and "full path" in str(err.value)


def test_missing_source_file_names_the_path_on_the_worker(
    lab: SshLab, dest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    with pytest.raises(ApplicationError) as err:
        lab.run(ssh_copy, lab.call("ssh.copy", {"dest": str(dest), "src": "files/nope.conf"}))
    assert err.value.type == "PreconditionFailed"
    assert str(tmp_path / "files" / "nope.conf") in str(err.value)


def test_upload_whose_checksum_does_not_match_never_replaces_the_file(
    lab: SshLab, fake_node: FakeNode
) -> None:
    # This node's sha256sum reports a wrong digest, as a corrupted transfer would look.
    liar = fake_node.bin / "sha256sum"
    liar.write_text(f'#!/bin/sh\necho {"0" * 64}  "$1"\n')
    liar.chmod(0o755)
    dest = fake_node.root / "data" / "model.cfg"
    dest.parent.mkdir()
    dest.write_text("original\n")
    with pytest.raises(ApplicationError) as err:
        lab.run(
            ssh_copy, lab.call("ssh.copy", {"dest": str(dest), "content": "new\n"}, server=fake_node.server)
        )
    assert err.value.type == "ChecksumMismatch" and not err.value.non_retryable
    assert hashlib.sha256(b"new\n").hexdigest() in str(err.value)
    assert dest.read_text() == "original\n"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["model.cfg"]
