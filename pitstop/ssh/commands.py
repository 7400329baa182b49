"""The shell text pitstop sends for a user's command: quoting, `chdir`, `become`, timeout.

A command with no options is sent verbatim, so what runs on the host is exactly what the
runbook says. Options wrap it, outermost first:

    sudo -n [-u USER] --  timeout -k 5 SECONDS  sh -c 'cd DIR && CMD'

`timeout` (coreutils) runs the command in a new process group and, when time is up, sends
SIGTERM to the whole group, then SIGKILL 5 s later: the command and everything it started
stop on the host even if pitstop's connection is gone. It exits 124 on timeout.
"""

from __future__ import annotations

import shlex

KILL_GRACE_S = 5
TIMEOUT_RC = 124
# `timeout` exits 137 when it had to SIGKILL the group after the grace period.
TIMEOUT_KILLED_RC = 137


def user_command(cmd: str | list[str]) -> str:
    """A string runs through the remote shell (pipes, redirects); a list is exact argv."""
    return cmd if isinstance(cmd, str) else shlex.join(cmd)


def become_prefix(become: bool, become_user: str | None = None) -> list[str]:
    """`sudo -n`: never prompt; a password requirement fails at once with sudo's message."""
    if not become:
        return []
    return ["sudo", "-n", *(["-u", become_user] if become_user else []), "--"]


def with_become(command: str, become: bool, become_user: str | None = None) -> str:
    """`command` (shell text) run as root or `become_user` through `sudo -n sh -c`."""
    if not become:
        return command
    return shlex.join([*become_prefix(True, become_user), "sh", "-c", command])


def shell_command(
    cmd: str | list[str],
    *,
    chdir: str | None = None,
    timeout_s: float | None = None,
    become: bool = False,
    become_user: str | None = None,
) -> str:
    inner = user_command(cmd)
    if chdir:
        inner = f"cd {shlex.quote(chdir)} && {inner}"
    if timeout_s is None and not become and not chdir:
        return inner
    argv = become_prefix(become, become_user)
    if timeout_s is not None:
        argv += ["timeout", "-k", str(KILL_GRACE_S), f"{timeout_s:g}"]
    if not argv:
        return inner
    return shlex.join([*argv, "sh", "-c", inner])


def display(cmd: str | list[str], limit: int = 200) -> str:
    """The command as shown in messages: quoted, shortened."""
    text = user_command(cmd)
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
