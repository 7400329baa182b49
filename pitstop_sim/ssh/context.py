"""The state one command runs with on a simulated node: who, where, its output, its deadline,
and whether the client is still connected."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pitstop_sim.ssh.fs import MemoryFS
from pitstop_sim.ssh.host import NodeHost

Handler = Callable[[list[str], "ExecContext"], int]

# dash's exit statuses: a command that does not exist, and a usage/syntax error.
RC_NOT_FOUND = 127
RC_USAGE = 2
RC_TIMED_OUT = 124  # coreutils `timeout`


class TimedOut(Exception):
    """The deadline of a `timeout` wrapper passed while a command ran."""


class ConnectionGone(Exception):
    """The client's connection closed (or the node went down) while a command waited."""


class ShellExit(Exception):
    """`exit N`: leave the current shell (`sh -c` or script) with status N."""

    def __init__(self, rc: int) -> None:
        super().__init__(rc)
        self.rc = rc


@dataclass
class ExecContext:
    host: NodeHost
    user: str
    pid: int
    cwd: str
    connected: Callable[[], bool] = lambda: True
    deadline: float | None = None
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    # Run after the exit status is sent (a reboot must not beat the answer to `reboot`).
    after_exit: list[Callable[[], None]] = field(default_factory=list)
    _output_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def fs(self) -> MemoryFS:
        return self.host.fs

    @property
    def node(self) -> str:
        return self.host.name

    def path(self, path: str) -> str:
        return MemoryFS.resolve(path, self.cwd)

    def write(self, text: str | bytes) -> None:
        with self._output_lock:
            self.out += text.encode() if isinstance(text, str) else text

    def error(self, text: str) -> None:
        with self._output_lock:
            self.err += text.encode()

    def check(self) -> None:
        """Raise if the command must stop now: deadline passed, client or node gone."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise TimedOut()
        if self.host.down or not self.connected():
            raise ConnectionGone()

    def sleep(self, seconds: float) -> None:
        """Wait in real seconds, stopping early on a deadline or a lost connection."""
        end = time.monotonic() + seconds
        while True:
            self.check()
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    def wait(self, done: threading.Event) -> None:
        while not done.wait(0.05):
            self.check()
