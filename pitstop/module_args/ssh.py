"""Args of the `ssh.*` modules (commands, scripts, files, facts, firmware, reboot over SSH).

Connection settings are not arguments: they come from the inventory (`ansible_host`,
`ansible_port`, `ansible_user`, and `cluster.ssh`: user, port, key, known_hosts, jump_host).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from pitstop.errors import ErrorType, non_retryable_types
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults
from pitstop.runbook.durations import Duration
from pitstop.ssh import protocol

# Unreachable hosts and safe-to-repeat disconnects are retried a few times, then reported.
SSH_RETRY = RetryDefaults(
    maximum_attempts=4,
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    non_retryable_error_types=non_retryable_types(
        ErrorType.HOST_KEY_MISMATCH, ErrorType.FIRMWARE_UPDATE_FAILED, ErrorType.REBOOT_TIMEOUT
    ),
)


class _BecomeRootArgs(ModuleArgs):
    become: bool = Field(default=False, description="Run the node's commands as root through `sudo -n`.")


class _BecomeArgs(ModuleArgs):
    become: bool = Field(default=False, description="Run as root (or `become_user`) through `sudo -n`.")
    become_user: str | None = Field(default=None, description="User to become instead of root.")


class _RunArgs(_BecomeArgs):
    chdir: str | None = Field(default=None, description="Change into this directory on the host first.")
    creates: str | None = Field(
        default=None, description="Do not run when this path exists on the host (makes the task idempotent)."
    )
    removes: str | None = Field(default=None, description="Run only when this path exists on the host.")
    timeout: Duration | None = Field(
        default=None,
        gt=0,
        description=(
            "Kill the command and every process it started, on the host, after this long "
            "(SIGTERM to its process group, SIGKILL 5s later). The task fails with rc 124."
        ),
    )
    retry_on_disconnect: bool = Field(
        default=False,
        description=(
            "If the connection drops mid-command, run the command again. Only for commands that are "
            "safe to run twice; commands guarded by `creates`/`removes` are retried anyway."
        ),
    )


class CommandArgs(_RunArgs):
    cmd: str | list[str] = Field(
        min_length=1,
        description=(
            "A string runs through the host's shell (pipes and redirects work); a list is passed "
            "as exact arguments, nothing interpreted."
        ),
    )


class ScriptArgs(_RunArgs):
    src: str | None = Field(
        default=None,
        description="Script on the worker: relative to the runbook directory, or absolute where the "
        "worker policy lets modules read.",
    )
    content: str | None = Field(default=None, description="The script's text, instead of `src`.")
    args: list[str] = Field(default_factory=list, description="Arguments passed to the script.")
    executable: str | None = Field(
        default=None, description="Interpreter to run it with (e.g. /bin/bash); default: its `#!` line."
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.src is None) == (self.content is None):
            raise ValueError(
                "give exactly one of `src` (a file on the worker) or `content` (the script text)"
            )
        return self


class CopyArgs(_BecomeArgs):
    dest: str = Field(min_length=1, description="Absolute path of the file on the host.")
    content: str | None = Field(default=None, description="The file's content.")
    src: str | None = Field(
        default=None,
        description="File on the worker: relative to the runbook directory, or absolute where the "
        "worker policy lets modules read.",
    )
    mode: str | None = Field(
        default=None,
        pattern=r"^0?[0-7]{3}$|^[0-7]{4}$",
        description="Octal permissions as a quoted string, e.g. '0644' (unquoted 0644 is read as a number).",
    )
    owner: str | None = Field(default=None, description="Owner to set (needs root: `become: true`).")
    group: str | None = Field(default=None, description="Group to set.")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.src is None) == (self.content is None):
            raise ValueError("give exactly one of `src` (a file on the worker) or `content` (the text)")
        if not self.dest.startswith("/"):
            raise ValueError(f"dest must be an absolute path on the host, got {self.dest!r}")
        return self


class FactsArgs(ModuleArgs):
    updater: str = Field(
        default=protocol.UPDATER,
        description="Firmware updater whose `--current` is reported: a command name or path (quoted).",
    )

    @field_validator("updater")
    @classmethod
    def _updater(cls, value: str) -> str:
        return protocol.check_updater(value)


class FirmwareUpdateArgs(_BecomeRootArgs):
    target: str = Field(
        min_length=1, description="Firmware version to end up with, as `--current` prints it."
    )
    image: str = Field(
        min_length=1,
        description="Firmware image on the worker: relative to the runbook directory, or absolute where "
        "the worker policy lets modules read.",
    )
    image_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-fA-F]{64}$",
        description="Expected SHA-256 of the image (checked first).",
    )
    updater: str = Field(
        default=protocol.UPDATER,
        description="The node's firmware tool (see the updater contract): a command name or path.",
    )
    state_dir: str = Field(
        default=protocol.STATE_DIR,
        description="Where pitstop keeps the image, marker, log and exit status on the node (absolute).",
    )

    @field_validator("updater")
    @classmethod
    def _updater(cls, value: str) -> str:
        return protocol.check_updater(value)

    @field_validator("state_dir")
    @classmethod
    def _state_dir(cls, value: str) -> str:
        return protocol.check_state_dir(value)

    apply_timeout: Duration = Field(
        default=3600.0, gt=0, description="How long the updater may run (it is never interrupted)."
    )


class RebootArgs(_BecomeRootArgs):
    reboot_command: str = Field(default=protocol.REBOOT, description="Command that reboots the host.")
    boot_time_command: str = Field(
        default=protocol.BOOT_ID, description="Prints something that changes at every boot (as Ansible's)."
    )
    test_command: str = Field(
        default=protocol.TEST_AFTER_REBOOT,
        description="Must succeed after the reboot for the host to count as up.",
    )
    reboot_timeout: Duration = Field(default=600.0, gt=0, description="How long to wait for the new boot.")
    connect_timeout: Duration = Field(default=5.0, gt=0, description="Per connection attempt while waiting.")
    poll_interval: Duration = Field(default=1.0, gt=0, description="Pause between attempts while waiting.")


COMMAND: ModuleSpec[CommandArgs] = ModuleSpec(
    name="ssh.command",
    args_model=CommandArgs,
    summary="Run a command on the host over SSH (rc, stdout, stderr); `creates`/`removes` as in Ansible.",
    # A command can do anything: in check mode the engine reports it skipped without
    # contacting the host, unless the task says `check_mode: false`.
    supports_check_mode=False,
    start_to_close=timedelta(hours=1),
    heartbeat_timeout=timedelta(seconds=60),
    retry=SSH_RETRY,
    local="when_rerun_safe",
    free_form_arg="cmd",
)
SCRIPT: ModuleSpec[ScriptArgs] = ModuleSpec(
    name="ssh.script",
    args_model=ScriptArgs,
    summary="Upload a script to the host and run it with arguments.",
    supports_check_mode=False,
    start_to_close=timedelta(hours=1),
    heartbeat_timeout=timedelta(seconds=60),
    retry=SSH_RETRY,
    local="when_rerun_safe",
)
COPY: ModuleSpec[CopyArgs] = ModuleSpec(
    name="ssh.copy",
    args_model=CopyArgs,
    summary="Write a file on the host over SFTP: SHA-256 verified, atomic, changed only when it differs.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=30),
    heartbeat_timeout=timedelta(seconds=60),
    retry=SSH_RETRY,
)
FACTS: ModuleSpec[FactsArgs] = ModuleSpec(
    name="ssh.facts",
    args_model=FactsArgs,
    summary="Gather OS, kernel, boot id, GPUs and driver (nvidia-smi) and firmware version.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=2),
    retry=SSH_RETRY,
    local="always",
)
FIRMWARE_UPDATE: ModuleSpec[FirmwareUpdateArgs] = ModuleSpec(
    name="ssh.firmware_update",
    args_model=FirmwareUpdateArgs,
    summary="Flash firmware with the node's updater once; skip when at target; reports reboot_required.",
    supports_check_mode=True,
    disruptive=True,
    start_to_close=timedelta(hours=2),
    heartbeat_timeout=timedelta(seconds=30),
    retry=SSH_RETRY,
)
REBOOT: ModuleSpec[RebootArgs] = ModuleSpec(
    name="ssh.reboot",
    args_model=RebootArgs,
    summary="Reboot the host and wait until SSH answers with a new boot id.",
    supports_check_mode=True,
    disruptive=True,
    start_to_close=timedelta(hours=1),
    heartbeat_timeout=timedelta(seconds=30),
    retry=SSH_RETRY,
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [COMMAND, SCRIPT, COPY, FACTS, FIRMWARE_UPDATE, REBOOT]
