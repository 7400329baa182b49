"""Reading a control-plane node's /etc/kubernetes over the worker's SSH pool.

What the `dr.*` modules send to a node (each value `shlex.quote`d; with `become`, wrapped as
`sudo -n -- sh -c '...'` like every ssh.* module):

    find /etc/kubernetes -type f -name 'kubeadm*.yaml'   -> the kubeadm config files there
    find /etc/kubernetes/pki -type f -name '*.crt'       -> the public certificates
    cat /etc/kubernetes/pki/<name>.crt                    -> one certificate (only *.crt)
    tar -C /etc/kubernetes -cf - PATH...                 -> the archive, streamed to a worker file

The archive's bytes (private keys among them) go from the channel straight into a 0600 file in
the run's work directory; they are never held in a result, an error or a log line. A command's
stderr is kept (bounded) for the error a person reads; tar names files there, never contents.
"""

from __future__ import annotations

import os
import select
import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager

import paramiko
from temporalio import activity

from pitstop.contracts import ModuleCall
from pitstop.errors import ErrorType, fail, make_error
from pitstop.ssh.commands import with_become
from pitstop.ssh.connect import Connection
from pitstop.ssh.errors import ChannelLost, connection_lost
from pitstop.ssh.execute import BoundedOutput, CommandResult, run_command
from pitstop.ssh.pool import default_pool
from pitstop.ssh.target import target_for

KUBERNETES_DIR = "/etc/kubernetes"
CHUNK = 65536


@contextmanager
def node_connection(call: ModuleCall) -> Iterator[Connection]:
    """A pooled connection to the call's host; reads only, so a drop may be retried."""
    pool = default_pool()
    with pool.connection(target_for(call)) as conn:
        try:
            yield conn
        except ChannelLost as lost:
            pool.discard(conn)
            raise connection_lost(lost, safe_to_retry=True, why_safe="it only reads files") from None


def run_read(conn: Connection, argv: list[str], become: bool, host: str) -> CommandResult:
    """Run a read-only command; a sudo that wants a password is said as such."""
    command = with_become(shlex.join(argv), become)
    result = run_command(conn, command, display=shlex.join(argv), deadline_s=120)
    if result.rc != 0 and become and "password is required" in result.stderr:
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"become failed on {host}: sudo wants a password for the SSH user; pitstop runs `sudo -n` "
            "and needs passwordless sudo (NOPASSWD) for it",
        )
    return result


def find_files(conn: Connection, directory: str, pattern: str, become: bool, host: str) -> list[str] | None:
    """Regular files named like `pattern` below `directory` (None: the directory does not exist)."""
    result = run_read(conn, ["find", directory, "-type", "f", "-name", pattern], become, host)
    if result.rc != 0:
        if "No such file or directory" in result.stderr:
            return None
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"find {directory} on {host} failed (rc {result.rc}): {result.stderr.strip()}",
        )
    return sorted(line for line in result.stdout.splitlines() if line.startswith(directory + "/"))


def stream_tar(
    conn: Connection, members: list[str], become: bool, host: str, fd: int, deadline_s: float
) -> int:
    """`tar -C /etc/kubernetes -cf - MEMBERS` into `fd`; returns the bytes written. A non-zero exit
    (a file tar could not read) fails with tar's own stderr (it names files, never contents)."""
    shown = shlex.join(["tar", "-C", KUBERNETES_DIR, "-cf", "-", *members])
    command = with_become(shown, become)
    chan = conn.open_session(shown)
    try:
        try:
            chan.exec_command(command)
            chan.shutdown_write()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ChannelLost(conn.target.address, shown, True, str(exc) or type(exc).__name__) from None
        return _pump(conn, chan, shown, host, fd, time.monotonic() + deadline_s)
    finally:
        chan.close()


def _pump(conn: Connection, chan: paramiko.Channel, shown: str, host: str, fd: int, deadline: float) -> int:
    err = BoundedOutput(limit=8192)
    written = 0
    next_beat = time.monotonic() + 5
    while True:
        while chan.recv_ready():
            chunk = chan.recv(CHUNK)
            os.write(fd, chunk)
            written += len(chunk)
        while chan.recv_stderr_ready():
            err.feed(chan.recv_stderr(CHUNK))
        if chan.exit_status_ready() and chan.eof_received and not chan.recv_ready():
            break
        if chan.closed and not chan.recv_ready():
            break
        now = time.monotonic()
        if now >= deadline:
            raise make_error(ErrorType.TIMEOUT, f"{shown} on {host} did not finish in time")
        if now >= next_beat and activity.in_activity():
            activity.heartbeat()
            next_beat = now + 5
        select.select([chan], [], [], 0.2)
    rc = chan.recv_exit_status()
    if rc == -1 and not conn.alive():
        raise ChannelLost(conn.target.address, shown, True, "the connection closed before tar ended")
    if rc != 0:
        message = err.text().strip()
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"archiving /etc/kubernetes on {host} failed (tar rc {rc}): {message}",
        )
    return written
