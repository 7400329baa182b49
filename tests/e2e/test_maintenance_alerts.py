"""The maintenance runbook watched by a real Prometheus (Debian's, with the alert pack of
runbooks/monitoring) scraping the rehearsal cluster's dcgm-exporter and kube-state-metrics
endpoints and the worker's own /metrics:

- the first failure domain's window passes (no fault, no alert);
- an Xid injected on a node of the second domain while its window runs fires GpuXidError in
  Prometheus; the window fails on it, the stage rolls back, and that node (only that one) goes
  back out of service with the alert named in its cordon reason and its maintenance-failed
  annotation;
- while the run is paused with nodes cordoned, Prometheus's `pitstop_nodes_cordoned` for the
  cluster equals the number of nodes the cluster shows cordoned by pitstop.

Everything is read from the simulator and from Prometheus's API, not from the run's account."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from activities import ACTIVITIES
from pitstop.contracts import RunReport
from pitstop.demo import maintenance as dm
from pitstop.demo.prometheus_watch import cordoned_by_pitstop
from pitstop.devstack import DevStack, free_port, free_ports_config
from pitstop.metrics.server import start_metrics
from pitstop.metrics.worker import WorkerMetrics
from pitstop.prometheus_stack import PROMETHEUS_BINARY, WORKER_METRICS_ENV, write_sim_targets
from pitstop.worker_app import build_worker
from tests.e2e.conftest import Rehearsal, approve_gates, start_rehearsal
from tests.integration.engine.conftest import status_when
from tests.integration.monitoring.promstack import api, scraping, wait_until
from tests.policy_site import PolicyLayer
from workflows import WORKFLOWS

pytestmark = pytest.mark.integration

SCENARIO = """\
# Six H100 nodes in two zones, a serving Deployment spread over them; fast timing.
name: maintenance-alerts
seed: 5
cluster:
  nodes: 6
  domains: 2
  gpus_per_node: 8
  gpu_product: NVIDIA-H100-80GB-HBM3
  driver_version: "550.90.07"
  firmware_version: "96.00.89.00.01"
timing:
  time_scale: 60
  pod_start_seconds: 30
  recreate_delay_seconds: 5
  reboot_seconds: 180
  validation_seconds: {dcgm: 240, nccl: 120}
workloads:
  deployments:
    - name: llm-serve
      namespace: serving
      replicas: 2
      gpus: 1
      pdb: {min_available: 1}
      topology_spread: [{max_skew: 1}]
      placement: [gpu-node-002, gpu-node-005]
health:
  default: {nccl_busbw_gbps: 392}
"""
FAULTY = "gpu-node-005"  # zone-b: the second wave


@pytest.fixture
def metrics_address(monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the worker serves /metrics; the stack's Prometheus is configured to scrape it."""
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv(WORKER_METRICS_ENV, address)
    return address


@pytest.fixture
def prometheus(metrics_address: str, tmp_path: Path) -> Iterator[DevStack]:
    if not PROMETHEUS_BINARY.is_file():
        pytest.skip(
            f"{PROMETHEUS_BINARY} is not installed (Debian package `prometheus`; `make test` installs it)"
        )
    config = free_ports_config(tmp_path / "stack-home", parts=("prometheus",), prometheus_port=free_port())
    with DevStack(config).running(timeout=60) as stack:
        yield stack


@pytest.fixture
def rehearsal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prometheus: DevStack, worker_policy: PolicyLayer
) -> Iterator[Rehearsal]:
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    scenario = tmp_path / "maintenance-alerts.yaml"
    scenario.write_text(SCENARIO)
    with start_rehearsal(tmp_path / "rehearsal", scenario) as rehearsal:
        for key, value in dm.worker_environment(rehearsal.sim, rehearsal.workdir).items():
            monkeypatch.setenv(key, value)
        write_sim_targets(prometheus.home, "rehearsal", rehearsal.sim.url, rehearsal.sim.gpu_node_names())
        worker_policy.doc.setdefault("prometheus", {}).setdefault("endpoints", []).append(
            prometheus.prometheus_url
        )
        worker_policy.site.write()
        scraping(prometheus, rehearsal.sim, "rehearsal")
        yield rehearsal


def _cordoned_by_pitstop(rehearsal: Rehearsal) -> set[str]:
    return cordoned_by_pitstop(rehearsal.sim)


def _prometheus_cordoned(prometheus: DevStack) -> int | None:
    result = api(prometheus, "query", query='pitstop_nodes_cordoned{cluster="rehearsal"}')["result"]
    return int(float(result[0]["value"][1])) if result else None


@pytest.mark.timeout(420)
async def test_an_alert_in_a_domains_window_takes_its_node_back_out_and_names_it(
    temporal_client: Client,
    task_queue: str,
    rehearsal: Rehearsal,
    prometheus: DevStack,
    metrics_address: str,
) -> None:
    request = rehearsal.request()
    request.vars.update(
        observe_window="15s",
        prometheus_url=prometheus.prometheus_url,
        prometheus_match={"cluster": "rehearsal"},
    )
    metrics = WorkerMetrics(server=start_metrics(metrics_address, with_sdk=False))
    try:
        async with build_worker(
            temporal_client,
            task_queue,
            workflows=WORKFLOWS,
            activities=ACTIVITIES,
            extra_interceptors=metrics.interceptors,
        ):
            handle: WorkflowHandle[Any, RunReport] = await temporal_client.start_workflow(
                "RunbookWorkflow",
                request,
                id=f"e2e-alerts-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
                result_type=RunReport,
                execution_timeout=timedelta(seconds=400),
            )
            approver = asyncio.ensure_future(approve_gates(handle))
            try:
                # Mid-run, with nodes cordoned and the run paused (no node is cordoned or given
                # back meanwhile): Prometheus counts what the cluster shows.
                await status_when(handle, lambda s: bool(_cordoned_by_pitstop(rehearsal)), within=240)
                await handle.signal("pause")
                await status_when(handle, lambda s: s.status == "paused", within=60)

                def consistent() -> int:
                    # Hosts in flight finish their current task after the pause: the count is
                    # read between two equal readings of the cluster.
                    before = _cordoned_by_pitstop(rehearsal)
                    counted = _prometheus_cordoned(prometheus)
                    after = _cordoned_by_pitstop(rehearsal)
                    return len(after) if before == after and after and counted == len(after) else 0

                held = await asyncio.to_thread(
                    wait_until, "pitstop_nodes_cordoned as the cluster", consistent
                )
                assert held >= 1
                await handle.signal("resume")

                await status_when(handle, _observing_wave("2/2 zone-b"), within=240)
                rehearsal.sim.inject_xid(FAULTY, 79)
                report = await asyncio.wait_for(handle.result(), timeout=240)
                # The worker's gauge, scraped by Prometheus, counts the node cordoned again by the
                # rollback (read while the worker and its /metrics still serve).
                await asyncio.to_thread(
                    wait_until, "pitstop_nodes_cordoned = 1", lambda: _prometheus_cordoned(prometheus) == 1
                )
            finally:
                approver.cancel()
    finally:
        metrics.stop()

    assert report.status == "rolled_back", report.msg
    assert report.rollback_reason is not None
    assert "GpuXidError" in report.rollback_reason and FAULTY in report.rollback_reason, (
        report.rollback_reason
    )
    fleet = next(s for s in report.stages if s.name == "fleet")
    # The first domain's window passed on the same checks (Prometheus asked, no alert).
    first = [
        o for o in fleet.observations if o.status == "ok" and any(t.module == "prom.alerts" for t in o.tasks)
    ]
    assert first, [o.msg for o in fleet.observations]
    # Only the faulty node is out of service again, with the alert named.
    node = rehearsal.sim.get("nodes", FAULTY) or {}
    annotations = node["metadata"]["annotations"]
    assert node["spec"].get("unschedulable") is True
    assert "GpuXidError" in annotations["pitstop.dev/cordon-reason"]
    assert annotations["pitstop.dev/maintenance-failed"].startswith("observe window: alert GpuXidError")
    assert _cordoned_by_pitstop(rehearsal) == {FAULTY}


def _observing_wave(label: str) -> Any:
    return lambda s: any(
        st.name == "fleet" and st.status == "observing" and st.wave == label for st in s.stages
    )
