"""Talking to the embedded stack's Prometheus in tests: its HTTP API, and waiting on it."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import httpx

from pitstop.devstack import DevStack
from pitstop_sim import SimCluster

T = TypeVar("T")


def api(stack: DevStack, path: str, **params: str) -> Any:
    response = httpx.get(stack.prometheus_url + "/api/v1/" + path, params=params, timeout=10)
    response.raise_for_status()
    body = response.json()
    assert body["status"] == "success", body
    return body["data"]


def wait_until(what: str, predicate: Callable[[], T], timeout: float = 60.0) -> T:
    """Poll until `predicate()` returns something truthy (Prometheus works on its own clock)."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def alerts_named(stack: DevStack, name: str) -> list[dict[str, Any]]:
    return [a for a in api(stack, "alerts")["alerts"] if a["labels"]["alertname"] == name]


def evaluated_after(stack: DevStack, group: str, moment: float) -> bool:
    """Whether the rule group was evaluated after `moment` (unix seconds)."""
    for g in api(stack, "rules")["groups"]:
        if g["name"] == group and g["lastEvaluation"]:
            # RFC 3339 with nanoseconds; Prometheus's clock is this machine's.
            stamp = g["lastEvaluation"][:26].rstrip("Z") + "+00:00"
            return datetime.fromisoformat(stamp).timestamp() > moment
    return False


def scraping(stack: DevStack, sim: SimCluster, cluster: str) -> None:
    """Every exporter target of `cluster` is up, its GPUs' series are in, and the GPU rules have
    been evaluated over them."""

    def all_up() -> bool:
        targets = api(stack, "targets", state="active")["activeTargets"]
        mine = [t for t in targets if t["labels"].get("cluster") == cluster]
        return len(mine) == len(sim.gpu_node_names()) + 1 and all(t["health"] == "up" for t in mine)

    wait_until(f"Prometheus to scrape every exporter of {cluster}", all_up)
    gpus = sum(sim.node_profile(n).gpus for n in sim.gpu_node_names())
    wait_until(
        "DCGM_FI_DEV_XID_ERRORS for every GPU",
        lambda: (
            len(api(stack, "query", query=f'DCGM_FI_DEV_XID_ERRORS{{cluster="{cluster}"}}')["result"]) == gpus
        ),
    )
    seen = time.time()
    wait_until("an evaluation of the GPU rules", lambda: evaluated_after(stack, "pitstop-gpu", seen))
