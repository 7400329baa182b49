"""The files rule: which worker paths a module may read and write.

Reads: the runbook directory (`PITSTOP_RUNBOOK_DIR`), the run's own work directory and the
policy's `files.read` and `files.write` (what may be written may be read back). Writes: the
run's own work directory (`<work_dir>/<run>`, created 0700 by the worker) and the policy's
`files.write`. Never, whatever a rule says: /proc, /sys, /dev,
the worker user's credential directories (~/.ssh, ~/.kube, ~/.aws...), the secrets directory,
the registered clusters and the policy file itself. A path may not start with `~`.

A path is judged by its real path (`..` and symlinks resolved), and files are then opened so
that a symlink swapped in after the check cannot lead elsewhere: writes walk from the allowed
root one directory at a time with O_NOFOLLOW (`directory_fd`), reads open the checked real
path with O_NOFOLLOW.

Relative paths are relative to the runbook directory for what a runbook ships (scripts,
firmware images, manifests) and to the run's work directory for what the run makes itself
(snapshots, downloads, scratch directories): each module says which.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pitstop.policy.effective import Dir, WorkerPolicy
from pitstop.policy.errors import ASK_OPERATOR, policy_violation
from pitstop.policy.load import current_policy

Base = Literal["runbook", "work"]
Access = Literal["read", "write"]


@dataclass(frozen=True)
class AllowedPath:
    """A path the files rule allowed: its real path and the allowed directory it lies in."""

    path: Path
    root: Path


def run_dir_name(run_id: str) -> str:
    """A directory name for a run: readable, and unique even when two run ids clean up alike."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "_", run_id).strip("_")[:60] or "run"
    return f"{cleaned}-{hashlib.sha256(run_id.encode()).hexdigest()[:8]}"


def run_work_dir(run_id: str, policy: WorkerPolicy | None = None) -> Path:
    """The run's own work directory (not created here)."""
    policy = policy or current_policy()
    return policy.work_root.path / run_dir_name(run_id)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _roots(policy: WorkerPolicy, run_id: str, access: Access) -> list[Dir]:
    work = Dir(
        path=run_work_dir(run_id, policy), origin=f"the run's work directory ({policy.work_root.origin})"
    )
    if access == "read":
        return [policy.runbook_dir, work, *policy.read, *policy.write]
    return [work, *policy.write]


def check_path(
    raw: str,
    *,
    run_id: str,
    what: str,
    access: Access,
    relative_to: Base,
    policy: WorkerPolicy | None = None,
) -> AllowedPath:
    """The allowed real path of `raw`, or a PolicyViolation naming the rule (nothing touched)."""
    policy = policy or current_policy()
    if raw.startswith("~"):
        raise policy_violation(
            f"{what}: {raw} starts with '~'; paths in runbooks never name the worker user's home "
            "(use a path under the runbook directory or the run's work directory)",
            fix=None,
        )
    given = Path(raw)
    base = policy.runbook_dir.path if relative_to == "runbook" else run_work_dir(run_id, policy)
    absolute = given if given.is_absolute() else base / given
    real = Path(os.path.realpath(absolute))
    shown = raw if real == absolute else f"{raw} (resolves to {real})"
    for denied in policy.denied:
        if denied.writes_only and access == "read":
            continue
        if _inside(real, denied.path) or _inside(Path(os.path.normpath(absolute)), denied.path):
            raise policy_violation(
                f"{what}: {shown} is in {denied.path}, which no module may {access} "
                f"({denied.origin}); choose a file elsewhere",
                fix=None,
            )
    roots = _roots(policy, run_id, access)
    for root in roots:
        if _inside(real, root.path):
            return AllowedPath(path=real, root=root.path)
    listed = ", ".join(str(r.path) for r in roots)
    raise policy_violation(
        f"{what}: {shown} is outside the directories this worker may {access} "
        f"(policy files.{access}: {listed})",
        fix=ASK_OPERATOR,
    )


def readable(
    raw: str, *, run_id: str, what: str, relative_to: Base, policy: WorkerPolicy | None = None
) -> AllowedPath:
    return check_path(raw, run_id=run_id, what=what, access="read", relative_to=relative_to, policy=policy)


def writable(
    raw: str, *, run_id: str, what: str, relative_to: Base = "work", policy: WorkerPolicy | None = None
) -> AllowedPath:
    return check_path(raw, run_id=run_id, what=what, access="write", relative_to=relative_to, policy=policy)


def swapped_symlink(path: Path) -> Exception:
    """The refusal when a symlink appeared where the check found none."""
    return policy_violation(
        f"{path}: a symlink appeared there after the worker policy allowed the path; refusing to follow it",
        fix=None,
    )


def open_nofollow(path: str | Path, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
    """os.open with O_NOFOLLOW; a symlink at the name is a PolicyViolation, other errors as usual."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise swapped_symlink(Path(path)) from None
        raise


def read_file_bytes(allowed: AllowedPath) -> bytes:
    """The file's bytes, opened without following a symlink at its name (OSError as usual)."""
    with os.fdopen(open_nofollow(allowed.path, os.O_RDONLY), "rb") as handle:
        return handle.read()


def ensure_root(allowed: AllowedPath) -> None:
    """Create the run's work directory (and the work root) when the path lies in it."""
    if not allowed.root.exists():
        allowed.root.mkdir(parents=True, exist_ok=True, mode=0o700)


@contextlib.contextmanager
def directory_fd(directory: Path, allowed: AllowedPath, *, create: bool = True) -> Iterator[int]:
    """A file descriptor of `directory` (inside allowed.root), reached from the root one
    component at a time with O_NOFOLLOW (created 0700 when missing), so a symlink anywhere
    below the root — even one swapped in after the check — fails instead of leading out."""
    ensure_root(allowed)
    relative = directory.relative_to(allowed.root)
    fd = os.open(allowed.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in relative.parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(
                    os.path.join(f"/proc/self/fd/{fd}", part)
                ):
                    raise swapped_symlink(directory) from None
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def make_dirs(directory: AllowedPath) -> None:
    """Create an allowed directory (and its parents) without following symlinks."""
    with directory_fd(directory.path, directory):
        pass
