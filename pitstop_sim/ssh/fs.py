"""A node's file system, in memory: the few directories pitstop's SSH modules write to
(/var/lib/pitstop for firmware state, /tmp for uploads and scripts, the user's home).

Errors are `OSError`s with real errno values, so the shell prints coreutils' messages
("No such file or directory") and SFTP answers with the right status codes. Files survive a
reboot except under /tmp, as on a real node.
"""

from __future__ import annotations

import errno
import os
import posixpath
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["file", "dir"]

# Directories every node has; files pitstop writes must go below one of these (or a
# directory created with `mkdir -p`).
BASE_DIRS = ("/", "/etc", "/tmp", "/var", "/var/lib", "/var/log", "/root", "/home", "/usr", "/usr/local")


def fs_error(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


@dataclass
class Entry:
    kind: Kind
    mode: int
    owner: str
    group: str
    data: bytearray = field(default_factory=bytearray)
    mtime: float = field(default_factory=time.time)

    @property
    def size(self) -> int:
        return len(self.data)


class MemoryFS:
    """Paths are absolute after `resolve()`; every method is thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._entries: dict[str, Entry] = {}
        for path in BASE_DIRS:
            self._entries[path] = Entry("dir", 0o1777 if path == "/tmp" else 0o755, "root", "root")

    @staticmethod
    def resolve(path: str, cwd: str = "/") -> str:
        if not path:
            raise fs_error(errno.ENOENT, path)
        joined = path if path.startswith("/") else posixpath.join(cwd, path)
        normal = posixpath.normpath(joined)
        # POSIX keeps a leading `//`; the simulated node does not care.
        return "/" + normal.lstrip("/")

    # --- reading ------------------------------------------------------------------------------
    def get(self, path: str) -> Entry:
        with self._lock:
            entry = self._entries.get(path)
            if entry is None:
                raise fs_error(errno.ENOENT, path)
            return entry

    def exists(self, path: str) -> bool:
        with self._lock:
            return path in self._entries

    def is_dir(self, path: str) -> bool:
        with self._lock:
            entry = self._entries.get(path)
            return entry is not None and entry.kind == "dir"

    def read(self, path: str) -> bytes:
        with self._lock:
            entry = self.get(path)
            if entry.kind == "dir":
                raise fs_error(errno.EISDIR, path)
            return bytes(entry.data)

    def listdir(self, path: str) -> list[str]:
        with self._lock:
            if not self.get(path).kind == "dir":
                raise fs_error(errno.ENOTDIR, path)
            prefix = path.rstrip("/") + "/"
            return sorted(
                p[len(prefix) :]
                for p in self._entries
                if p.startswith(prefix) and "/" not in p[len(prefix) :] and p != "/"
            )

    # --- writing ------------------------------------------------------------------------------
    def _parent_dir(self, path: str) -> None:
        parent = posixpath.dirname(path)
        entry = self._entries.get(parent)
        if entry is None:
            raise fs_error(errno.ENOENT, path)
        if entry.kind != "dir":
            raise fs_error(errno.ENOTDIR, path)

    def open_file(
        self,
        path: str,
        owner: str,
        *,
        create: bool,
        truncate: bool,
        exclusive: bool = False,
        mode: int = 0o644,
    ) -> Entry:
        """The file entry to read or write, created or truncated as asked."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None:
                if exclusive:
                    raise fs_error(errno.EEXIST, path)
                if entry.kind == "dir":
                    raise fs_error(errno.EISDIR, path)
                if truncate:
                    entry.data.clear()
                    entry.mtime = time.time()
                return entry
            if not create:
                raise fs_error(errno.ENOENT, path)
            self._parent_dir(path)
            entry = Entry("file", mode, owner, owner)
            self._entries[path] = entry
            return entry

    def write(self, path: str, data: bytes, owner: str, *, append: bool = False, mode: int = 0o644) -> None:
        with self._lock:
            entry = self.open_file(path, owner, create=True, truncate=not append, mode=mode)
            entry.data += data
            entry.mtime = time.time()

    def write_at(self, entry: Entry, offset: int, data: bytes) -> None:
        with self._lock:
            if offset > len(entry.data):
                entry.data += b"\0" * (offset - len(entry.data))
            entry.data[offset : offset + len(data)] = data
            entry.mtime = time.time()

    def mkdir(self, path: str, owner: str, *, parents: bool = False, mode: int = 0o755) -> None:
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None:
                if parents and entry.kind == "dir":
                    return
                raise fs_error(errno.EEXIST, path)
            if parents:
                parent = posixpath.dirname(path)
                if parent != path:
                    self.mkdir(parent, owner, parents=True, mode=mode)
            self._parent_dir(path)
            self._entries[path] = Entry("dir", mode, owner, owner)

    def remove(self, path: str) -> None:
        with self._lock:
            if self.get(path).kind == "dir":
                raise fs_error(errno.EISDIR, path)
            del self._entries[path]

    def rmdir(self, path: str) -> None:
        with self._lock:
            if self.get(path).kind != "dir":
                raise fs_error(errno.ENOTDIR, path)
            if self.listdir(path):
                raise fs_error(errno.ENOTEMPTY, path)
            if path in BASE_DIRS:
                raise fs_error(errno.EBUSY, path)
            del self._entries[path]

    def remove_tree(self, path: str) -> None:
        with self._lock:
            self.get(path)
            prefix = path.rstrip("/") + "/"
            for p in [p for p in self._entries if p == path or p.startswith(prefix)]:
                if p not in BASE_DIRS:
                    del self._entries[p]

    def rename(self, src: str, dest: str, *, replace: bool = True) -> None:
        """rename(2): atomic, replaces a file at `dest` (unless `replace` is False, as SFTP's rename)."""
        with self._lock:
            entry = self.get(src)
            target = self._entries.get(dest)
            if target is not None:
                if not replace:
                    raise fs_error(errno.EEXIST, dest)
                if target.kind == "dir":
                    raise fs_error(errno.EISDIR, dest)
            self._parent_dir(dest)
            if entry.kind == "dir":
                prefix = src.rstrip("/") + "/"
                for p in [p for p in self._entries if p.startswith(prefix)]:
                    self._entries[dest + p[len(src) :]] = self._entries.pop(p)
            self._entries[dest] = self._entries.pop(src)

    def copy(self, src: str, dest: str, owner: str) -> None:
        with self._lock:
            data = self.read(src)
            mode = self.get(src).mode
            self.write(dest, data, owner, mode=mode)

    def chmod(self, path: str, mode: int) -> None:
        with self._lock:
            self.get(path).mode = mode & 0o7777

    def chown(self, path: str, owner: str | None, group: str | None) -> None:
        with self._lock:
            entry = self.get(path)
            entry.owner = owner or entry.owner
            entry.group = group or entry.group

    def clear_dir(self, path: str) -> None:
        """Empty a directory (what a reboot does to /tmp)."""
        with self._lock:
            prefix = path.rstrip("/") + "/"
            for p in [p for p in self._entries if p.startswith(prefix)]:
                del self._entries[p]
