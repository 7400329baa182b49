"""The simulator's object store: resourceVersions, indexes and watch fan-out.

`ObjectStore` is the interface the API and the controllers use; `InMemoryStore` implements
it, and `pitstop_sim.etcd_store.EtcdObjectStore` extends that with write-through to etcd.
Keys are shaped as in the apiserver's etcd (`/registry/pods/<ns>/<name>`,
`/registry/nodes/<name>`, `/registry/<group>/<plural>/...` for custom resources); the etcd
store maps the few the apiserver names differently (nodes live under `/registry/minions/`).

Stored objects are treated as immutable: writers build a new dict (see `clone`) and store it,
so readers, watch events and cached encodings can share them without copying. The store is
used from the simulator's event loop thread only; other threads go through `SimCluster`.
"""

from __future__ import annotations

import bisect
import builtins
import functools
import itertools
import json
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pitstop.kube.selectors import Requirement
from pitstop_sim.selectors import FieldTerm, equality_terms, field_value

Obj = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Listener = Callable[["WatchEvent"], None]

# Field paths each resource keeps an index for (field selectors kubectl and pitstop send).
FIELD_INDEXES: dict[str, tuple[str, ...]] = {"pods": ("spec.nodeName",)}
HISTORY = 50_000


class StoreError(Exception):
    pass


class ObjectExists(StoreError):
    pass


class ObjectMissing(StoreError):
    pass


class VersionConflict(StoreError):
    pass


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    storage: str
    obj: Obj
    old: Obj | None
    rv: int

    @functools.cached_property
    def encoded(self) -> bytes:
        """`obj` as JSON, encoded once however many watches send it (the apiserver caches an
        event's serialization for its watchers too)."""
        return encode(self.obj)


@dataclass
class ListResult:
    items: list[Obj]
    keys: list[str]
    resource_version: int
    next_key: str | None = None
    remaining: int = 0


def object_key(storage: str, namespace: str | None, name: str) -> str:
    return f"/registry/{storage}/{namespace}/{name}" if namespace else f"/registry/{storage}/{name}"


def clone(value: Any) -> Any:
    """A deep copy of JSON data (faster than copy.deepcopy for dicts/lists/scalars)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def _selected(obj: Obj, labels: list[Requirement], fields: list[FieldTerm]) -> bool:
    object_labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(object_labels) for r in labels) and all(t.matches(obj) for t in fields)


def encode(obj: Obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class ObjectStore(ABC):
    """Storage of API objects by resource ("storage" name: `pods`, `kueue.x-k8s.io/clusterqueues`)."""

    @property
    @abstractmethod
    def resource_version(self) -> int: ...

    @abstractmethod
    def get(self, storage: str, namespace: str | None, name: str) -> Obj | None: ...

    @abstractmethod
    def list(
        self,
        storage: str,
        namespace: str | None = None,
        *,
        labels: list[Requirement] | None = None,
        fields: list[FieldTerm] | None = None,
        start_after: str | None = None,
        limit: int | None = None,
    ) -> ListResult: ...

    @abstractmethod
    def create(self, storage: str, obj: Obj) -> Obj:
        """Store a new object; sets `metadata.resourceVersion`; ObjectExists if the key is taken."""

    @abstractmethod
    def update(self, storage: str, obj: Obj, *, expect_rv: str | None = None) -> Obj:
        """Replace an object; VersionConflict when `expect_rv` is not the stored version."""

    @abstractmethod
    def delete(self, storage: str, namespace: str | None, name: str) -> Obj:
        """Remove an object and return it (with a fresh resourceVersion); ObjectMissing if absent."""

    @abstractmethod
    def by_uid(self, uid: str) -> tuple[str, Obj] | None: ...

    @abstractmethod
    def dependents(self, owner_uid: str) -> builtins.list[tuple[str, Obj]]:
        """Objects whose ownerReferences name `owner_uid` (for garbage collection)."""

    @abstractmethod
    def count(self, storage: str) -> int: ...

    @abstractmethod
    def encoded(self, key: str, obj: Obj) -> bytes:
        """The JSON encoding of a stored object (cached per version)."""

    @abstractmethod
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` after every change; returns the unsubscribe function."""

    @abstractmethod
    def history_since(self, rv: int) -> builtins.list[WatchEvent] | None:
        """Events after `rv`, or None when they are no longer kept (the watch gets 410 Gone)."""

    @abstractmethod
    def oldest_rv(self) -> int: ...


# New keys kept aside up to this many before a list sorts them in one go (seeding 100,000 pods
# one `insort` at a time moves the whole key list each time).
BULK_SORT = 64


@dataclass
class _Table:
    objects: dict[str, Obj] = field(default_factory=dict)
    _keys: list[str] = field(default_factory=list)  # sorted, for stable order and continue tokens
    _added: list[str] = field(default_factory=list)  # created since the last sort
    labels: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    fields: dict[str, dict[str, set[str]]] = field(default_factory=dict)

    @property
    def keys(self) -> list[str]:
        """Every key, sorted."""
        if self._added:
            if len(self._added) < BULK_SORT:
                for key in self._added:
                    bisect.insort(self._keys, key)
            else:
                self._keys.extend(self._added)
                self._keys.sort()  # a sorted run and a tail: timsort merges them in linear time
            self._added.clear()
        return self._keys

    def add_key(self, key: str) -> None:
        self._added.append(key)

    def remove_key(self, key: str) -> None:
        keys = self.keys
        del keys[bisect.bisect_left(keys, key)]


class InMemoryStore(ObjectStore):
    def __init__(self, history: int = HISTORY) -> None:
        self._rv = 0
        self._tables: dict[str, _Table] = {}
        self._uids: dict[str, tuple[str, str]] = {}
        self._owned: dict[str, set[tuple[str, str]]] = {}
        self._encoded: dict[str, tuple[str, bytes]] = {}
        self._listeners: list[Listener] = []
        self._history: deque[WatchEvent] = deque(maxlen=history)
        self._compacted = 0

    @property
    def resource_version(self) -> int:
        return self._rv

    def _table(self, storage: str) -> _Table:
        table = self._tables.get(storage)
        if table is None:
            table = self._tables[storage] = _Table()
        return table

    def get(self, storage: str, namespace: str | None, name: str) -> Obj | None:
        table = self._tables.get(storage)
        return table.objects.get(object_key(storage, namespace, name)) if table else None

    def count(self, storage: str) -> int:
        table = self._tables.get(storage)
        return len(table.objects) if table else 0

    def list(
        self,
        storage: str,
        namespace: str | None = None,
        *,
        labels: list[Requirement] | None = None,
        fields: list[FieldTerm] | None = None,
        start_after: str | None = None,
        limit: int | None = None,
    ) -> ListResult:
        table = self._tables.get(storage)
        if table is None:
            return ListResult([], [], self._rv)
        labels = labels or []
        fields = fields or []
        prefix = f"/registry/{storage}/{namespace}/" if namespace else f"/registry/{storage}/"
        candidates = self._candidates(table, labels, fields)
        if candidates is None:
            lo = bisect.bisect_left(table.keys, prefix)
            if start_after is not None:
                lo = max(lo, bisect.bisect_right(table.keys, start_after))
            hi = bisect.bisect_left(table.keys, prefix + "\uffff")
            keys: Iterable[str] = table.keys[lo:hi]
        else:
            keys = sorted(
                k for k in candidates if k.startswith(prefix) and (start_after is None or k > start_after)
            )
        items: list[Obj] = []
        out_keys: list[str] = []
        remaining = 0
        next_key: str | None = None
        objects = table.objects
        filtered = bool(labels or fields)
        for key in keys:
            obj = objects[key]
            if filtered and not _selected(obj, labels, fields):
                continue
            if limit is not None and len(items) >= limit:
                remaining += 1
                continue
            items.append(obj)
            out_keys.append(key)
        if limit is not None and remaining:
            next_key = out_keys[-1]
        return ListResult(items, out_keys, self._rv, next_key, remaining)

    def _candidates(
        self, table: _Table, labels: builtins.list[Requirement], fields: builtins.list[FieldTerm]
    ) -> set[str] | None:
        best: set[str] | None = None
        for key, value in equality_terms(labels):
            found = table.labels.get(key, {}).get(value, set())
            if best is None or len(found) < len(best):
                best = found
        for term in fields:
            index = table.fields.get(term.path)
            if index is not None and term.equal:
                found = index.get(term.value, set())
                if best is None or len(found) < len(best):
                    best = found
        return best  # only read, before anything can change it

    def create(self, storage: str, obj: Obj) -> Obj:
        meta = obj["metadata"]
        key = object_key(storage, meta.get("namespace"), meta["name"])
        table = self._table(storage)
        if key in table.objects:
            raise ObjectExists(key)
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        table.objects[key] = obj
        table.add_key(key)
        self._index(storage, table, key, obj)
        self._emit(WatchEvent("ADDED", storage, obj, None, self._rv))
        return obj

    def update(self, storage: str, obj: Obj, *, expect_rv: str | None = None) -> Obj:
        meta = obj["metadata"]
        key = object_key(storage, meta.get("namespace"), meta["name"])
        table = self._table(storage)
        old = table.objects.get(key)
        if old is None:
            raise ObjectMissing(key)
        if expect_rv and old["metadata"].get("resourceVersion") != expect_rv:
            raise VersionConflict(key)
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        self._unindex(storage, table, key, old)
        table.objects[key] = obj
        self._index(storage, table, key, obj)
        self._encoded.pop(key, None)
        self._emit(WatchEvent("MODIFIED", storage, obj, old, self._rv))
        return obj

    def delete(self, storage: str, namespace: str | None, name: str) -> Obj:
        key = object_key(storage, namespace, name)
        table = self._table(storage)
        old = table.objects.pop(key, None)
        if old is None:
            raise ObjectMissing(key)
        table.remove_key(key)
        self._unindex(storage, table, key, old)
        self._encoded.pop(key, None)
        self._rv += 1
        gone = dict(old)
        gone["metadata"] = {**old["metadata"], "resourceVersion": str(self._rv)}
        self._emit(WatchEvent("DELETED", storage, gone, old, self._rv))
        return gone

    def restore(self, objects: Iterable[tuple[str, Obj]], resource_version: int = 0) -> int:
        """Put back objects persisted by an earlier run, as they were: no watch events, their
        resourceVersions kept. The store's version moves to the newest of them (or
        `resource_version` if higher) and older history counts as compacted, so a watch resuming
        from before the restart gets 410 Gone and lists again. Returns how many were restored."""
        restored = 0
        for storage, obj in objects:
            meta = obj["metadata"]
            key = object_key(storage, meta.get("namespace"), meta["name"])
            table = self._table(storage)
            old = table.objects.get(key)
            if old is None:
                table.add_key(key)
            else:
                self._unindex(storage, table, key, old)
            table.objects[key] = obj
            self._index(storage, table, key, obj)
            self._encoded.pop(key, None)
            resource_version = max(resource_version, int(meta.get("resourceVersion") or 0))
            restored += 1
        self._rv = max(self._rv, resource_version)
        self._compacted = self._rv
        return restored

    def by_uid(self, uid: str) -> tuple[str, Obj] | None:
        found = self._uids.get(uid)
        if found is None:
            return None
        storage, key = found
        obj = self._tables[storage].objects.get(key)
        return (storage, obj) if obj is not None else None

    def dependents(self, owner_uid: str) -> builtins.list[tuple[str, Obj]]:
        out = []
        for storage, key in sorted(self._owned.get(owner_uid, ())):
            obj = self._tables[storage].objects.get(key)
            if obj is not None:
                out.append((storage, obj))
        return out

    def encoded(self, key: str, obj: Obj) -> bytes:
        rv = obj["metadata"].get("resourceVersion", "")
        cached = self._encoded.get(key)
        if cached is not None and cached[0] == rv:
            return cached[1]
        data = encode(obj)
        self._encoded[key] = (rv, data)
        return data

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def history_since(self, rv: int) -> builtins.list[WatchEvent] | None:
        if rv < self._compacted:
            return None
        if not self._history or rv >= self._history[-1].rv:
            return []
        # Events are in rv order: find the first newer than rv by bisection.
        first = self._history[0].rv
        if rv < first:
            return list(self._history)
        start = bisect.bisect_right(self._history, rv, key=lambda e: e.rv)
        return list(itertools.islice(self._history, start, None))

    def oldest_rv(self) -> int:
        return self._compacted

    def _emit(self, event: WatchEvent) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        self._history.append(event)
        for listener in list(self._listeners):
            listener(event)

    def _index(self, storage: str, table: _Table, key: str, obj: Obj) -> None:
        meta = obj["metadata"]
        for label, value in (meta.get("labels") or {}).items():
            table.labels.setdefault(label, {}).setdefault(value, set()).add(key)
        for path in FIELD_INDEXES.get(storage, ()):
            table.fields.setdefault(path, {}).setdefault(field_value(obj, path), set()).add(key)
        uid = meta.get("uid")
        if uid:
            self._uids[uid] = (storage, key)
        for ref in meta.get("ownerReferences") or []:
            self._owned.setdefault(ref.get("uid", ""), set()).add((storage, key))

    def _unindex(self, storage: str, table: _Table, key: str, obj: Obj) -> None:
        meta = obj["metadata"]
        for label, value in (meta.get("labels") or {}).items():
            values = table.labels.get(label, {})
            members = values.get(value)
            if members is not None:
                members.discard(key)
                if not members:
                    del values[value]
        for path in FIELD_INDEXES.get(storage, ()):
            index = table.fields.get(path, {})
            value = field_value(obj, path)
            members = index.get(value)
            if members is not None:
                members.discard(key)
                if not members:
                    del index[value]
        uid = meta.get("uid")
        if uid and self._uids.get(uid) == (storage, key):
            del self._uids[uid]
        for ref in meta.get("ownerReferences") or []:
            owned = self._owned.get(ref.get("uid", ""))
            if owned is not None:
                owned.discard((storage, key))
                if not owned:
                    del self._owned[ref.get("uid", "")]
