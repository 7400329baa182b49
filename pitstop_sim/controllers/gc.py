"""Garbage collection and namespace deletion: dependents go when their owners go (background
propagation); an owner deleted with foreground propagation goes after the dependents that block
it; a Terminating namespace is emptied before it disappears."""

from __future__ import annotations

import contextlib
from typing import Any

from pitstop.kube.objects import is_terminating, meta, name_of
from pitstop_sim.clock import rfc3339
from pitstop_sim.controllers.base import Controller
from pitstop_sim.store import ObjectMissing, WatchEvent

Obj = dict[str, Any]
# The finalizer of an owner deleted with propagationPolicy Foreground (metav1.FinalizerDeleteDependents).
FOREGROUND_DELETION = "foregroundDeletion"


class GarbageCollector(Controller):
    name = "garbage-collector"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._gone: list[str] = []
        self._namespaces: set[str] = set()  # to (re)check
        self._terminating: set[str] = set()  # being emptied
        self._foreground: set[tuple[str, str, str]] = set()  # (storage, namespace, name) owners
        self._recheck = False

    def observe(self, event: WatchEvent) -> None:
        finalizers = meta(event.obj).get("finalizers") or []
        if event.type != "DELETED" and FOREGROUND_DELETION in finalizers and is_terminating(event.obj):
            self._foreground.add((event.storage, meta(event.obj).get("namespace") or "", name_of(event.obj)))
            self._recheck = True
        elif event.type == "DELETED" and self._foreground:
            self._recheck = True  # perhaps the last dependent an owner waited for
        if event.type == "DELETED":
            uid = meta(event.obj).get("uid")
            if uid:
                self._gone.append(uid)
        if event.storage == "namespaces" and is_terminating(event.obj) and event.type != "DELETED":
            self._namespaces.add(name_of(event.obj))
        elif event.type == "DELETED" and meta(event.obj).get("namespace") in self._terminating:
            self._namespaces.add(meta(event.obj)["namespace"])

    def pending(self) -> bool:
        return bool(self._gone or self._namespaces or self._recheck)

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
        if self._recheck:
            self._recheck = False
            for owner in sorted(self._foreground):
                self._foreground_owner(*owner)

    def _foreground_owner(self, storage: str, namespace: str, name: str) -> None:
        """Delete an owner's dependents (in the foreground too), and the owner once none that
        blocks it is left, as the garbage collector's processDeletingDependentsItem does."""
        owner = self.ctx.store.get(storage, namespace or None, name)
        if owner is None or FOREGROUND_DELETION not in (meta(owner).get("finalizers") or []):
            self._foreground.discard((storage, namespace, name))
            return
        uid = meta(owner).get("uid", "")
        blocking = 0
        for dep_storage, dependent in self.ctx.store.dependents(uid):
            refs = meta(dependent).get("ownerReferences") or []
            blocking += any(r.get("uid") == uid and r.get("blockOwnerDeletion") for r in refs)
            if not is_terminating(dependent):
                self._delete_foreground(dep_storage, dependent)
        if blocking:
            return  # their DELETED events bring the owner back here
        self._foreground.discard((storage, namespace, name))
        freed = [f for f in meta(owner).get("finalizers") or [] if f != FOREGROUND_DELETION]
        if freed:
            kept = {**owner, "metadata": {**owner["metadata"], "finalizers": freed}}
            self.ctx.store.update(storage, kept)
            return
        with contextlib.suppress(ObjectMissing):
            self.ctx.store.delete(storage, namespace or None, name)

    def _delete_foreground(self, storage: str, obj: Obj) -> None:
        if storage == "pods":
            self.manager.kubelet.terminate(obj)
            return
        marked = {**obj, "metadata": {**obj["metadata"]}}
        marked["metadata"].setdefault("deletionTimestamp", rfc3339())
        marked["metadata"]["finalizers"] = [*(obj["metadata"].get("finalizers") or []), FOREGROUND_DELETION]
        self.ctx.store.update(storage, marked)

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
