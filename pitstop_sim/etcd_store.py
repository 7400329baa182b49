"""`EtcdObjectStore`: the simulator's objects persisted in etcd, under the keys the apiserver uses.

    store = EtcdObjectStore("http://127.0.0.1:2379")   # or SimConfig(etcd_endpoint=...)
    store.open()          # clear the prefix (default) or load what an earlier run left there
    ...                   # use it as any ObjectStore
    store.flush()         # wait until etcd holds every change made so far
    store.close()

Write-through: the in-memory tables and indexes of `InMemoryStore` stay the only source of
reads, so the API and the controllers run as fast as without etcd. Every change is queued and
a writer thread applies the queue in order, in transactions of up to 127 changes (a key
changed twice in one batch is written once, with its last value, so the order per key holds).
`flush()` waits for the queue to drain; `close()` flushes and stops the writer. While etcd
does not answer the writer retries and the queue grows; changes etcd refuses (a request it
rejects outright) are logged and reported by the next `flush()`.

What lands in etcd, so that a backup and a restore drill see what the cluster held:
- keys as the apiserver writes them: `/registry/minions/<node>`, `/registry/pods/<ns>/<name>`,
  `/registry/deployments/<ns>/<name>`, `/registry/services/specs/<ns>/<name>`,
  `/registry/apiextensions.k8s.io/customresourcedefinitions/<name>`,
  `/registry/<group>/<plural>/[<ns>/]<name>` for custom resources — under `prefix` (default
  `/registry/`; give each cluster its own, e.g. `/sim-a/registry/`, when several share an etcd);
- values are the objects' JSON as the API serves them (the apiserver stores protobuf for
  built-in types; the shapes and counts are what a drill checks, the encoding is not), with
  `metadata.resourceVersion` the simulator's own counter (etcd's revision is not used for it);
- one bookkeeping key outside the prefix, `/pitstop-sim<prefix>resourceVersion`, the newest
  resourceVersion written (see `marker_key`).

On open, what is already under the prefix is cleared (`on_start="clear"`: every start begins
from its scenario) or loaded back (`on_start="load"`: the cluster resumes the objects it had;
the simulator's own state outside the API — node profiles, counters, timeline, pod logs —
starts from the scenario again).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, Literal

from pitstop_sim.etcd_gateway import (
    MAX_TXN_BYTES,
    MAX_TXN_OPS,
    EtcdGateway,
    EtcdGatewayError,
    EtcdRefused,
)
from pitstop_sim.store import HISTORY, InMemoryStore, Obj, WatchEvent, encode

log = logging.getLogger(__name__)

OnStart = Literal["clear", "load"]
DEFAULT_PREFIX = "/registry/"

# Resources the apiserver stores under another path than their plural (storage name here).
_ETCD_PATHS = {
    "nodes": "minions",
    "services": "services/specs",
    "customresourcedefinitions": "apiextensions.k8s.io/customresourcedefinitions",
}
_STORAGE_OF_PATH = {path: storage for storage, path in _ETCD_PATHS.items()}
_RETRY_MAX_S = 2.0
# How long the writer lets changes gather before a transaction: one request for a burst of
# changes instead of one each keeps the writer thread off the simulator's loop (the GIL).
_LINGER_S = 0.02


class EtcdStoreError(Exception):
    """The store could not open, load or persist; the message says what and where."""


def etcd_path(storage: str) -> str:
    """The path segment(s) after the prefix for a storage name: `nodes` -> `minions`."""
    return _ETCD_PATHS.get(storage, storage)


def storage_of_key(rest: str) -> str | None:
    """The storage name of a key below the prefix (`minions/n1` -> `nodes`), None if unknown."""
    parts = rest.split("/")
    if len(parts) < 2 or not all(parts):
        return None
    # Custom resources (and CRDs) are kept under `<group>/<plural>/`; API groups contain dots.
    path = f"{parts[0]}/{parts[1]}" if "." in parts[0] or parts[:2] == ["services", "specs"] else parts[0]
    if path != parts[0] and len(parts) < 3:
        return None
    return _STORAGE_OF_PATH.get(path, path)


class _Writer:
    """Applies queued puts/deletes to etcd in order, from one background thread."""

    def __init__(self, gateway: EtcdGateway, marker: str) -> None:
        self._gateway = gateway
        self._marker = marker
        # (key, object or None for a delete, resourceVersion of the change)
        self._queue: deque[tuple[str, Obj | None, int]] = deque()
        self._cond = threading.Condition()
        self._submitted = 0
        self._done = 0
        self._closing = False
        self._flushing = 0
        self.last_error: str | None = None
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="pitstop-sim-etcd", daemon=True)
        self._thread.start()

    def submit(self, key: str, obj: Obj | None, rv: int) -> None:
        with self._cond:
            self._queue.append((key, obj, rv))
            self._submitted += 1
            # Wake the writer when it waits for work or has a full transaction, not for each change.
            if len(self._queue) in (1, MAX_TXN_OPS - 1):
                self._cond.notify_all()

    @property
    def pending(self) -> int:
        with self._cond:
            return self._submitted - self._done

    def flush(self, timeout: float) -> bool:
        """Wait until everything submitted before this call is written; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._submitted
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._done < target:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._thread.is_alive():
                        return False
                    self._cond.wait(left)
            finally:
                self._flushing -= 1
        return True

    def close(self, timeout: float) -> bool:
        flushed = self.flush(timeout)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=max(timeout, 1.0))
        return flushed

    def _take(self) -> list[tuple[str, Obj | None, int]] | None:
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
            if not self._queue:
                return None
            deadline = time.monotonic() + _LINGER_S
            while len(self._queue) < MAX_TXN_OPS - 1 and not (self._closing or self._flushing):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return list(itertools.islice(self._queue, MAX_TXN_OPS - 1))  # one op left for the marker

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            try:
                for ops in self._transactions(batch):
                    if not self._apply(ops):
                        return
            except Exception as exc:  # a bug must not stop persisting every later change
                log.exception("simulator objects not persisted")
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.dropped += len(batch)
            with self._cond:
                for _ in batch:
                    self._queue.popleft()
                self._done += len(batch)
                self._cond.notify_all()

    def _apply(self, ops: list[tuple[str, bytes | None]]) -> bool:
        """Write one transaction, retrying while etcd is unreachable; False once closing."""
        delay = 0.05
        while True:
            try:
                self._gateway.apply(ops)
                return True
            except EtcdRefused as exc:
                # The same request would be refused again: record it, keep going.
                self.last_error = str(exc)
                self.dropped += len(ops)
                log.error("simulator objects not persisted: %s", exc)
                return True
            except EtcdGatewayError as exc:
                self.last_error = str(exc)
                with self._cond:
                    if self._closing:
                        return False
                time.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX_S)

    def _transactions(self, batch: list[tuple[str, Obj | None, int]]) -> list[list[tuple[str, bytes | None]]]:
        """The batch as transactions within etcd's request size, the last change per key only
        (etcd refuses a key twice in one transaction; every key then appears once, so splitting
        keeps the order per key), the last one also recording the batch's resourceVersion.
        Stored objects are immutable, so encoding them here, off the simulator's loop, reads a
        settled value."""
        latest: dict[str, Obj | None] = {}
        for key, obj, _ in batch:
            latest.pop(key, None)
            latest[key] = obj
        out: list[list[tuple[str, bytes | None]]] = [[]]
        size = 0
        for key, obj in latest.items():
            value = encode(obj) if obj is not None else None
            weight = len(key) + (len(value) if value is not None else 0)
            if out[-1] and size + weight > MAX_TXN_BYTES:
                out.append([])
                size = 0
            out[-1].append((key, value))
            size += weight
        out[-1].append((self._marker, str(max(rv for _, _, rv in batch)).encode()))
        return out


class EtcdObjectStore(InMemoryStore):
    def __init__(
        self,
        endpoint: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        on_start: OnStart = "clear",
        timeout: float = 5.0,
        history: int = HISTORY,
    ) -> None:
        super().__init__(history)
        if not (prefix.startswith("/") and prefix.endswith("/")):
            raise EtcdStoreError(f"the etcd key prefix must start and end with '/', got {prefix!r}")
        self.endpoint = endpoint
        self.prefix = prefix
        self.on_start: OnStart = on_start
        self._gateway = EtcdGateway(endpoint, timeout=timeout)
        self._writer: _Writer | None = None
        self._closed = False

    @property
    def marker_key(self) -> str:
        """Where the store records its resourceVersion (outside the prefix, so that counts
        under it are Kubernetes objects only): a cluster loaded back continues from there, and
        its versions never go backwards (deleted objects take their versions with them)."""
        return f"/pitstop-sim{self.prefix}resourceVersion"

    def key_for(self, storage: str, namespace: str | None, name: str) -> str:
        """The etcd key of an object: `<prefix>minions/<node>`, `<prefix>pods/<ns>/<name>`."""
        path = etcd_path(storage)
        return f"{self.prefix}{path}/{namespace}/{name}" if namespace else f"{self.prefix}{path}/{name}"

    def open(self) -> int:
        """Connect, clear or load the prefix, start writing. Returns the number of objects loaded."""
        if self._writer is not None:
            raise EtcdStoreError("the etcd store is already open")
        try:
            if self.on_start == "load":
                loaded = self._load()
            else:
                self._gateway.delete_prefix(self.prefix)
                self._gateway.apply([(self.marker_key, None)])
                loaded = 0
        except EtcdGatewayError as exc:
            raise EtcdStoreError(f"{exc} (the simulator's store, prefix {self.prefix})") from None
        self._writer = _Writer(self._gateway, self.marker_key)
        return loaded

    def _load(self) -> int:
        recorded = self._gateway.get(self.marker_key)
        _, entries = self._gateway.scan(self.prefix)
        return self.restore(self._parse(entries), int(recorded or 0))

    def _parse(self, entries: Iterator[tuple[str, bytes]]) -> Iterator[tuple[str, Obj]]:
        for key, value in entries:
            if key == self.marker_key:  # with prefix "/", the marker is under it
                continue
            storage = storage_of_key(key[len(self.prefix) :])
            try:
                obj: Any = json.loads(value)
                name = obj["metadata"]["name"]
            except (ValueError, KeyError, TypeError):
                obj, name = None, None
            if storage is None or not isinstance(obj, dict) or not isinstance(name, str):
                raise EtcdStoreError(
                    f"cannot load {key!r} from etcd at {self.endpoint}: not an object the simulator "
                    f"stored (give the cluster a key prefix of its own, or start with on_start=clear)"
                )
            yield storage, obj

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until etcd holds every change made so far; EtcdStoreError if it cannot."""
        writer = self._require_open()
        if not writer.flush(timeout):
            raise EtcdStoreError(
                f"{writer.pending} simulator changes are still not written to etcd at {self.endpoint} "
                f"after {timeout:g}s (last error: {writer.last_error or 'none'})"
            )
        if writer.dropped:
            raise EtcdStoreError(
                f"{writer.dropped} simulator changes were refused by etcd at {self.endpoint}: "
                f"{writer.last_error}"
            )

    def close(self, timeout: float = 30.0) -> None:
        """Flush (up to `timeout`), stop the writer and disconnect. Safe to call twice."""
        writer, self._writer = self._writer, None
        self._closed = True
        if writer is not None and not writer.close(timeout):
            log.warning(
                "%d simulator changes were not written to etcd at %s before closing (last error: %s)",
                writer.pending,
                self.endpoint,
                writer.last_error,
            )
        self._gateway.close()

    def _require_open(self) -> _Writer:
        if self._writer is None:
            raise EtcdStoreError("the etcd store is not open; call open() first")
        return self._writer

    def _emit(self, event: WatchEvent) -> None:
        # Queued before the listeners run, so a change they make in turn is written after it.
        # Changes after close() (the cluster shutting down) stay in memory only.
        if not self._closed:
            meta = event.obj["metadata"]
            key = self.key_for(event.storage, meta.get("namespace"), meta["name"])
            self._require_open().submit(key, None if event.type == "DELETED" else event.obj, event.rv)
        super()._emit(event)
