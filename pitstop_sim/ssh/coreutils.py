"""The coreutils pitstop's SSH modules use, on the node's in-memory file system, with GNU's
options and messages: cat, test/[, sha256sum, stat -c, mkdir, rm, rmdir, mv, cp, chmod,
chown, touch, ls, tail, echo, sleep, true, false, whoami, id, hostname, uname."""

from __future__ import annotations

import hashlib
import posixpath
import re

from pitstop_sim.ssh.context import RC_USAGE, ExecContext, Handler
from pitstop_sim.ssh.nodefiles import read_file

KIND = {"dir": "directory", "file": "regular file"}


def _operands(argv: list[str], flags_with_value: str = "") -> tuple[dict[str, str], list[str]]:
    """Short options (bundled `-rf` too) and operands; `--` ends the options."""
    opts: dict[str, str] = {}
    rest: list[str] = []
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":
            rest.extend(args)
            break
        if arg.startswith("-") and len(arg) > 1 and not rest:
            for i, flag in enumerate(arg[1:]):
                if flag in flags_with_value:
                    opts[flag] = arg[i + 2 :] or next(args, "")
                    break
                opts[flag] = ""
            continue
        rest.append(arg)
    return opts, rest


def _fail(ctx: ExecContext, message: str, rc: int = 1) -> int:
    ctx.error(message + "\n")
    return rc


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def cat(argv: list[str], ctx: ExecContext) -> int:
    _, files = _operands(argv)
    rc = 0
    for name in files:
        try:
            ctx.write(read_file(ctx, ctx.path(name)))
        except OSError as exc:
            rc = _fail(ctx, f"cat: {name}: {_why(exc)}")
    return rc


def _test(args: list[str], ctx: ExecContext) -> bool:
    if args[:1] == ["!"]:
        return not _test(args[1:], ctx)
    if len(args) == 1:
        return args[0] != ""
    if len(args) == 2:
        op, operand = args
        if op == "-n":
            return operand != ""
        if op == "-z":
            return operand == ""
        path = ctx.path(operand) if operand else ""
        proc = re.fullmatch(r"/proc/(\d+)", path)
        if proc:
            return op in ("-e", "-d") and ctx.host.running(int(proc.group(1)))
        if not path or not ctx.fs.exists(path):
            return False
        entry = ctx.fs.get(path)
        checks = {
            "-e": True,
            "-f": entry.kind == "file",
            "-d": entry.kind == "dir",
            "-s": entry.size > 0,
            "-r": True,
            "-w": True,
            "-x": bool(entry.mode & 0o111),
        }
        if op not in checks:
            raise ValueError(f"{op}: unexpected operator")
        return checks[op]
    if len(args) == 3 and args[1] in ("=", "!="):
        return (args[0] == args[2]) == (args[1] == "=")
    raise ValueError("unexpected operator")


def test(argv: list[str], ctx: ExecContext) -> int:
    args = argv[1:]
    if argv[0] == "[":
        if args[-1:] != ["]"]:
            return _fail(ctx, "sh: 1: [: missing ]", RC_USAGE)
        args = args[:-1]
    if not args:
        return 1
    try:
        return 0 if _test(args, ctx) else 1
    except ValueError as exc:
        return _fail(ctx, f"sh: 1: {argv[0]}: {exc}", RC_USAGE)


def sha256sum(argv: list[str], ctx: ExecContext) -> int:
    _, files = _operands(argv)
    rc = 0
    for name in files:
        try:
            digest = hashlib.sha256(read_file(ctx, ctx.path(name))).hexdigest()
        except OSError as exc:
            rc = _fail(ctx, f"sha256sum: {name}: {_why(exc)}")
            continue
        ctx.write(f"{digest}  {name}\n")
    return rc


def _stat_line(fmt: str, name: str, ctx: ExecContext) -> str:
    entry = ctx.fs.get(ctx.path(name))
    kind = KIND[entry.kind] if entry.kind == "dir" or entry.size else "regular empty file"
    values = {
        "a": f"{entry.mode & 0o7777:o}",
        "U": entry.owner,
        "G": entry.group,
        "u": "0" if entry.owner == "root" else "1000",
        "g": "0" if entry.group == "root" else "1000",
        "F": kind,
        "s": str(entry.size),
        "n": name,
        "Y": str(int(entry.mtime)),
        "%": "%",
    }
    return re.sub(r"%(.)", lambda m: values.get(m.group(1), m.group(0)), fmt)


def stat(argv: list[str], ctx: ExecContext) -> int:
    args = list(argv[1:])
    fmt = "%n %s %a %U %G %F"
    files: list[str] = []
    while args:
        arg = args.pop(0)
        if arg == "-c" and args:
            fmt = args.pop(0)
        elif arg.startswith("--format=") or arg.startswith("--printf="):
            fmt = arg.split("=", 1)[1]
        elif arg == "--":
            files.extend(args)
            break
        else:
            files.append(arg)
    if not files:
        return _fail(ctx, "stat: missing operand", RC_USAGE)
    rc = 0
    for name in files:
        try:
            ctx.write(_stat_line(fmt, name, ctx) + "\n")
        except OSError as exc:
            rc = _fail(ctx, f"stat: cannot statx '{name}': {_why(exc)}")
    return rc


def mkdir(argv: list[str], ctx: ExecContext) -> int:
    opts, dirs = _operands(argv, "m")
    mode = int(opts["m"], 8) if opts.get("m") else 0o755
    rc = 0
    for name in dirs:
        try:
            ctx.fs.mkdir(ctx.path(name), ctx.user, parents="p" in opts, mode=mode)
        except OSError as exc:
            rc = _fail(ctx, f"mkdir: cannot create directory '{name}': {_why(exc)}")
    return rc


def rm(argv: list[str], ctx: ExecContext) -> int:
    opts, paths = _operands(argv)
    recursive = "r" in opts or "R" in opts
    rc = 0
    for name in paths:
        path = ctx.path(name)
        try:
            if recursive and ctx.fs.is_dir(path):
                ctx.fs.remove_tree(path)
            else:
                ctx.fs.remove(path)
        except FileNotFoundError:
            if "f" not in opts:
                rc = _fail(ctx, f"rm: cannot remove '{name}': No such file or directory")
        except OSError as exc:
            rc = _fail(ctx, f"rm: cannot remove '{name}': {_why(exc)}")
    return rc


def rmdir(argv: list[str], ctx: ExecContext) -> int:
    _, dirs = _operands(argv)
    rc = 0
    for name in dirs:
        try:
            ctx.fs.rmdir(ctx.path(name))
        except OSError as exc:
            rc = _fail(ctx, f"rmdir: failed to remove '{name}': {_why(exc)}")
    return rc


def _two(argv: list[str], ctx: ExecContext, what: str) -> tuple[str, str] | None:
    _, paths = _operands(argv)
    if len(paths) != 2:
        ctx.error(f"{what}: expected a source and a destination (the simulated node supports no more)\n")
        return None
    src, dest = ctx.path(paths[0]), ctx.path(paths[1])
    if ctx.fs.is_dir(dest):
        dest = posixpath.join(dest, posixpath.basename(src))
    return src, dest


def mv(argv: list[str], ctx: ExecContext) -> int:
    pair = _two(argv, ctx, "mv")
    if pair is None:
        return RC_USAGE
    try:
        ctx.fs.rename(*pair)
    except FileNotFoundError:
        return _fail(ctx, f"mv: cannot stat '{pair[0]}': No such file or directory")
    except OSError as exc:
        return _fail(ctx, f"mv: cannot move '{pair[0]}' to '{pair[1]}': {_why(exc)}")
    return 0


def cp(argv: list[str], ctx: ExecContext) -> int:
    pair = _two(argv, ctx, "cp")
    if pair is None:
        return RC_USAGE
    try:
        ctx.fs.copy(pair[0], pair[1], ctx.user)
    except FileNotFoundError:
        return _fail(ctx, f"cp: cannot stat '{pair[0]}': No such file or directory")
    except OSError as exc:
        return _fail(ctx, f"cp: cannot create regular file '{pair[1]}': {_why(exc)}")
    return 0


def _mode(spec: str, current: int) -> int | None:
    if re.fullmatch(r"[0-7]{1,4}", spec):
        return int(spec, 8)
    match = re.fullmatch(r"([ugoa]*)([+-])([rwx]+)", spec)
    if match is None:
        return None
    who = match.group(1) or "a"
    bits = sum({"r": 4, "w": 2, "x": 1}[c] for c in match.group(3))
    mask = 0
    for w in who:
        mask |= {"u": bits << 6, "g": bits << 3, "o": bits, "a": bits * 0o111}[w]
    return current | mask if match.group(2) == "+" else current & ~mask


def chmod(argv: list[str], ctx: ExecContext) -> int:
    _, args = _operands(argv)
    if len(args) < 2:
        return _fail(ctx, "chmod: missing operand", RC_USAGE)
    rc = 0
    for name in args[1:]:
        try:
            path = ctx.path(name)
            mode = _mode(args[0], ctx.fs.get(path).mode)
            if mode is None:
                return _fail(ctx, f"chmod: invalid mode: '{args[0]}'")
            ctx.fs.chmod(path, mode)
        except OSError as exc:
            rc = _fail(ctx, f"chmod: cannot access '{name}': {_why(exc)}")
    return rc


def chown(argv: list[str], ctx: ExecContext) -> int:
    _, args = _operands(argv)
    if len(args) < 2:
        return _fail(ctx, "chown: missing operand", RC_USAGE)
    owner, _, group = args[0].partition(":")
    rc = 0
    for name in args[1:]:
        try:
            ctx.fs.chown(ctx.path(name), owner or None, group or None)
        except OSError as exc:
            rc = _fail(ctx, f"chown: cannot access '{name}': {_why(exc)}")
    return rc


def touch(argv: list[str], ctx: ExecContext) -> int:
    _, files = _operands(argv)
    rc = 0
    for name in files:
        try:
            ctx.fs.write(ctx.path(name), b"", ctx.user, append=True)
        except OSError as exc:
            rc = _fail(ctx, f"touch: cannot touch '{name}': {_why(exc)}")
    return rc


def ls(argv: list[str], ctx: ExecContext) -> int:
    _, paths = _operands(argv)
    rc = 0
    for name in paths or ["."]:
        path = ctx.path(name)
        try:
            ctx.fs.get(path)
            names = ctx.fs.listdir(path) if ctx.fs.is_dir(path) else [name]
        except OSError as exc:
            rc = _fail(ctx, f"ls: cannot access '{name}': {_why(exc)}", RC_USAGE)
            continue
        ctx.write("".join(f"{n}\n" for n in names))
    return rc


def tail(argv: list[str], ctx: ExecContext) -> int:
    opts, files = _operands(argv, "cn")
    try:
        count = int(opts.get("c") or opts.get("n") or "10")
    except ValueError:
        return _fail(ctx, "tail: invalid number of bytes or lines", RC_USAGE)
    rc = 0
    for name in files:
        try:
            data = read_file(ctx, ctx.path(name))
        except OSError as exc:
            rc = _fail(ctx, f"tail: cannot open '{name}' for reading: {_why(exc)}")
            continue
        if "c" in opts:
            ctx.write(data[-count:] if count else b"")
        else:
            lines = data.splitlines(keepends=True)
            ctx.write(b"".join(lines[-count:] if count else []))
    return rc


def echo(argv: list[str], ctx: ExecContext) -> int:
    args = argv[1:]
    newline = "\n"
    if args[:1] == ["-n"]:
        args, newline = args[1:], ""
    ctx.write(" ".join(args) + newline)
    return 0


def duration_seconds(text: str) -> float | None:
    match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)", text)
    if match is None:
        return None
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def sleep(argv: list[str], ctx: ExecContext) -> int:
    total = 0.0
    for arg in argv[1:]:
        seconds = duration_seconds(arg)
        if seconds is None:
            return _fail(ctx, f"sleep: invalid time interval '{arg}'")
        total += seconds
    if not argv[1:]:
        return _fail(ctx, "sleep: missing operand")
    ctx.sleep(total)
    return 0


def whoami(argv: list[str], ctx: ExecContext) -> int:
    ctx.write(ctx.user + "\n")
    return 0


def id_(argv: list[str], ctx: ExecContext) -> int:
    uid = 0 if ctx.user == "root" else 1000
    opts, _ = _operands(argv)
    if "u" in opts:
        ctx.write(f"{ctx.user if 'n' in opts else uid}\n")
    else:
        ctx.write(f"uid={uid}({ctx.user}) gid={uid}({ctx.user}) groups={uid}({ctx.user})\n")
    return 0


def hostname(argv: list[str], ctx: ExecContext) -> int:
    ctx.write(ctx.node + "\n")
    return 0


def uname(argv: list[str], ctx: ExecContext) -> int:
    opts, _ = _operands(argv)
    kernel = ctx.host.backend.profile(ctx.node).kernel_version
    parts = {
        "s": "Linux",
        "n": ctx.node,
        "r": kernel,
        "v": "#1 SMP PREEMPT_DYNAMIC",
        "m": "x86_64",
        "o": "GNU/Linux",
    }
    wanted = "snrvmo" if "a" in opts else "".join(f for f in "snrvmo" if f in opts) or "s"
    ctx.write(" ".join(parts[f] for f in wanted) + "\n")
    return 0


def true(argv: list[str], ctx: ExecContext) -> int:
    return 0


def false(argv: list[str], ctx: ExecContext) -> int:
    return 1


COMMANDS: dict[str, Handler] = {
    "cat": cat,
    "test": test,
    "[": test,
    "sha256sum": sha256sum,
    "stat": stat,
    "mkdir": mkdir,
    "rm": rm,
    "rmdir": rmdir,
    "mv": mv,
    "cp": cp,
    "chmod": chmod,
    "chown": chown,
    "touch": touch,
    "ls": ls,
    "tail": tail,
    "echo": echo,
    "sleep": sleep,
    "whoami": whoami,
    "id": id_,
    "hostname": hostname,
    "uname": uname,
    "true": true,
    "false": false,
    ":": true,
}
