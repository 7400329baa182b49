"""Garbage collection and namespace deletion: dependents go when their owners go (background
propagation), and a Terminating namespace is emptied before it disappears."""

from __future__ import annotations

import contextlib
from typing import Any

from pitstop.kube.objects import is_terminating, meta, name_of
from pitstop_sim.controllers.base import Controller
from pitstop_sim.store import ObjectMissing, WatchEvent

Obj = dict[str, Any]


class GarbageCollector(Controller):
    name = "garbage-collector"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._gone: list[str] = []
        self._namespaces: set[str] = set()  # to (re)check
        self._terminating: set[str] = set()  # being emptied

    def observe(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            uid = meta(event.obj).get("uid")
            if uid:
                self._gone.append(uid)
        if event.storage == "namespaces" and is_terminating(event.obj) and event.type != "DELETED":
            self._namespaces.add(name_of(event.obj))
        elif event.type == "DELETED" and meta(event.obj).get("namespace") in self._terminating:
            self._namespaces.add(meta(event.obj)["namespace"])

    def pending(self) -> bool:
        return bool(self._gone or self._namespaces)

    def resync(self) -> None:
        for ns in self.ctx.store.list("namespaces").items:
            if is_terminating(ns):
                self._namespaces.add(name_of(ns))

    def sync(self) -> None:
        gone, self._gone = self._gone, []
        for uid in gone:
            for storage, dependent in self.ctx.store.dependents(uid):
                refs = meta(dependent).get("ownerReferences") or []
                if any(
                    self.ctx.store.by_uid(r.get("uid", "")) is not None for r in refs if r.get("uid") != uid
                ):
                    continue  # another owner remains
                self._delete(storage, dependent)
        namespaces, self._namespaces = self._namespaces, set()
        for ns in sorted(namespaces):
            self._empty_namespace(ns)

    def _delete(self, storage: str, obj: Obj) -> None:
        if storage == "pods":
            self.manager.kubelet.terminate(obj)
            return
        with contextlib.suppress(ObjectMissing):
            self.ctx.store.delete(storage, meta(obj).get("namespace"), name_of(obj))

    def _empty_namespace(self, ns: str) -> None:
        self._terminating.add(ns)
        remaining = 0
        for rt in self.ctx.registry.all():
            if not rt.namespaced:
                continue
            for obj in self.ctx.store.list(rt.storage, ns).items:
                remaining += 1
                self._delete(rt.storage, obj)
        if remaining:
            return
        self._terminating.discard(ns)
        with contextlib.suppress(ObjectMissing):
            self.ctx.store.delete("namespaces", None, ns)
