"""Files on a host: read their state, and replace them atomically with verified content.

An upload never leaves a half-written file at the destination: the content goes over SFTP
to a temporary file, its SHA-256 is computed on the host and compared with ours, mode and
owner are set on the temporary file, and only then is it renamed over the destination
(rename(2) is atomic within a filesystem). With `become`, the SSH user may not write the
destination directory: the temporary file is staged in /tmp and moved into place by `sudo`.
"""

from __future__ import annotations

import contextlib
import hashlib
import posixpath
import shlex
import uuid
from dataclasses import dataclass

import paramiko
from temporalio.exceptions import ApplicationError

from pitstop.errors import ErrorType
from pitstop.ssh.commands import with_become
from pitstop.ssh.connect import Connection
from pitstop.ssh.errors import invalid_args, precondition
from pitstop.ssh.execute import Heartbeat, run_command
from pitstop.ssh.parsers import parse_sha256sum
from pitstop.ssh.protocol import sha256


@dataclass(frozen=True)
class RemoteFile:
    path: str
    exists: bool
    sha256: str | None = None
    mode: int | None = None
    owner: str | None = None
    group: str | None = None


def parse_mode(mode: str) -> int:
    return int(mode, 8)


def format_mode(mode: int | None) -> str | None:
    return None if mode is None else f"{mode:04o}"


# --- the shell text of each step (every value quoted: a hostile path is one argument) --------


def stat_probe(path: str) -> str:
    q = shlex.quote(path)
    return f"stat -c '%a %U %G %F' -- {q} && sha256sum -- {q}"


def _owner_spec(owner: str | None, group: str | None) -> str:
    return shlex.quote((owner or "") + (":" + group if group else ""))


def attributes_command(path: str, mode: int | None, owner: str | None, group: str | None) -> str | None:
    """`chmod` and/or `chown` of `path`; None when there is nothing to set."""
    steps: list[str] = []
    q = shlex.quote(path)
    if mode is not None:
        steps.append(f"chmod {format_mode(int(mode))} -- {q}")
    if owner or group:
        steps.append(f"chown {_owner_spec(owner, group)} -- {q}")
    return " && ".join(steps) or None


def install_command(
    staged: str, final_tmp: str, dest: str, mode: int | None, owner: str | None, group: str | None
) -> str:
    """With become: copy the staged upload next to `dest`, set its attributes, rename it."""
    q_tmp, q_staged = shlex.quote(final_tmp), shlex.quote(staged)
    steps = [f"cp -- {q_staged} {q_tmp}", f"rm -f -- {q_staged}"]
    attributes = attributes_command(final_tmp, mode, owner, group)
    if attributes:
        steps.append(attributes)
    steps.append(f"mv -f -- {q_tmp} {shlex.quote(dest)}")
    return " && ".join(steps)


def stat_file(
    conn: Connection, path: str, become: bool = False, become_user: str | None = None
) -> RemoteFile:
    probe = stat_probe(path)
    result = run_command(conn, with_become(probe, become, become_user), display=f"stat {path}")
    lines = result.stdout.splitlines()
    if result.rc != 0:
        if "No such file or directory" in result.stderr and not lines:
            return RemoteFile(path, exists=False)
        if lines and lines[0].split(" ", 3)[3:] == ["directory"]:
            raise invalid_args(f"dest {path} on {conn.target.name} is a directory; give the file's full path")
        hint = "" if become else " (set `become: true` if the file needs root)"
        raise precondition(f"cannot read {path} on {conn.target.name}: {result.stderr.strip()}{hint}")
    mode, owner, group, _kind = lines[0].split(" ", 3)
    return RemoteFile(path, True, parse_sha256sum(lines[1]), int(mode, 8), owner, group)


def remote_sha256(conn: Connection, path: str, become: bool = False) -> str | None:
    result = run_command(conn, with_become(sha256(path), become))
    return parse_sha256sum(result.stdout) if result.rc == 0 else None


def set_attributes(
    conn: Connection,
    path: str,
    *,
    mode: int | None,
    owner: str | None,
    group: str | None,
    become: bool,
    become_user: str | None = None,
) -> None:
    command = attributes_command(path, mode, owner, group)
    if command is None:
        return
    result = run_command(conn, with_become(command, become, become_user), display=f"chmod/chown {path}")
    if result.rc != 0:
        raise precondition(f"cannot set mode/owner of {path} on {conn.target.name}: {result.stderr.strip()}")


def upload(
    conn: Connection,
    data: bytes,
    dest: str,
    *,
    mode: int | None = None,
    owner: str | None = None,
    group: str | None = None,
    become: bool = False,
    become_user: str | None = None,
    heartbeat: Heartbeat | None = None,
) -> str:
    """Atomically replace `dest` with `data`; returns the verified SHA-256."""
    digest = hashlib.sha256(data).hexdigest()
    tag = uuid.uuid4().hex[:12]
    directory, name = posixpath.split(dest)
    final_tmp = posixpath.join(directory or ".", f".{name}.pitstop-{tag}")
    staged = f"/tmp/.pitstop-upload-{tag}" if become else final_tmp
    sftp = conn.open_sftp()
    try:
        try:
            with sftp.open(staged, "wb") as handle:
                handle.set_pipelined(True)
                handle.write(data)
            if not become and mode is not None:
                sftp.chmod(staged, mode)
        except OSError as exc:
            hint = "" if become else " (set `become: true` if the directory needs root)"
            raise precondition(f"cannot write {staged} on {conn.target.name}: {exc}{hint}") from None
        if heartbeat is not None:
            heartbeat()
        got = remote_sha256(conn, staged)
        if got != digest:
            _remove_quietly(sftp, staged)
            # A corrupted transfer is transient: the retry uploads again.
            raise ApplicationError(
                f"checksum mismatch after uploading {dest} to {conn.target.name}: "
                f"sent sha256 {digest}, the host has {got}",
                type=ErrorType.CHECKSUM_MISMATCH.value,
            )
        if not become:
            set_attributes(conn, staged, mode=None, owner=owner, group=group, become=False)
            sftp.posix_rename(staged, dest)
            return digest
    finally:
        sftp.close()
    # With become: copy into the destination directory as root, then rename.
    command = install_command(staged, final_tmp, dest, mode, owner, group)
    result = run_command(conn, with_become(command, True, become_user), display=f"install {dest}")
    if result.rc != 0:
        cleanup = f"rm -f -- {shlex.quote(final_tmp)} {shlex.quote(staged)}"
        run_command(conn, with_become(cleanup, True, become_user))
        raise precondition(f"cannot install {dest} on {conn.target.name}: {result.stderr.strip()}")
    return digest


def _remove_quietly(sftp: paramiko.SFTPClient, path: str) -> None:
    with contextlib.suppress(OSError):
        sftp.remove(path)
