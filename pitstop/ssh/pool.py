"""The worker's SSH connection pool: one connection per (host, port, user, jump host, credentials),
reused by every activity that targets it, kept alive with SSH keepalives, bounded in size
with least-recently-used eviction, and closed when the worker stops (`close_all()`).

A new connection costs a TCP and SSH handshake plus a key exchange (tens of ms and CPU on
both ends); a runbook sends many short commands to the same host, so reuse is most of
pitstop's speed over SSH.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pitstop.ssh.connect import DEFAULT_KEEPALIVE_S, Connection, open_connection
from pitstop.ssh.target import SSHTarget

log = logging.getLogger("pitstop.ssh")

DEFAULT_MAX_CONNECTIONS = 128
DEFAULT_IDLE_TIMEOUT_S = 600.0

PoolKey = tuple[str, int, str, str, str]
Connector = Callable[[SSHTarget], Connection]


class SSHPool:
    def __init__(
        self,
        max_size: int = DEFAULT_MAX_CONNECTIONS,
        keepalive_s: float = DEFAULT_KEEPALIVE_S,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        connector: Connector | None = None,
    ) -> None:
        if max_size < 1:
            raise ValueError("an SSH pool holds at least one connection")
        self.max_size = max_size
        self.idle_timeout_s = idle_timeout_s
        self._connector: Connector = connector or (lambda t: open_connection(t, keepalive_s))
        self._lock = threading.Lock()
        # Most recently used last.
        self._conns: OrderedDict[PoolKey, Connection] = OrderedDict()
        # One connect at a time per key: concurrent activities on a new host share one handshake.
        self._connecting: dict[PoolKey, threading.Lock] = {}
        self.opened = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._conns)

    @contextmanager
    def connection(self, target: SSHTarget) -> Iterator[Connection]:
        conn = self.acquire(target)
        try:
            yield conn
        finally:
            self.release(conn)

    def acquire(self, target: SSHTarget) -> Connection:
        key = target.pool_key
        with self._lock:
            key_lock = self._connecting.setdefault(key, threading.Lock())
        with key_lock:
            stale: list[Connection] = []
            with self._lock:
                conn = self._conns.get(key)
                reuse = conn is not None and conn.alive()
                if conn is not None and reuse:
                    conn.in_use += 1
                    self._conns.move_to_end(key)
                elif conn is not None:
                    del self._conns[key]
                    stale.append(conn)
            if conn is not None and reuse:
                try:
                    # known_hosts may have revoked this host's key since it was verified.
                    conn.check_still_trusted()
                except BaseException:
                    self.release(conn)
                    self.discard(conn)
                    raise
                return conn
            for old in stale:
                old.close()
            conn = self._connector(target)
            with self._lock:
                self.opened += 1
                conn.in_use += 1
                self._conns[key] = conn
                evicted = self._over_bound()
            for old in evicted:
                log.debug("ssh pool full: closing idle connection to %s", old.target.address)
                old.close()
            return conn

    def release(self, conn: Connection) -> None:
        with self._lock:
            conn.in_use -= 1
            conn.last_used = time.monotonic()
            evicted = self._over_bound()
        for old in evicted:
            old.close()

    def _over_bound(self) -> list[Connection]:
        """Idle connections to close (caller holds the lock): expired ones, then LRU beyond the bound."""
        now = time.monotonic()
        out: list[Connection] = []
        for key, conn in list(self._conns.items()):
            if conn.in_use == 0 and now - conn.last_used > self.idle_timeout_s:
                del self._conns[key]
                out.append(conn)
        excess = len(self._conns) - self.max_size
        for key, conn in list(self._conns.items()):
            if excess <= 0:
                break
            # Busy connections are never closed under a running command; the pool shrinks
            # back to its bound when they are released.
            if conn.in_use == 0:
                del self._conns[key]
                out.append(conn)
                excess -= 1
        return out

    def discard(self, conn: Connection) -> None:
        """Drop a broken connection so the next caller opens a new one."""
        with self._lock:
            if self._conns.get(conn.target.pool_key) is conn:
                del self._conns[conn.target.pool_key]
        conn.close()

    def evict(self, target: SSHTarget) -> None:
        """Forget the connection to `target` (it is about to go away, e.g. a reboot)."""
        with self._lock:
            conn = self._conns.pop(target.pool_key, None)
        if conn is not None:
            conn.close()

    def peek(self, target: SSHTarget) -> Connection | None:
        with self._lock:
            return self._conns.get(target.pool_key)

    def close_all(self) -> None:
        with self._lock:
            conns = list(self._conns.values())
            self._conns.clear()
        for conn in conns:
            conn.close()


_default: SSHPool | None = None
_default_lock = threading.Lock()


def default_pool() -> SSHPool:
    """The worker process's pool (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = SSHPool()
        return _default


def close_all() -> None:
    """Close every pooled connection; the worker calls this on shutdown."""
    with _default_lock:
        pool = _default
    if pool is not None:
        pool.close_all()


# Safety net for workers that exit without calling close_all().
atexit.register(close_all)
