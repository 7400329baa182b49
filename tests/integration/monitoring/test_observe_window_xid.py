"""A rehearsal's observe window judged by the real Prometheus: a stage's `observe` check asks
the stack's Prometheus (prom.alerts) for alerts on the stage's nodes. With no fault the window
passes; an Xid injected on one of the nodes while the window runs fails it on GpuXidError and
rolls the stage back."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowHandle

from pitstop.contracts import RunReport
from pitstop.devstack import DevStack
from pitstop.prometheus_stack import write_sim_targets
from tests.integration.engine.conftest import engine_worker, hosts_inventory, run, start_run, status_when
from tests.integration.monitoring.conftest import StartSim
from tests.integration.monitoring.promstack import scraping
from tests.policy_site import PolicyLayer

__all__ = ["engine_worker", "run", "start_run"]  # the engine's fixtures, used here

SCENARIO = """
    name: observe-xid
    cluster: {nodes: 3, domains: 1, gpus_per_node: 2}
"""

RUNBOOK = """
    name: observe-xid
    stages:
      - name: maintain
        hosts: gpu
        tasks:
          - test.step: {value: maintained}
        observe:
          duration: "{{ window }}"
          interval: 1s
          checks:
            - name: no alerts on the maintained nodes
              prom.alerts:
                url: "{{ prometheus_url }}"
                match: {cluster: rehearsal}
                match_re: {node: "gpu-node-001|gpu-node-002"}
        rollback:
          - test.step: {value: "undo maintain"}
"""


@pytest.fixture
def watched(prometheus: DevStack, start_sim: StartSim, worker_policy: PolicyLayer) -> Any:
    """A rehearsal cluster the stack's Prometheus scrapes, and a policy that lets prom.* ask it."""
    sim = start_sim(SCENARIO)
    write_sim_targets(prometheus.home, "rehearsal", sim.url, sim.gpu_node_names())
    worker_policy.doc.setdefault("prometheus", {}).setdefault("endpoints", []).append(
        prometheus.prometheus_url
    )
    worker_policy.site.write()
    scraping(prometheus, sim, "rehearsal")
    return sim


async def test_window_passes_without_a_fault(prometheus: DevStack, watched: Any, run: Any) -> None:
    report: RunReport = await run(
        RUNBOOK, hosts_inventory(1), vars={"window": "3s", "prometheus_url": prometheus.prometheus_url}
    )
    assert report.status == "succeeded", report.rollback_reason
    assert report.stages[0].observations and all(o.status == "ok" for o in report.stages[0].observations)


async def test_an_xid_during_the_window_fails_it_on_the_alert(
    prometheus: DevStack, watched: Any, start_run: Any
) -> None:
    handle: WorkflowHandle[Any, RunReport] = await start_run(
        RUNBOOK, hosts_inventory(1), vars={"window": "60s", "prometheus_url": prometheus.prometheus_url}
    )
    await status_when(handle, lambda s: bool(s.stages) and s.stages[0].status == "observing", within=60)
    watched.inject_xid("gpu-node-002", 79)
    report = await handle.result()
    assert report.status == "rolled_back"
    assert report.rollback_reason is not None
    assert "GpuXidError" in report.rollback_reason and "gpu-node-002" in report.rollback_reason
    assert report.stages[0].observations[-1].status == "failed"
