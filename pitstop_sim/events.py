"""Kubernetes Events (core/v1) the simulated components emit, so `kubectl describe` tells the
story: scheduling, evictions, node reboots. Kept to a bounded number, oldest dropped first."""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any

from pitstop.kube.objects import meta, name_of, namespace_of
from pitstop_sim.objects import new_uid, now
from pitstop_sim.store import ObjectExists, ObjectMissing, ObjectStore

Obj = dict[str, Any]
MAX_EVENTS = 2_000


class EventRecorder:
    def __init__(self, store: ObjectStore, limit: int = MAX_EVENTS) -> None:
        self._store = store
        self._limit = limit
        self._kept: deque[tuple[str, str]] = deque()
        self.enabled = True

    def record(
        self, obj: Obj, kind: str, reason: str, message: str, component: str, host: str | None = None
    ) -> None:
        if not self.enabled:
            return
        namespace = namespace_of(obj) or "default"
        stamp = now()
        source: Obj = {"component": component}
        if host:
            source["host"] = host
        name = f"{name_of(obj)}.{new_uid().replace('-', '')[:16]}"
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": new_uid(),
                "creationTimestamp": stamp,
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", "v1"),
                "kind": obj.get("kind", ""),
                "name": name_of(obj),
                "namespace": namespace_of(obj),
                "uid": meta(obj).get("uid", ""),
                "resourceVersion": meta(obj).get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "type": kind,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": host or "",
        }
        try:
            self._store.create("events", event)
        except ObjectExists:
            return
        self._kept.append((namespace, name))
        while len(self._kept) > self._limit:
            old_ns, old_name = self._kept.popleft()
            with contextlib.suppress(ObjectMissing):
                self._store.delete("events", old_ns, old_name)
