"""One real Prometheus and Alertmanager for this directory's tests, scraping an exporter whose
values the lab sets: two GPU nodes, one hot and with an Xid, a NaN and an infinite ratio."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge
from temporalio.testing import ActivityEnvironment

from pitstop.contracts import ModuleCall, ModuleResult
from tests.integration.prom.promlab import (
    LabUnavailable,
    alert_state,
    alertmanager,
    ensure_installed,
    exporter,
    get_json,
    prometheus,
    series_present,
    wait_for,
)
from tests.policy_site import PolicyLayer

RULES = """
groups:
  - name: lab
    rules:
      - alert: LabGpuXid
        expr: lab_xid != 0
        labels: {severity: critical}
        annotations: {summary: "Xid {{ $value }} on node {{ $labels.node }}"}
      - alert: LabGpuHot
        expr: lab_gpu_temp_celsius > 85
        for: 1h
        labels: {severity: warning}
"""


@dataclass
class Lab:
    prometheus: str
    alertmanager: str
    registry: CollectorRegistry

    def call(self, module: str, args: dict[str, Any], host: str = "gpu-node-002") -> ModuleCall:
        return ModuleCall(
            module=module,
            host=host,
            args=args,
            run_id=f"prom-test-{uuid.uuid4().hex[:8]}",
            task_path="observe/0/task/0",
        )

    def run(self, fn: Any, module: str, args: dict[str, Any]) -> ModuleResult:
        result: ModuleResult = ActivityEnvironment().run(fn, self.call(module, args))
        return result


def allow(policy: PolicyLayer, *urls: str) -> None:
    policy.doc.setdefault("prometheus", {}).setdefault("endpoints", []).extend(urls)
    policy.site.write()


@pytest.fixture(scope="module")
def lab_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    try:
        ensure_installed()
    except LabUnavailable as exc:
        pytest.skip(f"no real Prometheus here: {exc}")
    registry = CollectorRegistry()
    temp = Gauge("lab_gpu_temp_celsius", "GPU temperature", ["node", "gpu"], registry=registry)
    temp.labels("gpu-node-001", "0").set(60)
    temp.labels("gpu-node-002", "0").set(91)
    ratio = Gauge("lab_ratio", "A ratio that is not a number", ["node"], registry=registry)
    ratio.labels("gpu-node-001").set(math.nan)
    ratio.labels("gpu-node-002").set(math.inf)
    xid = Gauge("lab_xid", "Last Xid", ["node", "gpu"], registry=registry)
    xid.labels("gpu-node-001", "0").set(0)
    xid.labels("gpu-node-002", "0").set(79)
    directory: Path = tmp_path_factory.mktemp("promlab")
    with (
        exporter(registry) as target,
        alertmanager(directory / "am") as am_url,
        prometheus(directory / "prom", [target], RULES, alertmanager_url=am_url) as url,
    ):
        wait_for(lambda: series_present(url, "lab_xid"), "the exporter's series in Prometheus")
        wait_for(lambda: "firing" in alert_state(url, "LabGpuXid"), "LabGpuXid firing in Prometheus")
        wait_for(lambda: "pending" in alert_state(url, "LabGpuHot"), "LabGpuHot pending in Prometheus")
        wait_for(lambda: get_json(f"{am_url}/api/v2/alerts"), "Alertmanager to receive LabGpuXid", timeout=90)
        yield Lab(prometheus=url, alertmanager=am_url, registry=registry)


@pytest.fixture
def lab(lab_servers: Lab, worker_policy: PolicyLayer) -> Lab:
    allow(worker_policy, lab_servers.prometheus, lab_servers.alertmanager)
    return lab_servers
