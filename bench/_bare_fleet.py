"""Bare Temporal with the engine's shape, for `bench/engine_overhead.py`: no pitstop at all.

One parent workflow starts H child workflows, at most C at a time (as a rolling stage does),
and each child runs K no-op activities one after the other. Kept in its own file that imports
only temporalio, because Temporal's sandbox re-imports the module that defines a workflow for
every workflow instance: this is the floor the engine is compared with, so it must not pay
for anything the engine's sandbox passes through.

Served by a separate process: `python -c "import _bare_fleet; _bare_fleet.serve()"` with
`bench/` on PYTHONPATH, $TEMPORAL_ADDRESS and $BARE_TASK_QUEUE set (a plain Temporal worker:
default data converter, default sandbox, no interceptors). Prints `bare worker ready`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

READY_LINE = "bare worker ready"
ACTIVITY_TIMEOUT = timedelta(seconds=60)
# Children started per parent run before it continues as new: each child puts ~3 events in
# the parent's history, so 2,000 keep a run far below Temporal's 51,200-event limit at any H.
CHILDREN_PER_RUN = 2_000
# Same as the engine worker's default (pitstop.worker_app.DEFAULT_MAX_CONCURRENT_ACTIVITIES).
MAX_CONCURRENT_ACTIVITIES = 16


@dataclass
class FleetShape:
    hosts: int
    tasks: int
    in_flight: int
    # Children already started by earlier runs of this parent (continue-as-new).
    done: int = 0
    # When set (one per task), each task annotates the host's node with its key instead of
    # doing nothing (`bench/_bare_kube.py`; the worker needs BARE_KUBECONFIG and BARE_NODES).
    annotate: list[str] = field(default_factory=list)
    value: str = ""


@dataclass
class HostShape:
    index: int
    tasks: int
    annotate: list[str] = field(default_factory=list)
    value: str = ""


@dataclass
class AnnotateWork:
    index: int  # the host's position in BARE_NODES: node names stay out of workflow inputs
    key: str
    value: str


@activity.defn(name="bench.bare_noop")
async def bare_noop() -> None:
    """Does nothing, as the engine's `bench.noop` module does."""


@workflow.defn(name="BenchBareHost")
class BareHost:
    """One host: K activities in sequence."""

    @workflow.run
    async def run(self, host: HostShape) -> int:
        for task in range(host.tasks):
            if host.annotate:
                work = AnnotateWork(index=host.index, key=host.annotate[task], value=host.value)
                await workflow.execute_activity(
                    "bench.bare_annotate", work, start_to_close_timeout=ACTIVITY_TIMEOUT
                )
            else:
                await workflow.execute_activity(bare_noop, start_to_close_timeout=ACTIVITY_TIMEOUT)
        return host.tasks


@workflow.defn(name="BenchBareFleet")
class BareFleet:
    """H hosts, at most C in flight; a new child starts as soon as one ends."""

    def __init__(self) -> None:
        self.running = 0

    async def _host(self, index: int, shape: FleetShape) -> None:
        host = HostShape(index=index, tasks=shape.tasks, annotate=shape.annotate, value=shape.value)
        try:
            await workflow.execute_child_workflow(
                BareHost.run, host, id=f"{workflow.info().workflow_id}-h{index:05d}"
            )
        finally:
            self.running -= 1

    @workflow.run
    async def run(self, shape: FleetShape) -> int:
        started = shape.done
        children: list[asyncio.Task[None]] = []
        while started < shape.hosts:
            await workflow.wait_condition(lambda: self.running < shape.in_flight)
            if started - shape.done >= CHILDREN_PER_RUN or workflow.info().is_continue_as_new_suggested():
                break  # drain the children in flight, then go on in a fresh history
            self.running += 1
            children.append(asyncio.create_task(self._host(started, shape)))
            started += 1
        await asyncio.gather(*children)
        if started < shape.hosts:
            workflow.continue_as_new(dataclasses.replace(shape, done=started))
        return started


async def _serve(address: str, queue: str) -> None:
    client = await Client.connect(address)
    activities: list[Callable[..., Any]] = [bare_noop]
    if os.environ.get("BARE_KUBECONFIG"):
        from _bare_kube import bare_annotate

        activities.append(bare_annotate)
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[BareFleet, BareHost],
        activities=activities,
        # As the engine's worker: sync activities on a pool as large as the activity slots.
        activity_executor=ThreadPoolExecutor(max_workers=MAX_CONCURRENT_ACTIVITIES),
        max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print(READY_LINE, flush=True)
        await stop.wait()


def serve() -> None:
    asyncio.run(_serve(os.environ["TEMPORAL_ADDRESS"], os.environ["BARE_TASK_QUEUE"]))
