"""Watch streams: `?watch=1` answered as chunked JSON lines (`{"type": ..., "object": ...}`),
filtered by namespace, label and field selectors, resumable from a resourceVersion (410 Gone
when it is older than the kept history), with bookmarks when the client allows them."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from pitstop.kube.objects import meta
from pitstop.kube.selectors import Requirement
from pitstop_sim import tables
from pitstop_sim.errors import ApiError, bad_request
from pitstop_sim.resources import ResourceType
from pitstop_sim.selectors import FieldTerm
from pitstop_sim.store import ObjectStore, WatchEvent, encode

Obj = dict[str, Any]
BOOKMARK_INTERVAL = 30.0


@dataclass
class WatchRequest:
    rt: ResourceType
    namespace: str | None
    labels: list[Requirement]
    fields: list[FieldTerm]
    resource_version: str = ""
    timeout: float = 1800.0
    bookmarks: bool = False
    send_initial_events: bool = False
    as_table: bool = False
    include_object: str = "Metadata"
    _first_table: bool = field(default=True, init=False)

    def selected(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and meta(obj).get("namespace") != self.namespace:
            return False
        labels = meta(obj).get("labels") or {}
        return all(r.matches(labels) for r in self.labels) and all(t.matches(obj) for t in self.fields)

    def convert(self, event: WatchEvent) -> tuple[str, Obj] | None:
        """The event as this watcher sees it: objects moving out of its selection are DELETED."""
        now_in, was_in = self.selected(event.obj), self.selected(event.old)
        if event.type == "ADDED":
            return ("ADDED", event.obj) if now_in else None
        if event.type == "DELETED":
            return ("DELETED", event.obj) if (was_in or now_in) else None
        if now_in and was_in:
            return ("MODIFIED", event.obj)
        if now_in:
            return ("ADDED", event.obj)
        if was_in:
            return ("DELETED", event.obj)
        return None

    def backlog(self, store: ObjectStore) -> list[tuple[str, Obj]]:
        """What to send before live events: the current objects, or the history since the given version."""
        if self.resource_version in ("", "0") or self.send_initial_events:
            listed = store.list(self.rt.storage, self.namespace)
            return [("ADDED", obj) for obj in listed.items if self.selected(obj)]
        try:
            since = int(self.resource_version)
        except ValueError:
            raise bad_request(f"invalid resource version {self.resource_version!r}") from None
        history = store.history_since(since)
        if history is None:
            raise ApiError(410, "Expired", f"too old resource version: {since} ({store.oldest_rv()})")
        out = []
        for event in history:
            if event.storage == self.rt.storage and (converted := self.convert(event)) is not None:
                out.append(converted)
        return out

    def line(self, kind: str, obj: Obj, encoded: bytes | None = None) -> bytes:
        """One event line; `encoded` is `obj` as JSON already (shared by every watch)."""
        payload: Any = obj
        if self.as_table and kind not in ("ERROR", "BOOKMARK"):
            payload = tables.table(
                self.rt, [obj], include_object=self.include_object, include_columns=self._first_table
            )
            self._first_table = False
        elif encoded is not None:
            return b'{"type":"' + kind.encode() + b'","object":' + encoded + b"}\n"
        return encode({"type": kind, "object": payload}) + b"\n"

    def bookmark(self, rv: int, *, initial_done: bool = False) -> bytes:
        metadata: Obj = {"resourceVersion": str(rv)}
        if initial_done:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        return (
            encode(
                {
                    "type": "BOOKMARK",
                    "object": {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": metadata},
                }
            )
            + b"\n"
        )


class WatchHub:
    """Open watches, so that a stopping server can end them."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.closing = asyncio.Event()
        self._queues: set[asyncio.Queue[WatchEvent | None]] = set()

    def close(self) -> None:
        self.closing.set()
        for queue in self._queues:
            queue.put_nowait(None)

    async def serve(self, request: web.Request, watch: WatchRequest) -> web.StreamResponse:
        storage = watch.rt.storage
        queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        unsubscribe = self.store.subscribe(lambda ev: queue.put_nowait(ev) if ev.storage == storage else None)
        self._queues.add(queue)
        try:
            # Subscribed before reading, with no await in between: nothing is missed or repeated.
            backlog = watch.backlog(self.store)
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            with contextlib.suppress(ConnectionResetError):  # the client stopped watching
                await self._stream(response, watch, queue, backlog)
            return response
        finally:
            unsubscribe()
            self._queues.discard(queue)

    async def _stream(
        self,
        response: web.StreamResponse,
        watch: WatchRequest,
        queue: asyncio.Queue[WatchEvent | None],
        backlog: list[tuple[str, Obj]],
    ) -> None:
        for kind, obj in backlog:
            await response.write(watch.line(kind, obj))
        if watch.bookmarks and watch.send_initial_events:
            await response.write(watch.bookmark(self.store.resource_version, initial_done=True))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + watch.timeout
        while not self.closing.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                event = await asyncio.wait_for(queue.get(), timeout=min(remaining, BOOKMARK_INTERVAL))
            except TimeoutError:
                if watch.bookmarks:
                    await response.write(watch.bookmark(self.store.resource_version))
                continue
            if event is None:
                break
            converted = watch.convert(event)
            if converted is not None:
                await response.write(watch.line(*converted, event.encoded))
        await response.write_eof()
