"""`ssh.*` modules: commands, scripts, files, facts, firmware and reboot over SSH (paramiko).

Connections come from the worker's pool (`pitstop.ssh.pool`): one per (host, port, user,
jump host, credentials), reused across activities, host keys checked strictly against
known_hosts (`HostKeyMismatch` otherwise). A connection that drops mid-command is retried
only when running the command again is safe (read-only modules, `creates`/`removes`,
`retry_on_disconnect: true`, the firmware state machine); otherwise the task fails with
"connection lost while running <cmd>; not retried because it may have run".
Activities are plain `def`s: paramiko blocks, so they run on the worker's thread pool.

Remote protocol: what the modules send to a node
------------------------------------------------
Each line is one SSH `exec` request on its own session channel, sent as written (every value
pitstop puts in, paths, the updater, package names, is `shlex.quote`d, which leaves plain
names unchanged: a hostile value is one argument, never code). With `become: true` a command is sent
as `sudo -n [-u USER] -- sh -c '<command>'` (`pitstop.ssh.protocol.unwrap_become` undoes it).
A simulated node answers these; anything else it may refuse with exit status 127.

ssh.facts (all at once, on 7 parallel channels of one connection):
    cat /proc/sys/kernel/random/boot_id        -> one line, changes at every boot
    uname -r                                   -> kernel release
    cat /etc/os-release                        -> KEY=value lines (ID, VERSION_ID, PRETTY_NAME)
    hostname
    nvidia-smi --query-gpu=index,name,driver_version,vbios_version,memory.total --format=csv,noheader
        -> per GPU `0, NVIDIA H100 80GB HBM3, 550.54.15, 96.00.89.00.01, 81559 MiB`;
           exit 127 when absent (gpus: [])
    pitstop-fwupdate --current                 -> active firmware version
    pitstop-fwupdate --pending                 -> version active after the next reboot, or nothing

ssh.command / ssh.script:
    test -e PATH                               -> `creates`/`removes` (exit 0 when PATH exists)
    the command itself; with options it is wrapped (outermost first) as
        sudo -n [-u USER] -- timeout -k 5 SECONDS sh -c 'cd DIR && CMD'
    ssh.script first uploads the script over SFTP to /tmp/.pitstop-script-<hex>/<name> (mode 0700)
    and removes that directory afterwards.

ssh.copy:
    stat -c '%a %U %G %F' -- DEST && sha256sum -- DEST
    SFTP write to DIR/.NAME.pitstop-<hex>, `sha256sum` of it, chmod/chown, SFTP posix-rename onto DEST
    (with become: staged in /tmp, then `cp`, `chmod`, `chown`, `mv -f` under sudo)

ssh.firmware_update — the updater contract (a tool on the node, default `pitstop-fwupdate`):
    pitstop-fwupdate --current        print the active version; exit 0
    pitstop-fwupdate --pending        print the version staged for the next boot, or nothing; exit 0
    pitstop-fwupdate --apply IMAGE    flash IMAGE; exit 0 once its version is pending (active after
                                      the next reboot); non-zero (nothing staged) on failure
  and pitstop's files on the node, for target version T, in STATE_DIR (default /var/lib/pitstop):
    firmware-T.img     the image (uploaded over SFTP as a temp file, sha256 verified, renamed)
    firmware-T.staged  the marker: `pid=<shell pid> boot=<boot id> run=<run id> task=<task> target=T`
    firmware-T.log     the updater's output;  firmware-T.rc  its exit status
    firmware-T.failed  the marker of a failed flash (moved aside so a later run may try again)
  the sequence:
    pitstop-fwupdate --current ; pitstop-fwupdate --pending ; cat /proc/sys/kernel/random/boot_id
    cat STATE_DIR/firmware-T.staged            (exit 1: no marker)
    cat STATE_DIR/firmware-T.rc                (only when a marker exists)
    test -d /proc/PID                          (only when a marker exists and no .rc: is it still running?)
    sha256sum STATE_DIR/firmware-T.img         (already uploaded by an earlier attempt? then no upload)
    mkdir -p STATE_DIR ; SFTP write STATE_DIR/.firmware-T.img.pitstop-<hex> + chmod 0600 ;
    sha256sum STATE_DIR/.firmware-T.img.pitstop-<hex> ; SFTP posix-rename onto STATE_DIR/firmware-T.img
    rm -f STATE_DIR/firmware-T.rc
    sh -c 'echo "pid=$$ boot=B run=R task=K target=T" > STATE_DIR/firmware-T.staged && { pitstop-fwupdate
           --apply STATE_DIR/firmware-T.img > STATE_DIR/firmware-T.log 2>&1; rc=$?; echo $rc >
           STATE_DIR/firmware-T.rc; exit $rc; }'
                                               (one line; `pitstop.ssh.protocol.parse_apply` parses it)
    tail -c 16384 STATE_DIR/firmware-T.log     (the updater's output, for the result or the error)
    once T is active:    rm -f STATE_DIR/firmware-T.staged STATE_DIR/firmware-T.rc STATE_DIR/firmware-T.img
    after a failed apply: mv -f STATE_DIR/firmware-T.staged STATE_DIR/firmware-T.failed

ssh.reboot:
    cat /proc/sys/kernel/random/boot_id (or `boot_time_command`), then `reboot` (or `reboot_command`);
    then, on new connections until the timeout: the boot id again until it differs, then `whoami`.
    A simulated node goes away (refuses connections) and comes back with a new boot id; pending
    firmware becomes current at that moment.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from temporalio import activity

from activities.module_activity import module_activity
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail, make_error
from pitstop.module_args.ssh import (
    COMMAND,
    COPY,
    FACTS,
    FIRMWARE_UPDATE,
    REBOOT,
    SCRIPT,
    CommandArgs,
    CopyArgs,
    FactsArgs,
    FirmwareUpdateArgs,
    RebootArgs,
    ScriptArgs,
)
from pitstop.policy.files import read_file_bytes, readable
from pitstop.ssh import protocol
from pitstop.ssh.commands import (
    KILL_GRACE_S,
    TIMEOUT_KILLED_RC,
    TIMEOUT_RC,
    display,
    shell_command,
    with_become,
)
from pitstop.ssh.connect import Connection
from pitstop.ssh.errors import ChannelLost, connection_lost
from pitstop.ssh.execute import CommandResult, run_command
from pitstop.ssh.facts import gather_facts
from pitstop.ssh.files import format_mode, parse_mode, set_attributes, stat_file, upload
from pitstop.ssh.firmware import FirmwareJob
from pitstop.ssh.pool import default_pool
from pitstop.ssh.reboot import RebootJob
from pitstop.ssh.target import SSHTarget, target_for

_PLAIN_NAME = re.compile(r"[A-Za-z0-9._+-]{1,128}")


def _beat() -> None:
    # A local activity has no heartbeat (the workflow task's own keeps it alive).
    if not activity.info().is_local:
        activity.heartbeat()


@contextmanager
def _connection(target: SSHTarget, *, safe_to_retry: bool, why: str) -> Iterator[Connection]:
    """A pooled connection; a drop discards it and becomes a (non-)retryable error."""
    pool = default_pool()
    with pool.connection(target) as conn:
        try:
            yield conn
        except ChannelLost as lost:
            pool.discard(conn)
            raise connection_lost(lost, safe_to_retry=safe_to_retry, why_safe=why) from None


def _read_worker_file(call: ModuleCall, path: str, field: str, what: str) -> bytes:
    """A file the runbook ships to the node: only where the worker policy lets modules read
    (relative paths are under the runbook directory); refused before anything is sent."""
    allowed = readable(path, run_id=call.run_id, what=f"{call.module}: {field}", relative_to="runbook")
    try:
        return read_file_bytes(allowed)
    except OSError as exc:
        raise make_error(
            ErrorType.PRECONDITION_FAILED,
            f"{what} {path!r} cannot be read on the worker ({allowed.path}: {exc.strerror})",
        ) from None


# --- ssh.command / ssh.script ------------------------------------------------------------
def _guard(conn: Connection, creates: str | None, removes: str | None, become: bool) -> str | None:
    """Ansible's `creates`/`removes`: a reason not to run, or None."""
    for path, run_if_exists in ((creates, False), (removes, True)):
        if path is None:
            continue
        try:
            exists = run_command(conn, with_become(protocol.path_exists(path), become)).rc == 0
        except ChannelLost as lost:
            default_pool().discard(conn)
            raise connection_lost(
                lost, safe_to_retry=True, why_safe="checking a path changes nothing"
            ) from None
        if exists != run_if_exists:
            return f"Did not run command since {path!r} {'exists' if exists else 'does not exist'}"
    return None


def _command_result(
    result: CommandResult, shown: str, args: CommandArgs | ScriptArgs, host: str
) -> ModuleResult:
    data: dict[str, Any] = {"cmd": shown, "delta_s": round(result.elapsed_s, 3)}
    timed_out = args.timeout is not None and (
        result.deadline_passed
        or (result.rc in (TIMEOUT_RC, TIMEOUT_KILLED_RC) and result.elapsed_s >= args.timeout * 0.99)
    )
    msg = ""
    if timed_out:
        data["timed_out"] = True
        msg = (
            f"command timed out after {args.timeout:g}s on {host}; it and the processes it started were "
            "killed on the host"
        )
    elif result.rc != 0:
        msg = "non-zero return code"
        if args.become and "a password is required" in result.stderr:
            msg = (
                f"become failed on {host}: sudo wants a password for the SSH user; pitstop runs "
                "`sudo -n` and needs passwordless sudo (NOPASSWD) for it"
            )
    return ModuleResult(
        changed=True,
        failed=timed_out or result.rc != 0,
        msg=msg,
        rc=result.rc,
        stdout=result.stdout,
        stderr=result.stderr,
        data=data,
    )


def _run_user_command(
    target: SSHTarget,
    args: CommandArgs | ScriptArgs,
    conn: Connection,
    argv: str | list[str],
) -> ModuleResult:
    command = shell_command(
        argv, chdir=args.chdir, timeout_s=args.timeout, become=args.become, become_user=args.become_user
    )
    shown = display(argv)
    # Locally, wait a little longer than the host's own kill, so its exit status arrives.
    deadline = args.timeout + KILL_GRACE_S + 10 if args.timeout is not None else None
    result = run_command(conn, command, display=shown, deadline_s=deadline, heartbeat=_beat)
    return _command_result(result, shown, args, target.name)


def _retry_reason(args: CommandArgs | ScriptArgs) -> tuple[bool, str]:
    if args.creates or args.removes:
        return True, "the command is guarded by creates/removes"
    if args.retry_on_disconnect:
        return True, "the task sets retry_on_disconnect"
    return False, ""


def _skipped_in_check_mode(call: ModuleCall) -> ModuleResult:
    return ModuleResult(
        skipped=True,
        msg=(
            f"{call.module} cannot run in check mode; skipped (set `check_mode: false` on the task to run it)"
        ),
    )


@module_activity(COMMAND)
def ssh_command(call: ModuleCall, args: CommandArgs) -> ModuleResult:
    if call.check_mode:
        return _skipped_in_check_mode(call)
    target = target_for(call)
    safe, why = _retry_reason(args)
    with _connection(target, safe_to_retry=safe, why=why) as conn:
        reason = _guard(conn, args.creates, args.removes, args.become)
        if reason is not None:
            return ModuleResult(
                changed=False, msg=reason, rc=0, stdout="", stderr="", data={"cmd": display(args.cmd)}
            )
        return _run_user_command(target, args, conn, args.cmd)


def script_name(src: str | None) -> str:
    """The file name the script gets on the node: its source's base name when that is a plain
    file name, else `script`. The directory is always a fresh 0700 one pitstop makes; a name
    like `..`, empty or with odd characters must not make the upload land anywhere else."""
    name = posixpath.basename(src or "")
    return name if _PLAIN_NAME.fullmatch(name) and name not in {".", ".."} else "script"


@module_activity(SCRIPT)
def ssh_script(call: ModuleCall, args: ScriptArgs) -> ModuleResult:
    if call.check_mode:
        return _skipped_in_check_mode(call)
    body = (
        args.content.encode()
        if args.content is not None
        else _read_worker_file(call, args.src or "", "src", "script")
    )
    name = script_name(args.src)
    target = target_for(call)
    safe, why = _retry_reason(args)
    with _connection(target, safe_to_retry=safe, why=why) as conn:
        reason = _guard(conn, args.creates, args.removes, args.become)
        if reason is not None:
            return ModuleResult(changed=False, msg=reason, rc=0, stdout="", stderr="")
        # On the node, not the worker: a fresh 0700 directory pitstop names, and a file name
        # `script_name` reduced to a plain name, so no runbook value chooses where it lands.
        # (The worker-side `src` was read through the policy's file check in `read_file_bytes`.)
        directory = f"/tmp/.pitstop-script-{uuid.uuid4().hex[:12]}"
        path = f"{directory}/{name}"
        sftp = conn.open_sftp()
        try:
            sftp.mkdir(directory, 0o700)
            with sftp.open(path, "wb") as handle:
                handle.write(body)
            sftp.chmod(path, 0o700)
        except OSError as exc:
            raise make_error(
                ErrorType.PRECONDITION_FAILED,
                f"cannot upload the script to {directory} on {target.name}: {exc}",
            ) from None
        finally:
            sftp.close()
        try:
            argv = [*([args.executable] if args.executable else []), path, *args.args]
            result = _run_user_command(target, args, conn, argv)
        finally:
            if conn.alive():
                run_command(conn, f"rm -rf -- {shlex.quote(directory)}")
        result.data["script"] = args.src or "(content)"
        return result


# --- ssh.copy ----------------------------------------------------------------------------
@module_activity(COPY)
def ssh_copy(call: ModuleCall, args: CopyArgs) -> ModuleResult:
    data = (
        args.content.encode()
        if args.content is not None
        else _read_worker_file(call, args.src or "", "src", "src")
    )
    digest = hashlib.sha256(data).hexdigest()
    want_mode = parse_mode(args.mode) if args.mode else None
    target = target_for(call)
    with _connection(target, safe_to_retry=True, why="copying the same content again is harmless") as conn:
        current = stat_file(conn, args.dest, args.become, args.become_user)
        content_differs = not current.exists or current.sha256 != digest
        mode_differs = want_mode is not None and current.mode != want_mode
        owner_differs = current.exists and (
            (args.owner is not None and current.owner != args.owner)
            or (args.group is not None and current.group != args.group)
        )
        changes = [
            *(["content" if current.exists else "created"] if content_differs else []),
            *(
                [f"mode {format_mode(current.mode)} -> {format_mode(want_mode)}"]
                if mode_differs and current.exists
                else []
            ),
            *(["owner/group"] if owner_differs else []),
        ]
        result_data: dict[str, Any] = {
            "dest": args.dest,
            "checksum": digest,
            "size": len(data),
            "mode": format_mode(want_mode if want_mode is not None else current.mode),
        }
        diff = f"{args.dest}: {', '.join(changes)}" if changes else None
        if not changes:
            return ModuleResult(changed=False, msg=f"{args.dest} is up to date", data=result_data)
        if call.check_mode:
            return ModuleResult(changed=True, msg=f"would update {diff}", data=result_data, diff=diff)
        if content_differs:
            upload(
                conn,
                data,
                args.dest,
                mode=want_mode if want_mode is not None else current.mode,
                owner=args.owner,
                group=args.group,
                become=args.become,
                become_user=args.become_user,
                heartbeat=_beat,
            )
        else:
            set_attributes(
                conn,
                args.dest,
                mode=want_mode if mode_differs else None,
                owner=args.owner if owner_differs else None,
                group=args.group if owner_differs else None,
                become=args.become,
                become_user=args.become_user,
            )
        after = stat_file(conn, args.dest, args.become, args.become_user)
        if after.sha256 != digest:
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"{args.dest} on {target.name} has sha256 {after.sha256} after the copy, not {digest}",
            )
        result_data["mode"] = format_mode(after.mode)
        return ModuleResult(changed=True, msg=f"updated {diff}", data=result_data, diff=diff)


# --- ssh.facts ---------------------------------------------------------------------------
@module_activity(FACTS)
def ssh_facts(call: ModuleCall, args: FactsArgs) -> ModuleResult:
    target = target_for(call)
    with _connection(target, safe_to_retry=True, why="gathering facts changes nothing") as conn:
        facts = gather_facts(conn, args.updater)
    os_name = facts["os"]["pretty_name"] or facts["os"]["id"] or "unknown OS"
    gpus = f"{facts['gpu_count']} GPU(s), driver {facts['gpu_driver']}" if facts["gpus"] else "no GPUs"
    firmware = f", firmware {facts['firmware']}" if facts["firmware"] else ""
    return ModuleResult(msg=f"{os_name}, kernel {facts['kernel']}, {gpus}{firmware}", data=facts)


# --- ssh.firmware_update -----------------------------------------------------------------
@module_activity(FIRMWARE_UPDATE)
def ssh_firmware_update(call: ModuleCall, args: FirmwareUpdateArgs) -> ModuleResult:
    image = _read_worker_file(call, args.image, "image", "firmware image")
    digest = hashlib.sha256(image).hexdigest()
    if args.image_sha256 and digest != args.image_sha256.lower():
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"firmware image {args.image!r} has sha256 {digest}, "
            f"not the expected {args.image_sha256.lower()}",
        )
    target = target_for(call)
    with _connection(target, safe_to_retry=True, why="the flash is tracked on the node and resumed") as conn:
        job = FirmwareJob(
            conn=conn,
            target=args.target,
            updater=args.updater,
            files=protocol.FirmwareFiles(args.state_dir, args.target),
            run_id=call.run_id,
            task_path=call.task_path,
            become=args.become,
            heartbeat=_beat,
            apply_timeout_s=args.apply_timeout,
        )
        try:
            outcome = job.run(None if call.check_mode else image, call.check_mode)
        except ValueError as exc:
            raise make_error(ErrorType.INVALID_ARGS, f"ssh.firmware_update: {exc}") from None
    return ModuleResult(
        changed=outcome.changed,
        msg=outcome.msg,
        stdout=outcome.log_tail or None,
        data={
            "target": args.target,
            "previous": outcome.previous,
            "current": outcome.current,
            "pending": outcome.pending,
            "reboot_required": outcome.reboot_required,
            "flashed": outcome.flashed,
            "steps": outcome.steps,
            "image_sha256": digest,
        },
    )


# --- ssh.reboot --------------------------------------------------------------------------
def _resume_boot_id() -> str | None:
    """The boot id an earlier attempt recorded before it sent the reboot, if any."""
    for detail in activity.info().heartbeat_details:
        if isinstance(detail, dict) and isinstance(detail.get("boot_id_before"), str):
            return str(detail["boot_id_before"])
    return None


@module_activity(REBOOT)
def ssh_reboot(call: ModuleCall, args: RebootArgs) -> ModuleResult:
    if call.check_mode:
        return ModuleResult(
            changed=True, msg=f"would reboot {call.host} and wait up to {args.reboot_timeout:g}s"
        )
    job = RebootJob(
        pool=default_pool(),
        target=target_for(call),
        reboot_command=args.reboot_command,
        boot_time_command=args.boot_time_command,
        test_command=args.test_command,
        reboot_timeout_s=args.reboot_timeout,
        connect_timeout_s=args.connect_timeout,
        poll_s=args.poll_interval,
        become=args.become,
        record=lambda details: activity.heartbeat(details),
    )
    try:
        outcome = job.run(_resume_boot_id())
    except ChannelLost as lost:
        # Lost before the reboot was sent (while reading the boot id): nothing happened yet.
        raise connection_lost(lost, safe_to_retry=True, why_safe="the reboot was not sent") from None
    return ModuleResult(
        changed=True,
        msg=(
            f"rebooted in {outcome.elapsed_s:.1f}s "
            f"(boot id {outcome.boot_id_before[:8]} -> {outcome.boot_id_after[:8]})"
        ),
        data={
            "boot_id_before": outcome.boot_id_before,
            "boot_id_after": outcome.boot_id_after,
            "went_away": outcome.went_away,
            "elapsed_s": round(outcome.elapsed_s, 1),
            "resumed": outcome.resumed,
        },
    )


SSH_ACTIVITIES = [ssh_command, ssh_script, ssh_copy, ssh_facts, ssh_firmware_update, ssh_reboot]
