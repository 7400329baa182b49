"""Run one command on a pooled connection: exit code, bounded output, heartbeats, deadline.

Output is kept up to `MAX_FIELD_BYTES` per stream (the rest is counted, not stored), so a
chatty command can neither fill the worker's memory nor the workflow history. A connection
that drops mid-command raises `ChannelLost(started=True)`: the caller decides whether
running the command again is safe.
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Callable
from dataclasses import dataclass

import paramiko

from pitstop.contracts import MAX_FIELD_BYTES, bound_text
from pitstop.ssh.connect import Connection
from pitstop.ssh.errors import ChannelLost

Heartbeat = Callable[[], None]

# Exit code reported when the remote process ended on a signal (OpenSSH sends `exit-signal`
# instead of an exit status) or the local deadline passed.
RC_NO_STATUS = -1
POLL_S = 0.2
_CHUNK = 65536


class BoundedOutput:
    """The first `limit` bytes of a stream, and how many more there were."""

    # Room is left for the note saying how much was dropped.
    def __init__(self, limit: int = MAX_FIELD_BYTES - 256) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = max(0, self.limit - len(self.data))
        self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - room)

    def text(self) -> str:
        body = self.data.decode(errors="replace")
        if self.dropped:
            body = f"{body}\n... [{self.dropped} more bytes not kept by pitstop]"
        return bound_text(body) or ""


@dataclass(frozen=True)
class CommandResult:
    rc: int
    stdout: str
    stderr: str
    elapsed_s: float
    # The local deadline passed before the command ended; the channel was closed.
    deadline_passed: bool = False


def _drain(chan: paramiko.Channel, out: BoundedOutput, err: BoundedOutput) -> None:
    while chan.recv_ready():
        out.feed(chan.recv(_CHUNK))
    while chan.recv_stderr_ready():
        err.feed(chan.recv_stderr(_CHUNK))


def _connection_lost(conn: Connection, chan: paramiko.Channel) -> bool:
    """No exit status: the connection died, or the process ended on a signal (then the
    channel saw EOF and the transport lives on)."""
    if not chan.eof_received:
        return True
    # paramiko closes the channels just before it marks the transport inactive.
    for _ in range(6):
        if not conn.alive():
            return True
        time.sleep(0.05)
    return False


def _start(conn: Connection, command: str, shown: str, stdin: bytes | None = None) -> paramiko.Channel:
    chan = conn.open_session(shown)
    try:
        chan.exec_command(command)
        if stdin:
            chan.sendall(stdin)
        chan.shutdown_write()
    except (paramiko.SSHException, OSError, EOFError) as exc:
        chan.close()
        # The request may have reached the host: treat the command as possibly run.
        raise ChannelLost(conn.target.address, shown, True, str(exc) or type(exc).__name__) from None
    return chan


def _collect(
    conn: Connection,
    chan: paramiko.Channel,
    shown: str,
    started: float,
    deadline_s: float | None,
    heartbeat: Heartbeat | None,
    heartbeat_every_s: float,
) -> CommandResult:
    try:
        out, err = BoundedOutput(), BoundedOutput()
        next_beat = started + heartbeat_every_s
        deadline = started + deadline_s if deadline_s is not None else None
        while True:
            _drain(chan, out, err)
            if chan.closed or (chan.exit_status_ready() and chan.eof_received):
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return CommandResult(
                    RC_NO_STATUS, out.text(), err.text(), now - started, deadline_passed=True
                )
            if heartbeat is not None and now >= next_beat:
                heartbeat()
                next_beat = now + heartbeat_every_s
            if chan.eof_received:
                # Output is complete; the exit status is on its way.
                chan.status_event.wait(POLL_S)
            else:
                select.select([chan], [], [], POLL_S)
        _drain(chan, out, err)
        rc = chan.exit_status
        if rc == RC_NO_STATUS and _connection_lost(conn, chan):
            raise ChannelLost(
                conn.target.address,
                shown,
                True,
                "the connection closed before the command's exit status arrived",
            )
        return CommandResult(rc, out.text(), err.text(), time.monotonic() - started)
    finally:
        # On a transport the host just dropped (a reboot), closing the channel raises; there
        # is nothing left to close.
        with contextlib.suppress(EOFError, OSError, paramiko.SSHException):
            chan.close()


def run_command(
    conn: Connection,
    command: str,
    *,
    display: str | None = None,
    deadline_s: float | None = None,
    heartbeat: Heartbeat | None = None,
    heartbeat_every_s: float = 5.0,
    stdin: bytes | None = None,
) -> CommandResult:
    """Run `command` through the remote user's shell and wait for it.

    `display` names the command in errors (defaults to the command itself). `deadline_s`
    bounds the wait locally; enforcing a timeout on the host is the command's job (see
    `pitstop.ssh.commands.shell_command`).
    """
    shown = display or command
    started = time.monotonic()
    chan = _start(conn, command, shown, stdin)
    return _collect(conn, chan, shown, started, deadline_s, heartbeat, heartbeat_every_s)


def run_many(
    conn: Connection, commands: dict[str, str], *, deadline_s: float | None = None
) -> dict[str, CommandResult]:
    """Run independent read-only commands at once, one channel each, on one connection."""
    started = time.monotonic()
    chans: dict[str, paramiko.Channel] = {}
    try:
        for name, command in commands.items():
            chans[name] = _start(conn, command, command)
    except BaseException:
        for chan in chans.values():
            chan.close()
        raise
    return {
        name: _collect(conn, chan, commands[name], started, deadline_s, None, 5.0)
        for name, chan in chans.items()
    }
