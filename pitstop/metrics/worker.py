"""What a worker started with `--metrics-address` runs for its metrics: the server (with the
Temporal SDK's runtime), the activity interceptor, and the runs-and-gates sweeper."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field

from temporalio.client import Client
from temporalio.worker import Interceptor

from pitstop.metrics.activities import MetricsInterceptor
from pitstop.metrics.runs import DEFAULT_INTERVAL, sweep_forever
from pitstop.metrics.server import MetricsServer, start_metrics

# How often runs and gates are counted (seconds): each look is ~15 visibility counts plus one
# status Query per open run, so not much faster than Prometheus scrapes.
SWEEP_ENV = "PITSTOP_METRICS_SWEEP_SECONDS"


@dataclass
class WorkerMetrics:
    server: MetricsServer
    interceptor: MetricsInterceptor = field(default_factory=MetricsInterceptor)
    interval: float = DEFAULT_INTERVAL
    _sweeper: asyncio.Task[None] | None = None

    @classmethod
    def start(cls, address: str, *, interval: float | None = None) -> WorkerMetrics:
        if interval is None:
            interval = float(os.environ.get(SWEEP_ENV) or DEFAULT_INTERVAL)
        return cls(server=start_metrics(address), interval=max(interval, 0.2))

    @property
    def interceptors(self) -> list[Interceptor]:
        return [self.interceptor]

    def sweep(self, client: Client, task_queue: str) -> asyncio.Task[None]:
        """Start counting the task queue's runs and gates (cancel the task to stop)."""
        self._sweeper = asyncio.get_running_loop().create_task(
            sweep_forever(client, task_queue, self.server.runs, self.interval), name="pitstop-metrics-sweep"
        )
        return self._sweeper

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.server.stop()
