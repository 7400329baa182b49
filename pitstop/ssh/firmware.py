"""Firmware update as a small state machine whose state lives on the node.

Named steps, each safe to repeat after a crash of the worker or a dropped connection:

  probe       read `--current`, `--pending`, pitstop's marker and the updater's exit status
  at_target   the target is active: nothing to do (stale markers for it are removed)
  staged      the target is pending: flashed, waiting for a reboot
  in_progress a marker from this boot, no exit status yet, the updater's shell alive: wait
  flash       upload the image (verified), then write the marker and start the updater in
              ONE exec request, wait for it with heartbeats, then probe again

A marker without a running updater and without an exit status, or an updater that said it
succeeded while nothing is pending, is never "fixed" by flashing again: the module stops
and says which file to inspect and remove. That is how a retry never flashes twice.
"""

from __future__ import annotations

import hashlib
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from temporalio.exceptions import ApplicationError

from pitstop.errors import ErrorType
from pitstop.ssh import protocol
from pitstop.ssh.commands import with_become
from pitstop.ssh.connect import Connection
from pitstop.ssh.errors import precondition
from pitstop.ssh.execute import Heartbeat, run_command
from pitstop.ssh.files import remote_sha256, upload
from pitstop.ssh.parsers import first_line, parse_marker

Step = Literal["at_target", "staged", "in_progress", "interrupted", "apply_failed", "not_staged", "flash"]

WAIT_POLL_S = 2.0
LOG_TAIL_BYTES = 16384


@dataclass(frozen=True)
class FirmwareProbe:
    current: str
    pending: str | None
    boot_id: str
    marker: dict[str, str] | None = None
    apply_rc: int | None = None
    updater_running: bool = False


def next_step(probe: FirmwareProbe, target: str) -> Step:
    """What to do next, from the node's state alone (pure)."""
    if probe.current == target:
        return "at_target"
    if probe.pending == target:
        return "staged"
    if probe.marker is None:
        return "flash"
    if probe.apply_rc is None:
        same_boot = probe.marker.get("boot") == protocol.marker_value(probe.boot_id)
        return "in_progress" if same_boot and probe.updater_running else "interrupted"
    if probe.apply_rc != 0:
        return "apply_failed"
    return "not_staged"


@dataclass
class FirmwareOutcome:
    changed: bool
    msg: str
    previous: str
    current: str
    pending: str | None
    reboot_required: bool
    flashed: bool = False
    log_tail: str = ""
    steps: list[str] = field(default_factory=list)


@dataclass
class FirmwareJob:
    conn: Connection
    target: str
    updater: str
    files: protocol.FirmwareFiles
    run_id: str
    task_path: str
    become: bool = False
    heartbeat: Heartbeat | None = None
    apply_timeout_s: float = 3600.0
    sleep: Callable[[float], None] = time.sleep

    # --- remote reads -------------------------------------------------------------------
    def _run(self, command: str, deadline_s: float | None = None) -> tuple[int, str, str]:
        result = run_command(
            self.conn,
            with_become(command, self.become),
            display=command,
            deadline_s=deadline_s,
            heartbeat=self.heartbeat,
        )
        return result.rc, result.stdout, result.stderr

    def _updater(self, flag: str) -> str | None:
        command = protocol.updater_command(self.updater, flag)
        rc, out, err = self._run(command)
        if rc == protocol.RC_NOT_FOUND:
            raise precondition(
                f"firmware updater {self.updater!r} not found on {self.conn.target.name} ({err.strip()}); "
                "install it or set `updater:` to its path"
            )
        if rc != 0:
            raise precondition(
                f"`{command}` failed on {self.conn.target.name} (rc {rc}): {err.strip() or out.strip()}"
            )
        return first_line(out)

    def _read(self, path: str) -> str | None:
        rc, out, _ = self._run(protocol.read_file(path))
        return out if rc == 0 else None

    def probe(self) -> FirmwareProbe:
        current = self._updater("--current")
        if current is None:
            raise precondition(f"`{self.updater} --current` printed no version on {self.conn.target.name}")
        pending = self._updater("--pending")
        _, boot, _ = self._run(protocol.BOOT_ID)
        marker_text = self._read(self.files.marker)
        marker = parse_marker(marker_text) if marker_text is not None else None
        apply_rc: int | None = None
        if marker is not None:
            rc_text = (self._read(self.files.rc) or "").strip()
            apply_rc = int(rc_text) if rc_text.lstrip("-").isdigit() else None
        running = False
        if marker is not None and apply_rc is None and marker.get("pid", "").isdigit():
            rc, _, _ = self._run(protocol.process_running(int(marker["pid"])))
            running = rc == 0
        return FirmwareProbe(current, pending, boot.strip(), marker, apply_rc, running)

    def log_tail(self) -> str:
        _, out, _ = self._run(protocol.tail(self.files.log, LOG_TAIL_BYTES))
        return out

    # --- the flow -----------------------------------------------------------------------
    def ours(self, probe: FirmwareProbe) -> bool:
        marker = probe.marker or {}
        return marker.get("run") == protocol.marker_value(self.run_id) and marker.get(
            "task"
        ) == protocol.marker_value(self.task_path)

    def run(self, image: bytes | None, check_mode: bool) -> FirmwareOutcome:
        """Bring the node to `target` pending (or active). `image` is None in check mode."""
        steps: list[str] = []
        previous: str | None = None
        flashed = False
        while True:
            probe = self.probe()
            previous = previous or probe.current
            step = next_step(probe, self.target)
            steps.append(step)
            if step == "at_target":
                if probe.marker is not None and not check_mode:
                    self._run(protocol.remove(self.files.marker, self.files.rc, self.files.image))
                return FirmwareOutcome(
                    False,
                    f"firmware {self.target} is active",
                    previous,
                    probe.current,
                    probe.pending,
                    False,
                    steps=steps,
                )
            if step == "staged":
                changed = flashed or self.ours(probe)
                verb = "flashed" if changed else "already staged"
                return FirmwareOutcome(
                    changed,
                    f"firmware {self.target} {verb}; active after reboot (current {probe.current})",
                    previous,
                    probe.current,
                    probe.pending,
                    True,
                    flashed=flashed,
                    log_tail=self.log_tail() if changed else "",
                    steps=steps,
                )
            if step == "in_progress":
                if check_mode:
                    return FirmwareOutcome(
                        True,
                        f"a flash of {self.target} is in progress",
                        previous,
                        probe.current,
                        probe.pending,
                        True,
                    )
                self._wait_for_updater()
                continue
            if step == "flash":
                if check_mode:
                    return FirmwareOutcome(
                        True,
                        f"would flash {self.target} (current {probe.current}); a reboot would be required",
                        previous,
                        probe.current,
                        probe.pending,
                        True,
                        steps=steps,
                    )
                if flashed:
                    raise precondition(
                        f"the updater left no marker for {self.target} on {self.conn.target.name}"
                    )
                assert image is not None
                self._upload(image)
                # No marker exists: an exit status left by an earlier, failed flash is stale.
                self._run(protocol.remove(self.files.rc))
                self._apply(probe.boot_id)
                flashed = True
                continue
            raise self._stuck(step, probe)

    def _upload(self, image: bytes) -> None:
        digest = hashlib.sha256(image).hexdigest()
        if remote_sha256(self.conn, self.files.image, self.become) == digest:
            return  # uploaded by an earlier attempt
        self._run(f"mkdir -p {shlex.quote(self.files.state_dir)}")
        upload(self.conn, image, self.files.image, mode=0o600, become=self.become, heartbeat=self.heartbeat)

    def _apply(self, boot_id: str) -> None:
        line = protocol.marker_line(boot_id, self.run_id, self.task_path, self.target)
        command = protocol.apply_command(self.files, self.updater, line, self.become)
        result = run_command(
            self.conn,
            command,
            display=f"{self.updater} --apply {self.files.image}",
            deadline_s=self.apply_timeout_s,
            heartbeat=self.heartbeat,
        )
        if result.deadline_passed:
            raise precondition(
                f"{self.updater} --apply is still running on {self.conn.target.name} after "
                f"{self.apply_timeout_s:g}s; pitstop does not interrupt a flash. Check {self.files.log}"
            )

    def _wait_for_updater(self) -> None:
        """Another attempt (before a crash) started the updater: wait for its exit status."""
        deadline = time.monotonic() + self.apply_timeout_s
        while time.monotonic() < deadline:
            if self._read(self.files.rc) is not None:
                return
            probe_marker = parse_marker(self._read(self.files.marker) or "")
            pid = probe_marker.get("pid", "")
            if not pid.isdigit() or self._run(protocol.process_running(int(pid)))[0] != 0:
                return  # ended (the next probe decides how)
            if self.heartbeat is not None:
                self.heartbeat()
            self.sleep(WAIT_POLL_S)
        raise precondition(
            f"{self.updater} --apply still running on {self.conn.target.name} after "
            f"{self.apply_timeout_s:g}s; check {self.files.log}"
        )

    def _stuck(self, step: Step, probe: FirmwareProbe) -> ApplicationError:
        host = self.conn.target.name
        tail = self.log_tail().strip()[-2000:]
        if step == "apply_failed":
            # The updater said it failed: nothing is staged, so a later run may try again.
            self._run(protocol.move(self.files.marker, self.files.failed))
            return ApplicationError(
                f"{self.updater} --apply failed on {host} (rc {probe.apply_rc}); firmware stays at "
                f"{probe.current}. Updater output:\n{tail}",
                type=ErrorType.FIRMWARE_UPDATE_FAILED.value,
                non_retryable=True,
            )
        if step == "interrupted":
            return precondition(
                f"a flash of {self.target} on {host} started ({self.files.marker}: "
                f"{' '.join(f'{k}={v}' for k, v in (probe.marker or {}).items())}) but did not finish: the "
                f"updater is no longer running and left no exit status (current {probe.current}, pending "
                f"{probe.pending or 'none'}). pitstop will not flash again on its own: inspect "
                f"{self.files.log}, then remove {self.files.marker} to allow a new attempt"
            )
        return precondition(
            f"{self.updater} --apply reported success on {host} but {self.target} is neither pending "
            f"(pending: {probe.pending or 'none'}) nor active (current: {probe.current}). Inspect "
            f"{self.files.log}, then remove {self.files.marker} to allow a new attempt"
        )
