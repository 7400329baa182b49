"""The activity interceptor that turns what module activities did into metrics.

It sees every activity the worker runs (regular and local), after it ran: a module activity
(`module.<name>`) that raised counts as a failure of its error type, one that returned
`failed: true` as `failed`; `kube.drain` is timed; after a `kube.cordon` or `kube.uncordon`
that changed something, the cluster's count of nodes cordoned by pitstop is read again on a
thread (`cordoned.py`), without delaying the activity. A metric that cannot be updated never
fails the activity: it is logged and skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.metrics.cordoned import cluster_of, known_cluster, observe_cordoned
from pitstop.metrics.registry import DRAIN_SECONDS, MODULE_FAILURES

log = logging.getLogger("pitstop.metrics")

MODULE_PREFIX = "module."
DRAIN = "kube.drain"
CORDON_MODULES = ("kube.cordon", "kube.uncordon")


def error_type(exc: BaseException) -> str:
    if isinstance(exc, ApplicationError):
        return exc.type or "ApplicationError"
    return type(exc).__name__


class _MetricsInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, pending: set[asyncio.Task[Any]]) -> None:
        super().__init__(next)
        self._pending = pending

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        name = activity.info().activity_type
        if not name.startswith(MODULE_PREFIX):
            return await self.next.execute_activity(input)
        module = name[len(MODULE_PREFIX) :]
        call = input.args[0] if input.args and isinstance(input.args[0], ModuleCall) else None
        started = time.monotonic()
        try:
            result = await self.next.execute_activity(input)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            MODULE_FAILURES.labels(module, error_type(exc)).inc()
            self._timed(module, call, started, ok=False)
            raise
        failed = isinstance(result, ModuleResult) and result.failed
        if failed:
            MODULE_FAILURES.labels(module, "failed").inc()
        self._timed(module, call, started, ok=not failed)
        if (
            module in CORDON_MODULES
            and call is not None
            and not call.check_mode
            and isinstance(result, ModuleResult)
            and result.changed
        ):
            self._recount(call)
        return result

    @staticmethod
    def _timed(module: str, call: ModuleCall | None, started: float, *, ok: bool) -> None:
        if module == DRAIN and call is not None and not call.check_mode:
            DRAIN_SECONDS.labels(known_cluster(call), "ok" if ok else "failed").observe(
                time.monotonic() - started
            )

    def _recount(self, call: ModuleCall) -> None:
        async def recount() -> None:
            try:
                await asyncio.to_thread(observe_cordoned, call)
            except Exception as exc:  # a metric never fails a task
                log.warning("nodes cordoned on %s not counted: %s", cluster_of(call), exc)

        task = asyncio.get_running_loop().create_task(recount())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)


class MetricsInterceptor(Interceptor):
    """Worker interceptor: module failures, drain durations and cordoned nodes as metrics."""

    def __init__(self) -> None:
        # Background recounts, referenced until done (the event loop keeps only weak references).
        self.pending: set[asyncio.Task[Any]] = set()

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _MetricsInbound(next, self.pending)
