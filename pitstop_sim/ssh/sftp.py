"""SFTP on a simulated node, over its in-memory file system: what `ssh.copy`, `ssh.script`
and the firmware image upload use (open/read/write, stat, chmod, mkdir, remove, rename,
posix-rename, listdir)."""

from __future__ import annotations

import errno
import os
import posixpath
import stat as stat_module
from typing import Any

import paramiko
from paramiko.sftp import SFTP_OK
from typing_extensions import Buffer

from pitstop_sim.ssh.fs import Entry, fs_error
from pitstop_sim.ssh.host import NodeHost


def _attributes(entry: Entry, name: str) -> paramiko.SFTPAttributes:
    attrs = paramiko.SFTPAttributes()
    kind = stat_module.S_IFDIR if entry.kind == "dir" else stat_module.S_IFREG
    attrs.st_mode = kind | entry.mode
    attrs.st_size = entry.size
    attrs.st_uid = 0 if entry.owner == "root" else 1000
    attrs.st_gid = 0 if entry.group == "root" else 1000
    attrs.st_mtime = int(entry.mtime)
    attrs.st_atime = int(entry.mtime)
    attrs.filename = name
    return attrs


def _status(exc: OSError) -> int:
    return paramiko.SFTPServer.convert_errno(exc.errno or errno.EIO)


class SimHandle(paramiko.SFTPHandle):
    def __init__(self, host: NodeHost, path: str, entry: Entry, flags: int) -> None:
        super().__init__(flags)
        self.host = host
        self.path = path
        self.entry = entry
        self.writable = bool(flags & (os.O_WRONLY | os.O_RDWR))
        self.append = bool(flags & os.O_APPEND)

    def read(self, offset: int, length: int) -> bytes | int:
        return bytes(self.entry.data[offset : offset + length])

    def write(self, offset: int, data: Buffer) -> int:
        if not self.writable:
            return _status(fs_error(errno.EBADF, self.path))
        if self.host.down:
            return _status(fs_error(errno.EIO, self.path))
        self.host.fs.write_at(self.entry, len(self.entry.data) if self.append else offset, bytes(data))
        return SFTP_OK

    def stat(self) -> paramiko.SFTPAttributes | int:
        return _attributes(self.entry, posixpath.basename(self.path))

    def chattr(self, attr: paramiko.SFTPAttributes) -> int:
        if attr.st_mode is not None:
            self.host.fs.chmod(self.path, attr.st_mode)
        return SFTP_OK


class SimSftpServer(paramiko.SFTPServerInterface):
    """One SFTP session; `user` owns the files it creates, relative paths start in `home`."""

    def __init__(
        self, server: paramiko.ServerInterface, host: NodeHost, user: str, *args: Any, **kwargs: Any
    ) -> None:
        super().__init__(server, *args, **kwargs)
        self.host = host
        self.user = user
        self.home = "/root" if user == "root" else f"/home/{user}"

    def _path(self, path: str) -> str:
        return self.host.fs.resolve(path, self.home)

    def canonicalize(self, path: str) -> str:
        return self._path(path or ".")

    def open(self, path: str, flags: int, attr: paramiko.SFTPAttributes) -> paramiko.SFTPHandle | int:
        full = self._path(path)
        try:
            mode = attr.st_mode & 0o7777 if attr is not None and attr.st_mode is not None else 0o644
            entry = self.host.fs.open_file(
                full,
                self.user,
                create=bool(flags & os.O_CREAT),
                truncate=bool(flags & os.O_TRUNC),
                exclusive=bool(flags & os.O_EXCL),
                mode=mode,
            )
        except OSError as exc:
            return _status(exc)
        return SimHandle(self.host, full, entry, flags)

    def list_folder(self, path: str) -> list[paramiko.SFTPAttributes] | int:
        full = self._path(path)
        try:
            return [
                _attributes(self.host.fs.get(posixpath.join(full, n)), n) for n in self.host.fs.listdir(full)
            ]
        except OSError as exc:
            return _status(exc)

    def stat(self, path: str) -> paramiko.SFTPAttributes | int:
        full = self._path(path)
        try:
            return _attributes(self.host.fs.get(full), posixpath.basename(full))
        except OSError as exc:
            return _status(exc)

    def lstat(self, path: str) -> paramiko.SFTPAttributes | int:
        return self.stat(path)

    def remove(self, path: str) -> int:
        try:
            self.host.fs.remove(self._path(path))
        except OSError as exc:
            return _status(exc)
        return SFTP_OK

    def rename(self, oldpath: str, newpath: str) -> int:
        try:
            self.host.fs.rename(self._path(oldpath), self._path(newpath), replace=False)
        except OSError as exc:
            return _status(exc)
        return SFTP_OK

    def posix_rename(self, oldpath: str, newpath: str) -> int:
        try:
            self.host.fs.rename(self._path(oldpath), self._path(newpath))
        except OSError as exc:
            return _status(exc)
        return SFTP_OK

    def mkdir(self, path: str, attr: paramiko.SFTPAttributes) -> int:
        mode = attr.st_mode & 0o7777 if attr is not None and attr.st_mode is not None else 0o755
        try:
            self.host.fs.mkdir(self._path(path), self.user, mode=mode)
        except OSError as exc:
            return _status(exc)
        return SFTP_OK

    def rmdir(self, path: str) -> int:
        try:
            self.host.fs.rmdir(self._path(path))
        except OSError as exc:
            return _status(exc)
        return SFTP_OK

    def chattr(self, path: str, attr: paramiko.SFTPAttributes) -> int:
        try:
            if attr.st_mode is not None:
                self.host.fs.chmod(self._path(path), attr.st_mode)
            else:
                self.host.fs.get(self._path(path))
        except OSError as exc:
            return _status(exc)
        return SFTP_OK
