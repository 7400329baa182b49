"""What `bench/fleet_scale.py` reads back after (and during) a run.

- Histories: events, bytes and the largest payload of every execution of the run's workflow
  (it continues as new) and of a sample of its host workflows, fetched as stored (encoded).
- Logs: lines of the worker's and Temporal's logs that warn about payload or history size.
- Annotations: a watch on the simulator's GPU nodes from before the run to after it, counting
  per node how often each of the run's annotations changed value (what "annotated exactly
  once" means when a re-run after a crash must be a no-op), and the simulator's own request
  counters (how many PATCHes of nodes it served).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client, WorkflowHistory

from tests.payload_sizes import largest_payload
from tests.payload_sizes import run_histories as execution_histories

GPU_SELECTOR = "nvidia.com/gpu.present=true"
ZONE_LABEL = "topology.kubernetes.io/zone"
# The brief's words, and how the SDK core (TMPRL1103: "payloads with size that exceeded the
# warning limit") and the server ("Blob data size exceeds the warning limit", "history size
# exceeds warn limit") say them.
SIZE_WARNINGS = ("payload size", "payloads with size", "history size", "exceeds", "blob size", "TMPRL1103")
# Signs of a worker that cannot keep up: workflow tasks over 5 s (the SDK's TMPRL1104), and
# completions the server refused because the task had already timed out (10 s) and moved on.
STRAIN = {
    "workflow tasks over 5 s (TMPRL1104)": "TMPRL1104",
    "workflow tasks timed out before completing": "Task not found when completing",
    "ERROR lines": " ERROR ",
}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


# --- histories ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryStats:
    workflow_id: str
    run_id: str
    events: int
    bytes: int
    largest_payload: int
    largest_payload_event: str


def _stats(history: WorkflowHistory) -> HistoryStats:
    largest = largest_payload(history)
    return HistoryStats(
        workflow_id=history.workflow_id,
        run_id=history.run_id,
        events=len(history.events),
        bytes=sum(e.ByteSize() for e in history.events),
        largest_payload=largest.size if largest else 0,
        largest_payload_event=largest.event_type.removeprefix("EVENT_TYPE_") if largest else "",
    )


async def run_histories(client: Client, workflow_id: str, children: list[str]) -> list[HistoryStats]:
    """Every execution of the run (followed back through continue-as-new, as the tests do:
    `tests/payload_sizes.py`), then each child in `children` (latest execution)."""
    parents = [_stats(h) for h in await execution_histories(client, workflow_id)]
    return parents + [_stats(await client.get_workflow_handle(c).fetch_history()) for c in children]


# --- logs ------------------------------------------------------------------------------------


def size_warnings(log: Path) -> list[str]:
    """Lines of `log` that mention a payload/history/blob size or something exceeding a limit."""
    pattern = re.compile("|".join(re.escape(w) for w in SIZE_WARNINGS), re.IGNORECASE)
    return [line for line in log_lines(log) if pattern.search(line)]


def log_lines(log: Path) -> list[str]:
    """The log's lines without terminal colours (the SDK's core logs with them)."""
    return ANSI.sub("", log.read_text(errors="replace")).splitlines() if log.exists() else []


def strain(log: Path) -> dict[str, int]:
    lines = log_lines(log)
    return {label: sum(1 for line in lines if mark in line) for label, mark in STRAIN.items()}


# --- the simulator ---------------------------------------------------------------------------


def sim_client(url: str, token: str) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=httpx.Timeout(120.0, connect=10.0))


async def gpu_nodes(http: httpx.AsyncClient) -> tuple[list[dict[str, Any]], str]:
    """The GPU nodes and the list's resourceVersion."""
    response = await http.get("/api/v1/nodes", params={"labelSelector": GPU_SELECTOR})
    response.raise_for_status()
    body = response.json()
    return body["items"], body["metadata"]["resourceVersion"]


async def counters(http: httpx.AsyncClient) -> dict[str, Any]:
    response = await http.get("/_sim/counters")
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def node_patches(snapshot: dict[str, Any]) -> int:
    requests: dict[str, int] = snapshot.get("requests") or {}
    return requests.get("patch nodes", 0)


@dataclass
class AnnotationWatch:
    """Counts, per node and annotation key, how often the value changed while it ran."""

    http: httpx.AsyncClient
    keys: tuple[str, ...]
    last: dict[str, dict[str, str | None]] = field(default_factory=dict)
    changes: dict[str, Counter[str]] = field(default_factory=dict)
    resource_version: str = ""
    gaps: list[str] = field(default_factory=list)
    events: int = 0

    async def begin(self) -> None:
        nodes, self.resource_version = await gpu_nodes(self.http)
        for node in nodes:
            self._see(node)

    def _see(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        notes = node["metadata"].get("annotations") or {}
        now = {k: notes.get(k) for k in self.keys}
        before = self.last.get(name)
        if before is not None:
            changed = [k for k in self.keys if now[k] != before[k]]
            self.changes.setdefault(name, Counter()).update(changed)
        self.last[name] = now

    async def follow(self) -> None:
        """Follow the watch until cancelled, resuming from the last resourceVersion when it ends."""
        while True:
            params = {
                "watch": "true",
                "labelSelector": GPU_SELECTOR,
                "resourceVersion": self.resource_version,
                "timeoutSeconds": "600",
            }
            try:
                async with self.http.stream("GET", "/api/v1/nodes", params=params, timeout=None) as rsp:
                    if rsp.status_code != 200:
                        self.gaps.append(f"watch answered {rsp.status_code}: {(await rsp.aread())[:200]!r}")
                        return
                    async for line in rsp.aiter_lines():
                        if line.strip() and not self._event(json.loads(line)):
                            return
            except httpx.HTTPError as exc:
                self.gaps.append(f"watch broke: {type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)

    def _event(self, event: dict[str, Any]) -> bool:
        """Take one watch event; False when the watch cannot go on (410 Gone and the like)."""
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            self.gaps.append(f"watch error: {obj.get('message')}")
            return False
        self.resource_version = obj.get("metadata", {}).get("resourceVersion", self.resource_version)
        if event.get("type") in ("ADDED", "MODIFIED"):
            self.events += 1
            self._see(obj)
        return True
