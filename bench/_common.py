"""Workloads the benchmark worker serves: the raw-Temporal floors and a no-op pitstop module.

Kept apart from the benchmark script because Temporal's sandbox imports the module that
defines a workflow; this one imports nothing the sandbox restricts. Not a benchmark itself.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import ModuleCall, ModuleResult
    from pitstop.modules import ModuleArgs, ModuleSpec, get_module, register

NOOP_MODULE = "bench.noop"
ACTIVITY_TIMEOUT = timedelta(seconds=30)


@activity.defn(name="bench.floor_noop")
async def floor_noop() -> None:
    """The raw floor's activity: does nothing, as `bench.noop` does."""


@workflow.defn(name="BenchFloorActivities")
class FloorActivities:
    """N activities one after the other: what Temporal itself costs per activity task."""

    @workflow.run
    async def run(self, n: int) -> int:
        for _ in range(n):
            await workflow.execute_activity(floor_noop, start_to_close_timeout=ACTIVITY_TIMEOUT)
        return n


@workflow.defn(name="BenchFloorLocalActivities")
class FloorLocalActivities:
    """N local activities one after the other: the cheapest step a workflow can take."""

    @workflow.run
    async def run(self, n: int) -> int:
        for _ in range(n):
            await workflow.execute_local_activity(floor_noop, start_to_close_timeout=ACTIVITY_TIMEOUT)
        return n


class NoopArgs(ModuleArgs):
    pass


def _register_noop() -> None:
    # The sandbox imports this module again for the floor workflows; pitstop is passed
    # through, so its registry already holds the spec then.
    if get_module(NOOP_MODULE) is None:
        register(
            ModuleSpec(
                name=NOOP_MODULE,
                args_model=NoopArgs,
                summary="Benchmark module: does nothing, reports ok.",
                supports_check_mode=True,
            )
        )


_register_noop()


@activity.defn(name=f"module.{NOOP_MODULE}")
async def bench_noop(call: ModuleCall) -> ModuleResult:
    return ModuleResult(msg=f"noop on {call.host}")


BENCH_WORKFLOWS: list[type] = [FloorActivities, FloorLocalActivities]
BENCH_ACTIVITIES: list[Callable[..., Any]] = [floor_noop, bench_noop]
# What `python worker.py` serves from this module when PITSTOP_MODULES names it (with `bench/`
# on PYTHONPATH): the no-op module the engine benchmarks run as a real activity.
ACTIVITIES: list[Callable[..., Any]] = [bench_noop]

if __name__ == "__main__":
    print("bench/_common.py holds helpers for the benchmarks; nothing to run")
