"""The worker's `/metrics` (`python worker.py --metrics-address`): a run that cordons and drains
two simulated nodes, holds at a gate and uncordons them, seen from the worker's metrics while it
runs and after; the Temporal SDK's own metrics on the same address; and a real Prometheus
scraping the worker finds the nodes cordoned by pitstop mid-run."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from pitstop.contracts import Decision, RunReport, RunRequest
from pitstop.devstack import free_port
from pitstop.settings import Settings
from pitstop_sim import SimCluster
from tests.conftest import REPO_ROOT
from tests.integration.engine.conftest import status_when
from tests.integration.prom.promlab import LabUnavailable, ensure_installed, get_json, prometheus, wait_for
from tests.integration.sim.conftest import StartSim, start_sim

__all__ = ["start_sim"]

CLUSTER = """
cluster: {nodes: 3, domains: 1, gpus_per_node: 8}
timing: {time_scale: 20}
"""
RUNBOOK = """
name: metrics-lab
approvers:
  sre: [alice]
stages:
  - name: cordon
    hosts: gpu
    serial: 2
    gate: {after: true, approvers: sre}
    tasks:
      - kube.cordon: {reason: metrics test}
      - kube.drain: {retry_interval_seconds: 0.2}
      - name: a Prometheus the policy does not allow
        prom.query: {url: "http://169.254.169.254", query: up}
        ignore_errors: true
  - name: uncordon
    hosts: gpu
    serial: 2
    tasks:
      - kube.uncordon: {}
"""
INVENTORY = """
cluster: {name: metrics-lab}
all:
  children:
    gpu:
      hosts:
        gpu-node-001: {}
        gpu-node-002: {}
"""


class MetricsWorker:
    """`python worker.py --metrics-address 127.0.0.1:<port>` on its own task queue."""

    def __init__(self, settings: Settings, task_queue: str, workdir: Path) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        self.log = workdir / "worker.log"
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": settings.temporal_address,
            "TEMPORAL_NAMESPACE": settings.temporal_namespace,
            "PITSTOP_METRICS_SWEEP_SECONDS": "0.5",
        }
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "worker.py", "--task-queue", task_queue, "--metrics-address", self.address],
                cwd=REPO_ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def scrape(self) -> str:
        if self.proc.poll() is not None:
            raise AssertionError(f"worker exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
        with urllib.request.urlopen(f"http://{self.address}/metrics", timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            return str(response.read().decode())

    def value(self, series: str) -> float | None:
        """The value of the exact series `name{labels}` (labels as the exposition orders them)."""
        found = re.search(rf"^{re.escape(series)} (\S+)$", self.scrape(), re.MULTILINE)
        return float(found.group(1)) if found else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=45)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def metrics_worker(temporal_settings: Settings, task_queue: str, tmp_path: Path) -> Iterator[MetricsWorker]:
    worker = MetricsWorker(temporal_settings, task_queue, tmp_path)
    try:
        wait_for(
            lambda: "temporal_" in worker.scrape(),
            "the worker's /metrics with the Temporal SDK's",
            timeout=60,
        )
        yield worker
    finally:
        worker.stop()


def unschedulable(sim: SimCluster, node: str) -> bool:
    return bool((sim.get("nodes", node) or {})["spec"].get("unschedulable"))


@pytest.mark.timeout(240)
async def test_a_run_shows_on_the_workers_metrics_and_a_real_prometheus_scrapes_them(
    start_sim: StartSim,
    metrics_worker: MetricsWorker,
    temporal_client: Client,
    task_queue: str,
    tmp_path: Path,
) -> None:
    sim = start_sim(CLUSTER)
    sim.register("metrics-lab")
    files = {"runbook.yaml": textwrap.dedent(RUNBOOK), "inventory.yaml": textwrap.dedent(INVENTORY)}
    handle = await temporal_client.start_workflow(
        "RunbookWorkflow",
        RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files, requested_by="ops"),
        id=f"metrics-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=RunReport,
    )
    status = await status_when(
        handle, lambda s: s.status in ("waiting_gate", "failed", "rolled_back"), within=90
    )
    if status.status != "waiting_gate":  # say why, not only that it never waited
        report = await handle.result()
        raise AssertionError(f"{report.msg}\nworker log:\n{metrics_worker.log.read_text()[-3000:]}")
    assert unschedulable(sim, "gpu-node-001") and unschedulable(sim, "gpu-node-002")
    w = metrics_worker
    cordoned = 'pitstop_nodes_cordoned{cluster="metrics-lab"}'
    await asyncio.to_thread(wait_for, lambda: w.value(cordoned) == 2.0, "2 nodes cordoned by pitstop")
    await asyncio.to_thread(wait_for, lambda: w.value("pitstop_gates_waiting") == 1.0, "one gate waiting")
    await asyncio.to_thread(
        wait_for, lambda: w.value('pitstop_runs{status="waiting_gate"}') == 1.0, "the run waiting at its gate"
    )
    assert (w.value(f'pitstop_gate_waiting_seconds{{gate="cordon:after",run_id="{handle.id}"}}') or -1) >= 0
    assert w.value('pitstop_drain_duration_seconds_count{cluster="metrics-lab",outcome="ok"}') == 2.0
    assert w.value('pitstop_module_failures_total{error_type="PolicyViolation",module="prom.query"}') == 2.0
    text = w.scrape()
    if os.environ.get("PITSTOP_RECORD_WORKER_METRICS"):  # what tests/fixtures/real/worker-metrics holds
        await asyncio.to_thread(Path(os.environ["PITSTOP_RECORD_WORKER_METRICS"]).write_text, text)
    assert "pitstop_temporal_sdk_metrics_up 1" in text
    # The SDK's own families (Core's names), on the same address.
    assert re.search(r"^temporal_request\{", text, re.MULTILINE), text[-2000:]
    assert re.search(r"^temporal_workflow_task_execution_latency_(bucket|count)\{", text, re.MULTILINE)
    assert re.search(r"^temporal_activity_execution_latency_(bucket|count)\{", text, re.MULTILINE)

    # A real Prometheus scraping the worker answers "how many nodes has pitstop cordoned?".
    try:
        ensure_installed()
    except LabUnavailable as exc:
        pytest.skip(f"the worker's metrics are right; no real Prometheus to scrape them: {exc}")
    with prometheus(tmp_path / "prom", [w.address], "groups: []\n") as url:

        def cordoned_in_prometheus() -> bool:
            result = get_json(
                f"{url}/api/v1/query", {"query": 'sum(pitstop_nodes_cordoned{cluster="metrics-lab"})'}
            )
            return bool(result["data"]["result"]) and result["data"]["result"][0]["value"][1] == "2"

        await asyncio.to_thread(
            wait_for, cordoned_in_prometheus, "Prometheus to see 2 nodes cordoned by pitstop"
        )

    await handle.execute_update("decide", Decision(approver="alice", approve=True, comment="fine"))
    report = await asyncio.wait_for(handle.result(), timeout=90)
    assert report.status == "succeeded", report.msg
    assert not unschedulable(sim, "gpu-node-001") and not unschedulable(sim, "gpu-node-002")
    await asyncio.to_thread(wait_for, lambda: w.value(cordoned) == 0.0, "no node cordoned by pitstop")
    await asyncio.to_thread(
        wait_for,
        lambda: (w.value('pitstop_runs{status="succeeded"}') or 0) >= 1.0,
        "the run counted as succeeded",
    )
    assert w.value("pitstop_gates_waiting") == 0.0
