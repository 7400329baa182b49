"""Reboot a node and wait until it answers over SSH with a NEW boot id.

The boot id read before the reboot is passed to `record` (the activity heartbeats it), so a
retry after a worker crash resumes waiting instead of rebooting the node a second time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio.exceptions import ApplicationError

from pitstop.errors import ErrorType
from pitstop.ssh.commands import with_become
from pitstop.ssh.errors import UNREACHABLE, ChannelLost, precondition
from pitstop.ssh.execute import run_command
from pitstop.ssh.parsers import first_line
from pitstop.ssh.pool import SSHPool
from pitstop.ssh.target import SSHTarget

REBOOT_TIMEOUT_TYPE = ErrorType.REBOOT_TIMEOUT.value
COMMAND_DEADLINE_S = 30.0


@dataclass
class RebootOutcome:
    boot_id_before: str
    boot_id_after: str
    went_away: bool
    elapsed_s: float
    resumed: bool


@dataclass
class RebootJob:
    pool: SSHPool
    target: SSHTarget
    reboot_command: str
    boot_time_command: str
    test_command: str
    reboot_timeout_s: float
    connect_timeout_s: float
    poll_s: float = 1.0
    become: bool = False
    record: Callable[[dict[str, Any]], None] = lambda details: None
    sleep: Callable[[float], None] = time.sleep

    def _boot_id(self, target: SSHTarget) -> str | None:
        with self.pool.connection(target) as conn:
            result = run_command(
                conn, with_become(self.boot_time_command, self.become), deadline_s=self.connect_timeout_s
            )
        return first_line(result.stdout) if result.rc == 0 else None

    def issue(self) -> str:
        """Read the boot id, record it, send the reboot command; returns the boot id."""
        before = self._boot_id(self.target)
        if not before:
            raise precondition(
                f"`{self.boot_time_command}` printed nothing on {self.target.name}; cannot tell reboots apart"
            )
        self.record({"boot_id_before": before})
        try:
            with self.pool.connection(self.target) as conn:
                result = run_command(
                    conn,
                    with_become(self.reboot_command, self.become),
                    deadline_s=COMMAND_DEADLINE_S,
                )
            if result.rc not in (0, -1) and not result.deadline_passed:
                raise precondition(
                    f"`{self.reboot_command}` failed on {self.target.name} (rc {result.rc}): "
                    f"{result.stderr.strip() or result.stdout.strip()}"
                    + ("" if self.become else " (set `become: true` if it needs root)")
                )
        except ChannelLost:
            pass  # the node went down while answering: that is the reboot
        return before

    def run(self, resume_boot_id: str | None = None) -> RebootOutcome:
        started = time.monotonic()
        before = resume_boot_id or self.issue()
        # The old connection dies with the node; never reuse it.
        self.pool.evict(self.target)
        probe_target = self.target.model_copy(update={"connect_timeout": self.connect_timeout_s})
        deadline = started + self.reboot_timeout_s
        went_away = False
        last = "still up with the old boot id"
        while time.monotonic() < deadline:
            self.record({"boot_id_before": before, "went_away": went_away})
            try:
                after = self._boot_id(probe_target)
                if after and after != before:
                    with self.pool.connection(probe_target) as conn:
                        test = run_command(conn, self.test_command, deadline_s=self.connect_timeout_s)
                    if test.rc == 0:
                        return RebootOutcome(
                            before, after, went_away, time.monotonic() - started, resume_boot_id is not None
                        )
                    last = f"`{self.test_command}` failed (rc {test.rc}) after the reboot"
                else:
                    last = "still up with the old boot id"
                # Not back yet (or not down yet): drop the connection, poll again.
                self.pool.evict(probe_target)
            except ChannelLost as exc:
                went_away = True
                last = f"connection lost ({exc.reason})"
                self.pool.evict(probe_target)
            except ApplicationError as exc:
                if exc.type != UNREACHABLE:
                    raise  # a changed host key or a refused key is not "still rebooting"
                went_away = True
                last = str(exc)
            self.sleep(self.poll_s)
        raise ApplicationError(
            f"{self.target.name} did not come back with a new boot id within {self.reboot_timeout_s:g}s "
            f"(went away: {'yes' if went_away else 'no'}; last: {last})",
            type=REBOOT_TIMEOUT_TYPE,
            non_retryable=True,
        )
