"""Runs the simulated controllers on the simulator's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from pitstop_sim.context import SimContext
from pitstop_sim.controllers.base import Controller
from pitstop_sim.store import WatchEvent

if TYPE_CHECKING:
    from pitstop_sim.api import KubeApi

log = logging.getLogger(__name__)
MAX_ROUNDS = 50  # per wake-up, before yielding to HTTP requests


class ControllerManager:
    def __init__(self, ctx: SimContext, api: KubeApi) -> None:
        from pitstop_sim.controllers.frameworks import FrameworkController
        from pitstop_sim.controllers.gc import GarbageCollector
        from pitstop_sim.controllers.gpu_driver import GpuDriverController
        from pitstop_sim.controllers.kubelet import Kubelet
        from pitstop_sim.controllers.kueue import KueueController
        from pitstop_sim.controllers.nodes import NodeLifecycle
        from pitstop_sim.controllers.pdb import DisruptionController
        from pitstop_sim.controllers.scheduler import Scheduler
        from pitstop_sim.controllers.workloads import (
            DaemonSetController,
            DeploymentController,
            JobController,
            ReplicaSetController,
        )

        self.ctx = ctx
        self.stopped = False
        self.kubelet = Kubelet(ctx, api, self)
        self.nodes = NodeLifecycle(ctx, api, self)
        self.scheduler = Scheduler(ctx, api, self)
        self.disruption = DisruptionController(ctx, api, self)
        self.controllers: list[Controller] = [
            GarbageCollector(ctx, api, self),
            DeploymentController(ctx, api, self),
            ReplicaSetController(ctx, api, self),
            DaemonSetController(ctx, api, self),
            JobController(ctx, api, self),
            FrameworkController(ctx, api, self),
            KueueController(ctx, api, self),
            GpuDriverController(ctx, api, self),
            self.nodes,
            self.scheduler,
            self.kubelet,
            self.disruption,
        ]
        self._event: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] = lambda: None

    def _observe(self, event: WatchEvent) -> None:
        for controller in self.controllers:
            controller.observe(event)
        self.wake()

    def wake(self) -> None:
        if self._event is not None:
            self._event.set()

    def start(self) -> None:
        """Start on the running loop: watch the store from now on, after a full resync of what is there
        (seeding happens before, without paying for every controller's observation)."""
        self._event = asyncio.Event()
        self.ctx.poke = self.wake
        self._unsubscribe = self.ctx.store.subscribe(self._observe)
        for controller in self.controllers:
            controller.resync()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="pitstop-sim-controllers")
        self.wake()

    async def stop(self) -> None:
        self.stopped = True
        self._unsubscribe()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def run_once(self) -> bool:
        """One pass over all controllers; True when any had work."""
        busy = False
        for controller in self.controllers:
            if controller.pending():
                busy = True
                try:
                    controller.sync()
                except Exception:  # a controller bug must not stop the cluster
                    log.exception("controller %s failed", controller.name)
        return busy

    async def _run(self) -> None:
        assert self._event is not None
        while not self.stopped:
            await self._event.wait()
            self._event.clear()
            for _ in range(MAX_ROUNDS):
                if not self.run_once():
                    break
            else:
                self._event.set()
            await asyncio.sleep(0)
