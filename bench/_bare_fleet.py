"""Bare Temporal with the fleet run's shape: the floor `bench/fleet_scale.py` compares the engine to.

A parent workflow keeps at most `max_in_flight` child workflows running (a sliding window, as
pitstop's `rolling` does); each child runs `tasks` no-op activities one after the other. The
parent continues as new, after draining its children, every CHILDREN_PER_EXECUTION children
(or when Temporal suggests it), so its history stays bounded at 10,000 hosts too. Nothing of
pitstop runs here: the SDK's default data converter and sandbox, no interceptors.

`python bench/_bare_fleet.py ADDRESS TASK_QUEUE MAX_CONCURRENT_ACTIVITIES` serves these on a
worker of its own process, with the activity thread pool sized as pitstop's worker sizes it.
Kept apart from the benchmark script because Temporal's sandbox imports the module that
defines a workflow; this one imports nothing the sandbox restricts.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

ACTIVITY_TIMEOUT = timedelta(seconds=60)
# ~4 parent events per child (initiated, started, completed, a share of workflow tasks):
# 2,000 children stay far below Temporal's 51,200-event limit.
CHILDREN_PER_EXECUTION = 2000


@dataclass(frozen=True)
class BareFleetJob:
    hosts: int
    tasks: int
    max_in_flight: int
    start: int = 0  # the first host this execution starts (continue-as-new carries it)


@activity.defn(name="bench.bare_noop")
def bare_noop() -> None:
    """Does nothing: what a module task costs Temporal when the module costs nothing."""


@workflow.defn(name="BenchBareHost")
class BareHost:
    """One host: `tasks` activities in sequence."""

    @workflow.run
    async def run(self, tasks: int) -> int:
        for _ in range(tasks):
            await workflow.execute_activity(bare_noop, start_to_close_timeout=ACTIVITY_TIMEOUT)
        return tasks


@workflow.defn(name="BenchBareFleet")
class BareFleet:
    """All hosts, at most `max_in_flight` at once."""

    def __init__(self) -> None:
        self.in_flight = 0

    async def _host(self, index: int, tasks: int) -> None:
        await workflow.execute_child_workflow(
            BareHost.run, tasks, id=f"{workflow.info().workflow_id}/h{index:06d}"
        )
        self.in_flight -= 1

    @workflow.run
    async def run(self, job: BareFleetJob) -> int:
        launched: list[asyncio.Task[None]] = []
        index = job.start
        while index < job.hosts and len(launched) < CHILDREN_PER_EXECUTION:
            if workflow.info().is_continue_as_new_suggested():
                break
            await workflow.wait_condition(lambda: self.in_flight < job.max_in_flight)
            self.in_flight += 1
            launched.append(asyncio.create_task(self._host(index, job.tasks)))
            index += 1
        await asyncio.gather(*launched)
        if index < job.hosts:
            workflow.continue_as_new(replace(job, start=index))
        return job.hosts


async def serve(address: str, task_queue: str, max_concurrent_activities: int) -> None:
    """Serve the bare workflows until SIGTERM."""
    client = await Client.connect(address)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    with ThreadPoolExecutor(max_workers=max_concurrent_activities) as pool:
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[BareFleet, BareHost],
            activities=[bare_noop],
            activity_executor=pool,
            max_concurrent_activities=max_concurrent_activities,
        )
        async with worker:
            print("bare worker serving", flush=True)
            await stop.wait()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2], int(sys.argv[3])))
