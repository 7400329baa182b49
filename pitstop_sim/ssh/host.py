"""One simulated node as seen over SSH: its file system, its running processes, its firmware
updater, its faults, and whether it is up.

The updater (`pitstop-fwupdate --apply IMAGE`) runs on its own thread, independent of the SSH
connection that started it: a dropped connection or a killed worker does not stop a flash,
a reboot does (nothing is staged then). Each run is counted in the simulator's
`firmware_flashes` counter when it starts.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from pitstop_sim.ssh.backend import SshBackend
from pitstop_sim.ssh.fs import MemoryFS
from pitstop_sim.ssh.models import SshDrop, SshNodeFaults

log = logging.getLogger("pitstop_sim.ssh")

FIRST_PID = 4000
FLASH_FAILED_RC = 3
Sink = Callable[[str], None]


def image_version(data: bytes, path: str) -> str | None:
    """The version an image holds: its first line `FIRMWARE <version>`, else the version in
    pitstop's file name `firmware-<version>.img`."""
    words = data.split(b"\n", 1)[0].decode(errors="replace").split()
    if len(words) >= 2 and words[0] == "FIRMWARE":
        return words[1]
    match = re.fullmatch(r"firmware-(.+)\.img", posixpath.basename(path))
    return match.group(1) if match else None


@dataclass
class UpdaterRun:
    """One run of the firmware updater on the node."""

    pid: int
    version: str
    sink: Sink
    rc_path: str | None
    owner: str
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    killed: bool = False
    rc: int | None = None


class NodeHost:
    def __init__(self, name: str, backend: SshBackend, faults: SshNodeFaults | None = None) -> None:
        self.name = name
        self.backend = backend
        self.fs = MemoryFS()
        self.lock = threading.RLock()
        self.down = False
        self.commands = 0
        self.drops_injected = 0
        self._processes: dict[int, str] = {}
        self._adopted: set[int] = set()
        self._runs: list[UpdaterRun] = []
        self._next_pid = FIRST_PID
        self._faults = SshNodeFaults()
        self._drops_left: list[int] = []
        self.set_faults(faults or SshNodeFaults())

    # --- faults -------------------------------------------------------------------------------
    @property
    def faults(self) -> SshNodeFaults:
        with self.lock:
            return self._faults.model_copy(deep=True)

    def set_faults(self, faults: SshNodeFaults) -> None:
        with self.lock:
            self._faults = faults.model_copy(deep=True)
            self._drops_left = [d.count for d in self._faults.drops]

    def take_drop(self, command: str) -> SshDrop | None:
        """The drop fault for `command`, if one is due (each fires `count` times)."""
        with self.lock:
            for index, drop in enumerate(self._faults.drops):
                if self._drops_left[index] > 0 and drop.matches(command):
                    self._drops_left[index] -= 1
                    self.drops_injected += 1
                    return drop
            return None

    # --- processes ----------------------------------------------------------------------------
    def spawn(self, command: str) -> int:
        with self.lock:
            pid = self._next_pid
            self._next_pid += 1
            self._processes[pid] = command
            self.commands += 1
            return pid

    def exit(self, pid: int) -> None:
        """The shell `pid` ended (unless the updater it started still runs under it)."""
        with self.lock:
            if pid not in self._adopted:
                self._processes.pop(pid, None)

    def running(self, pid: int) -> bool:
        with self.lock:
            return pid in self._processes

    def process_list(self) -> list[str]:
        with self.lock:
            return [f"{pid} {command}" for pid, command in sorted(self._processes.items())]

    # --- reboots ------------------------------------------------------------------------------
    def went_down(self) -> None:
        """Power off: every process dies (a flash in progress stages nothing), /tmp is emptied."""
        with self.lock:
            self.down = True
            for run in self._runs:
                run.killed = True
                run.cancel.set()
                run.done.set()
            self._runs.clear()
            self._processes.clear()
            self._adopted.clear()
            self.fs.clear_dir("/tmp")

    def came_up(self) -> None:
        with self.lock:
            self.down = False

    # --- the firmware updater -----------------------------------------------------------------
    def start_flash(self, version: str, pid: int, sink: Sink, rc_path: str | None, owner: str) -> UpdaterRun:
        """Run the updater for `version` under shell `pid`; `sink` gets its output."""
        run = UpdaterRun(pid=pid, version=version, sink=sink, rc_path=rc_path, owner=owner)
        with self.lock:
            self._adopted.add(pid)
            self._runs.append(run)
        threading.Thread(
            target=self._flash, args=(run,), name=f"sim-fwupdate-{self.name}", daemon=True
        ).start()
        return run

    def _flash(self, run: UpdaterRun) -> None:
        try:
            self.backend.record_flash(self.name)
            faults = self.faults
            seconds = (
                faults.flash_seconds if faults.flash_seconds is not None else self.backend.flash_seconds()
            )
            run.sink(f"pitstop-fwupdate: flashing {run.version} on {self.name}\n")
            if run.cancel.wait(self.backend.real_seconds(seconds)):
                return  # the node went down mid-flash
            if faults.flash_fails:
                run.sink("pitstop-fwupdate: flash failed: device busy\n")
                self._finish(run, FLASH_FAILED_RC)
                return
            if not self.backend.stage_firmware(self.name, run.version, lambda: not run.killed):
                return
            run.sink(f"pitstop-fwupdate: staged {run.version}; active after reboot\n")
            self._finish(run, 0)
        except Exception:  # the simulator stopped under us: the flash just ends
            log.debug("firmware updater on %s ended early", self.name, exc_info=True)
            with self.lock:
                run.done.set()

    def _finish(self, run: UpdaterRun, rc: int) -> None:
        with self.lock:
            if run.killed:
                return
            # The exit status is written before the shell exits, as `echo $rc > RC; exit $rc` does:
            # whoever sees the process gone also sees the status.
            if run.rc_path is not None:
                with contextlib.suppress(OSError):
                    self.fs.write(run.rc_path, f"{rc}\n".encode(), run.owner)
            run.rc = rc
            self._adopted.discard(run.pid)
            self._processes.pop(run.pid, None)
            if run in self._runs:
                self._runs.remove(run)
            run.done.set()
