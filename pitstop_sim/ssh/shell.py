"""A small POSIX-shell subset that runs what pitstop's SSH modules send to a node.

Understood: words with shell quoting; lists joined by `&&`, `||` and `;`; `> FILE` and
`>> FILE`; the wrappers the modules put around commands (`sudo -n [-u USER] --`,
`timeout [-k N] SECONDS`, `sh -c '...'`, `cd DIR && ...`, `VAR=value cmd`); `exit N`; scripts on the node's
file system (run line by line: `ssh.script`); pitstop's firmware apply script (recognised
whole by `protocol.parse_apply`). No variables, pipes, globs or background jobs: those get
exit status 2 with a message naming what is missing. A command that is neither a coreutil
the modules use (see `coreutils`) nor a node tool (see `nodetools`, `packages`, `kubetools`)
gets 127, as in dash.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import time
from dataclasses import replace

from pitstop.ssh import protocol
from pitstop_sim.ssh import archive, coreutils, kubetools, nodetools, packages
from pitstop_sim.ssh.context import (
    RC_NOT_FOUND,
    RC_TIMED_OUT,
    RC_USAGE,
    ExecContext,
    Handler,
    ShellExit,
    TimedOut,
)

COMMANDS: dict[str, Handler] = {
    **coreutils.COMMANDS,
    **nodetools.COMMANDS,
    **packages.COMMANDS,
    **kubetools.COMMANDS,  # its systemctl restarts services and reboots (nodetools' only reboots)
    **archive.COMMANDS,  # tar, find: the DR modules' reads of /etc/kubernetes
}
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)
BIN_DIRS = ("/bin", "/usr/bin", "/sbin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin")
LIST_OPERATORS = ("&&", "||", ";")
REDIRECTIONS = (">", ">>")


class Unsupported(Exception):
    """Shell syntax the simulated node does not implement."""


def tokenize(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    return list(lexer)


def split_list(tokens: list[str]) -> list[tuple[str | None, list[str]]]:
    """`a && b ; c` -> [(None, a), ('&&', b), (';', c)]."""
    out: list[tuple[str | None, list[str]]] = []
    operator: str | None = None
    current: list[str] = []
    for token in tokens:
        if token in LIST_OPERATORS:
            if not current:
                raise Unsupported(f"syntax error near unexpected token `{token}'")
            out.append((operator, current))
            operator, current = token, []
        elif token and set(token) <= set(";&|<>") and token not in REDIRECTIONS:
            raise Unsupported(f"'{token}' (pipes, background jobs and fd redirections are not simulated)")
        else:
            current.append(token)
    if current:
        out.append((operator, current))
    elif operator not in (None, ";"):
        raise Unsupported(f"syntax error: the command line ends with `{operator}'")
    return out


def run(text: str, ctx: ExecContext) -> int:
    """Run a command line; returns its exit status (raises TimedOut/ConnectionGone upwards)."""
    request = protocol.parse_apply(text)
    if request is not None:
        return nodetools.apply(request, _as_sudo(text, ctx))
    try:
        commands = split_list(tokenize(text))
    except ValueError as exc:
        ctx.error(f"sh: 1: Syntax error: {exc}\n")
        return RC_USAGE
    except Unsupported as exc:
        ctx.error(f"sh: 1: the simulated node does not support {exc}\n")
        return RC_USAGE
    rc = 0
    for operator, argv in commands:
        if (operator == "&&" and rc != 0) or (operator == "||" and rc == 0):
            continue
        rc = simple(argv, ctx)
    return rc


def _as_sudo(text: str, ctx: ExecContext) -> ExecContext:
    argv = text.split(" ", 4)
    if argv[:2] != ["sudo", "-n"]:
        return ctx
    user = argv[3] if argv[2:3] == ["-u"] else "root"
    return replace(ctx, user=user)


def run_shell(args: list[str], ctx: ExecContext) -> int:
    """`sh [-eux] -c SCRIPT` or `sh FILE`; `exit N` leaves this shell only."""
    rest = list(args)
    command_string = False
    while rest and rest[0].startswith("-") and rest[0] != "-":
        # Options such as -e or -x change nothing the simulated node models; -c does.
        command_string = command_string or "c" in rest.pop(0)
    try:
        if command_string:
            if not rest:
                ctx.error("sh: 0: -c requires an argument\n")
                return RC_USAGE
            return run(rest[0], ctx)
        if rest:
            return run_script(rest[0], ctx)
        ctx.error("sh: interactive shells are not simulated\n")
        return RC_USAGE
    except ShellExit as done:
        return done.rc


def run_script(path: str, ctx: ExecContext) -> int:
    try:
        text = ctx.fs.read(ctx.path(path)).decode(errors="replace")
    except OSError as exc:
        ctx.error(f"sh: 0: cannot open {path}: {exc.strerror}\n")
        return RC_USAGE
    rc = 0
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            rc = run(stripped, ctx)
    return rc


def _sudo(argv: list[str], ctx: ExecContext) -> int:
    args = argv[1:]
    user = "root"
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag == "--":
            break
        if flag == "-u" and args:
            user = args.pop(0)
    if not args:
        ctx.error("usage: sudo -n [-u user] -- command\n")
        return 1
    # No passwords on the simulated node: `sudo -n` always succeeds.
    return simple(args, replace(ctx, user=user))


def _timeout(argv: list[str], ctx: ExecContext) -> int:
    args = argv[1:]
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag in ("-k", "-s") and args:
            args.pop(0)
    seconds = coreutils.duration_seconds(args[0]) if args else None
    if seconds is None or len(args) < 2:
        ctx.error("timeout: usage: timeout [-k DURATION] DURATION COMMAND...\n")
        return 125
    deadline = time.monotonic() + seconds
    inner = replace(ctx, deadline=min(deadline, ctx.deadline) if ctx.deadline else deadline)
    try:
        return simple(args[1:], inner)
    except TimedOut:
        if time.monotonic() < deadline:
            raise  # an outer `timeout` fired first
        return RC_TIMED_OUT


def _cd(argv: list[str], ctx: ExecContext) -> int:
    target = ctx.path(argv[1] if len(argv) > 1 else "/root")
    if not ctx.fs.is_dir(target):
        ctx.error(f"sh: 1: cd: can't cd to {argv[1] if len(argv) > 1 else '~'}\n")
        return RC_USAGE
    ctx.cwd = target
    return 0


def _exit(argv: list[str], ctx: ExecContext) -> int:
    raise ShellExit(int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 0)


def _redirect(argv: list[str]) -> tuple[list[str], tuple[str, bool] | None]:
    for i, token in enumerate(argv):
        if token in REDIRECTIONS:
            if i + 1 >= len(argv):
                raise Unsupported(f"`{token}' without a file")
            return argv[:i] + argv[i + 2 :], (argv[i + 1], token == ">>")
    return argv, None


def simple(argv: list[str], ctx: ExecContext) -> int:
    """One command with its arguments (and at most one stdout redirection)."""
    ctx.check()
    try:
        argv, redirect = _redirect(argv)
    except Unsupported as exc:
        ctx.error(f"sh: 1: {exc}\n")
        return RC_USAGE
    if redirect is not None:
        return _redirected(argv, ctx, *redirect)
    while argv and ASSIGNMENT.fullmatch(argv[0]):
        argv = argv[1:]  # `DEBIAN_FRONTEND=noninteractive apt-get ...`: the node has no variables
    if not argv:
        return 0
    name = argv[0]
    base = posixpath.basename(name)
    if "/" in name and posixpath.dirname(name) not in BIN_DIRS:
        if ctx.fs.exists(ctx.path(name)):
            return run_script(name, ctx)
        ctx.error(f"sh: 1: {name}: not found\n")
        return RC_NOT_FOUND
    if base == "sudo":
        return _sudo(argv, ctx)
    if base == "timeout":
        return _timeout(argv, ctx)
    if base in ("sh", "bash", "dash"):
        return run_shell(argv[1:], ctx)
    if base in ("env", "nohup", "exec"):
        rest = [a for a in argv[1:] if "=" not in a or a.startswith("-")]
        return simple(rest, ctx) if rest else 0
    if base == "cd":
        return _cd(argv, ctx)
    if base == "exit":
        return _exit(argv, ctx)
    handler = COMMANDS.get(base)
    if handler is None:
        ctx.error(f"sh: 1: {name}: not found\n")
        return RC_NOT_FOUND
    return handler(argv, ctx)


def _redirected(argv: list[str], ctx: ExecContext, target: str, append: bool) -> int:
    path = ctx.path(target)
    try:
        ctx.fs.write(path, b"", ctx.user, append=True)
        if not append:
            ctx.fs.write(path, b"", ctx.user)
    except OSError:
        ctx.error(f"sh: 1: cannot create {target}: Directory nonexistent\n")
        return RC_USAGE
    inner = replace(ctx, out=bytearray())
    try:
        return simple(argv, inner) if argv else 0
    finally:
        # Only stdout is redirected; stderr and after-exit actions are shared with `ctx`.
        ctx.fs.write(path, bytes(inner.out), ctx.user, append=True)
