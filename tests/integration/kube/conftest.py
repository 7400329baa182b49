"""Kube-module fixtures: the rehearsal cluster (from `tests/integration/sim`) and a runner that
calls a module activity in-process, with a real activity context (heartbeats, deadline,
cancellation) from `temporalio.testing.ActivityEnvironment`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.activity import _Definition as activity_defn
from temporalio.testing import ActivityEnvironment

from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.runbook.inventory import ClusterConfig
from pitstop_sim import SimCluster
from tests.integration.engine.conftest import engine_worker, run, start_run
from tests.integration.sim.conftest import StartSim, start_sim

__all__ = ["ModuleRunner", "StartSim", "engine_worker", "module_runner", "run", "start_run", "start_sim"]

Activity = Callable[[ModuleCall], ModuleResult]


class ModuleRunner:
    """`runner(activity, sim, args, host=...)` -> ModuleResult, as the engine would call it."""

    def __init__(self) -> None:
        self.heartbeats: list[Any] = []
        self._registered: dict[int, str] = {}

    def cluster(self, sim: SimCluster) -> ClusterConfig:
        """The simulator as an inventory names it (`rehearsal`, then `rehearsal-2`... when a test
        runs several), registered with the worker under that name."""
        name = self._registered.get(id(sim))
        if name is None:
            count = len(self._registered)
            name = "rehearsal" if not count else f"rehearsal-{count + 1}"
            sim.register(name)
            self._registered[id(sim)] = name
        return ClusterConfig(name=name)

    def call(
        self,
        sim: SimCluster,
        module: str,
        args: dict[str, Any],
        *,
        host: str = "gpu-node-001",
        check_mode: bool = False,
        run_id: str = "run-1",
        task_path: str = "stage/0",
        host_vars: dict[str, Any] | None = None,
    ) -> ModuleCall:
        return ModuleCall(
            module=module,
            host=host,
            args=args,
            check_mode=check_mode,
            run_id=run_id,
            task_path=task_path,
            host_vars=host_vars or {"inventory_hostname": host},
            cluster=self.cluster(sim),
        )

    def env(self, timeout: float = 60.0, heartbeat_details: list[Any] | None = None) -> ActivityEnvironment:
        env = ActivityEnvironment()
        now = datetime.now(UTC)
        env.info = dataclasses.replace(
            env.info,
            scheduled_time=now,
            started_time=now,
            current_attempt_scheduled_time=now,
            start_to_close_timeout=timedelta(seconds=timeout),
            heartbeat_details=heartbeat_details or [],
        )
        env.on_heartbeat = lambda *details: self.heartbeats.append(details[0] if details else None)
        return env

    def __call__(
        self,
        activity_fn: Activity,
        sim: SimCluster,
        args: dict[str, Any] | None = None,
        *,
        timeout: float = 60.0,
        heartbeat_details: list[Any] | None = None,
        **call: Any,
    ) -> ModuleResult:
        name = activity_defn.must_from_callable(activity_fn).name
        module = name.removeprefix("module.")
        request = self.call(sim, module, args or {}, **call)
        result: ModuleResult = self.env(timeout, heartbeat_details).run(activity_fn, request)
        return result


@pytest.fixture
def module_runner() -> ModuleRunner:
    return ModuleRunner()
