"""`tar -C DIR -cf - PATH...` and `find DIR [-type f|d] [-name PATTERN]` on a simulated node:
what `dr.pki_backup` and `dr.cert_expiry` send (see `activities/dr/remote.py`).

Files only root may read (mode 0600 owned by root: the PKI's private keys) are refused to any
other user with GNU tar's and find's own messages, so a module that forgets `become` fails here
as it would on a real node.
"""

from __future__ import annotations

import fnmatch
import io
import posixpath
import tarfile

from pitstop_sim.ssh.context import RC_USAGE, ExecContext, Handler
from pitstop_sim.ssh.coreutils import _operands
from pitstop_sim.ssh.fs import Entry


def _readable(entry: Entry, user: str) -> bool:
    return user == "root" or entry.owner == user or bool(entry.mode & 0o004)


def _walk(ctx: ExecContext, path: str) -> list[tuple[str, Entry]]:
    """`path` and everything below it, parents before children, names sorted."""
    entry = ctx.fs.get(path)
    out = [(path, entry)]
    if entry.kind == "dir":
        for name in ctx.fs.listdir(path):
            out.extend(_walk(ctx, posixpath.join(path, name)))
    return out


def tar(argv: list[str], ctx: ExecContext) -> int:
    opts, paths = _operands(argv, "Cf")
    if "c" not in opts or opts.get("f") != "-":
        ctx.error("tar: the simulated node only creates archives to stdout (tar -C DIR -cf - PATH...)\n")
        return RC_USAGE
    base = ctx.path(opts.get("C") or ".")
    buffer = io.BytesIO()
    rc = 0
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in paths:
            try:
                found = _walk(ctx, ctx.path(posixpath.join(base, name)))
            except OSError as exc:
                ctx.error(f"tar: {name}: Cannot stat: {exc.strerror}\n")
                rc = 2
                continue
            for path, entry in found:
                member = posixpath.relpath(path, base)
                if entry.kind == "file" and not _readable(entry, ctx.user):
                    ctx.error(f"tar: {member}: Cannot open: Permission denied\n")
                    rc = 2
                    continue
                info = tarfile.TarInfo(member)
                info.mode, info.mtime = entry.mode, int(entry.mtime)
                info.uname = info.gname = entry.owner
                if entry.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    archive.addfile(info)
                else:
                    info.size = entry.size
                    archive.addfile(info, io.BytesIO(bytes(entry.data)))
    if rc:
        ctx.error("tar: Exiting with failure status due to previous errors\n")
    ctx.write(buffer.getvalue())
    return rc


def find(argv: list[str], ctx: ExecContext) -> int:
    args = argv[1:]
    roots: list[str] = []
    while args and not args[0].startswith("-"):
        roots.append(args.pop(0))
    kind: str | None = None
    pattern: str | None = None
    while args:
        flag = args.pop(0)
        value = args.pop(0) if args else ""
        if flag == "-type" and value in ("f", "d"):
            kind = "file" if value == "f" else "dir"
        elif flag == "-name" and value:
            pattern = value
        else:
            ctx.error(f"find: unknown predicate `{flag}' (the simulated node knows -type f|d, -name)\n")
            return 1
    rc = 0
    for root in roots or ["."]:
        try:
            found = _walk(ctx, ctx.path(root))
        except OSError as exc:
            ctx.error(f"find: '{root}': {exc.strerror}\n")
            rc = 1
            continue
        for path, entry in found:
            if kind is not None and entry.kind != kind:
                continue
            if pattern is not None and not fnmatch.fnmatchcase(posixpath.basename(path), pattern):
                continue
            ctx.write(path + "\n")
    return rc


COMMANDS: dict[str, Handler] = {"tar": tar, "find": find}
