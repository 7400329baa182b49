"""Which processes a test session started are still alive (read from /proc, Linux).

A process belongs to the session when it descends from the pytest process, when its
environment carries the session's marker (`SESSION_ENV`, which every sshd of the tests hands to
its sessions: tests/sshd.py), or when its command line names a path in the session's own
temporary directory. The last two find what double-forked away and is no longer a descendant:
the fake node's reboot script runs inside an SSH session and restarts sshd detached, and sshd
overwrites its own environment with its process title, so only its `-f <config>` under the
session's directory still says whose it is. Another session has another marker and directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

SESSION_ENV = "PITSTOP_TEST_SESSION"


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    cmdline: str

    def __str__(self) -> str:
        return f"pid {self.pid} (parent {self.ppid}): {self.cmdline}"


def _read(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: the fields follow the last ')'.
    name = stat[stat.find("(") + 1 : stat.rfind(")")]
    fields = stat.rsplit(")", 1)[1].split()
    cmdline = raw.replace(b"\0", b" ").decode(errors="replace").strip() or f"[{name}]"
    return Proc(pid=pid, ppid=int(fields[1]), state=fields[0], cmdline=cmdline)


def _carries(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def session_processes(root: int, marker: str, directory: Path | None = None) -> list[Proc]:
    """Live processes (zombies are not) below `root`, carrying `SESSION_ENV=marker`, or naming
    a path under `directory` on their command line."""
    procs = {p.pid: p for p in (_read(int(e.name)) for e in Path("/proc").iterdir() if e.name.isdigit()) if p}
    children: dict[int, list[int]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    ours: set[int] = set()
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in ours:
                ours.add(child)
                pending.append(child)
    tagged = f"{SESSION_ENV}={marker}".encode()
    ours |= {pid for pid in procs if pid != root and _carries(pid, tagged)}
    if directory is not None:
        # With the separator: /tmp/pytest-of-u/pytest-51/ is not a prefix of pytest-518.
        inside = f"{directory.resolve()}{os.sep}"
        ours |= {pid for pid, proc in procs.items() if pid != root and inside in proc.cmdline}
    return sorted((procs[pid] for pid in ours if procs[pid].state not in {"Z", "X"}), key=lambda p: p.pid)


def left_running(root: int, marker: str, directory: Path | None = None, within: float = 15.0) -> list[Proc]:
    """What is still alive once `within` seconds passed (a process told to stop may take a
    moment to exit); an empty list as soon as nothing is."""
    deadline = time.monotonic() + within
    while True:
        alive = session_processes(root, marker, directory)
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def kill_all(procs: list[Proc]) -> None:
    """SIGKILL what was left, so one leaking test does not leave it to the next session."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)
