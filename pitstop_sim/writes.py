"""Write counts per object and annotation changes per object and key: the evidence that a
fleet run touched every node exactly once (`GET /_sim/writes`, see `admin.py`).

A store listener counts, for each object changed since the cluster started serving (or the
last `POST /_sim/counters/reset`), every change stored for it (create, update, delete; by
any client or controller) and, per annotation key, how often the key's value changed (set,
changed to another value, or removed; deleting the object changes none). A request that
stores nothing new (a patch setting what is already there) changes nothing, as on a real
apiserver, so it is not counted: a retried, idempotent annotate shows as one change. The
work per event is a few dictionary operations over the object's annotations; nothing here
walks the fleet.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pitstop_sim.models import ObjectWrites, WriteCounts
from pitstop_sim.store import WatchEvent

Obj = dict[str, Any]


def _annotations(obj: Obj | None) -> dict[str, Any]:
    if obj is None:
        return {}
    notes = (obj.get("metadata") or {}).get("annotations")
    return notes if isinstance(notes, dict) else {}


def _name(obj: Obj) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name', '')}" if namespace else str(metadata.get("name", ""))


class WriteLog:
    def __init__(self) -> None:
        # storage -> object ("name" or "namespace/name") -> stored changes
        self._writes: dict[str, Counter[str]] = {}
        # storage -> object -> annotation key -> changes of its value
        self._annotations: dict[str, dict[str, Counter[str]]] = {}

    def reset(self) -> None:
        self._writes.clear()
        self._annotations.clear()

    def observe(self, event: WatchEvent) -> None:
        name = _name(event.obj)
        self._writes.setdefault(event.storage, Counter())[name] += 1
        if event.type == "DELETED":
            return  # the object is gone; its annotations did not change
        new, old = _annotations(event.obj), _annotations(event.old)
        if not new and not old:
            return
        changed = [k for k, v in new.items() if old.get(k, _ABSENT) != v]
        changed += [k for k in old if k not in new]
        if changed:
            per_object = self._annotations.setdefault(event.storage, {}).setdefault(name, Counter())
            per_object.update(changed)

    def counts(self, storage: str, annotation: str | None = None) -> WriteCounts:
        """Every object of `storage` written since the start or the reset; with `annotation`,
        only the objects whose value of that key changed, and only that key's count."""
        writes = self._writes.get(storage, Counter())
        notes = self._annotations.get(storage, {})
        if annotation is None:
            objects = {
                name: ObjectWrites(writes=count, annotation_changes=dict(notes.get(name, {})))
                for name, count in sorted(writes.items())
            }
        else:
            objects = {
                name: ObjectWrites(writes=writes[name], annotation_changes={annotation: changes[annotation]})
                for name, changes in sorted(notes.items())
                if changes.get(annotation)
            }
        return WriteCounts(resource=storage, annotation=annotation, objects=objects)


_ABSENT = object()
