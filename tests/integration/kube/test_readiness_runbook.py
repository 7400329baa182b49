"""runbooks/worker-cluster-readiness.yaml through a real worker (RunbookWorkflow -> HostWorkflow ->
kube.readiness) against a MultiKueue manager and worker served by pitstop_sim: a matching worker
passes in check mode with nothing written; a worker missing the model-cache StorageClass and
team-a's LocalQueue, whose pull Secret has another type, fails naming each, and neither its result
nor any event of the run's history holds the Secret's value; the export on the manager's
inventory feeds the check of a worker whose worker policy does not know the manager."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from typer.testing import CliRunner

from pitstop.cli.app import app
from pitstop.contracts import RunReport, TaskOutcome
from pitstop_sim import SimCluster
from tests.integration.engine.conftest import RunFn, StartFn
from tests.integration.kube.conftest import StartSim
from tests.integration.kube.readiness_setup import (
    SECRET_VALUE,
    SIM,
    multikueue,
    platform,
    writes_of_read_kinds,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
RUNBOOK = (REPO / "runbooks" / "worker-cluster-readiness.yaml").read_text(encoding="utf-8")


def inventory(cluster: str) -> str:
    return f"cluster: {{name: {cluster}}}\nall:\n  hosts:\n    localhost: {{}}\n"


def readiness_task(report: RunReport) -> TaskOutcome:
    tasks = [t for stage in report.stages for host in stage.hosts for t in host.tasks]
    ran = [t for t in tasks if t.module == "kube.readiness" and t.status != "skipped"]
    assert len(ran) == 1, [(t.name, t.status) for t in tasks]
    return ran[0]


async def history_text(client: Client, workflow_id: str) -> str:
    """Every event of the run and of its host workflows, payloads as their bytes decoded."""
    texts: list[str] = []
    ids = [workflow_id]
    while ids:
        current = ids.pop()
        async for event in client.get_workflow_handle(current).fetch_history_events():
            if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
                ids.append(event.start_child_workflow_execution_initiated_event_attributes.workflow_id)
            texts.append(str(event))
    return "\n".join(texts)


@pytest.fixture
def clusters(start_sim: StartSim) -> tuple[SimCluster, str, SimCluster, str]:
    manager, worker = start_sim(SIM), start_sim(SIM)
    manager_name = f"manager-{uuid.uuid4().hex[:6]}"
    worker_name = f"gpu-b-{uuid.uuid4().hex[:6]}"
    manager.register(manager_name)
    worker.register(worker_name)
    platform(manager)
    multikueue(manager, worker_name)
    return manager, manager_name, worker, worker_name


def test_the_shipped_runbook_validates() -> None:
    result = CliRunner().invoke(app, ["validate", "runbooks/worker-cluster-readiness.yaml"])
    assert result.exit_code == 0, result.output


async def test_a_matching_worker_passes_in_check_mode_and_nothing_is_written(
    clusters: tuple[SimCluster, str, SimCluster, str], run: RunFn
) -> None:
    manager, manager_name, worker, worker_name = clusters
    platform(worker)
    worker.reset_counters()
    manager.reset_counters()
    report = await run(
        RUNBOOK, inventory(worker_name), vars={"manager_cluster": manager_name}, check_mode=True
    )
    assert report.status == "succeeded", report.msg
    task = readiness_task(report)
    assert task.status == "ok", task.msg
    assert f"worker cluster {worker_name} has all 10 expected object(s)" in task.msg
    assert writes_of_read_kinds(worker) == {} and writes_of_read_kinds(manager) == {}


async def test_a_worker_missing_objects_fails_naming_each_and_the_secret_never_enters_history(
    clusters: tuple[SimCluster, str, SimCluster, str],
    start_run: StartFn,
    temporal_client: Client,
) -> None:
    _, manager_name, worker, worker_name = clusters
    platform(worker, storage_class=False, local_queue=False, secret_type="Opaque")
    handle = await start_run(RUNBOOK, inventory(worker_name), vars={"manager_cluster": manager_name})
    report = await handle.result()
    assert report.status == "failed"
    task = readiness_task(report)
    assert task.status == "failed"
    for needed in (
        f"StorageClass model-cache missing on worker cluster {worker_name} (manager cluster {manager_name}'s "
        "PersistentVolumeClaim team-a/model-cache uses it)",
        f"LocalQueue team-a/team-a missing on worker cluster {worker_name}",
        f"Secret team-a/registry-pull different on worker cluster {worker_name} "
        "(type: 'Opaque' here, 'kubernetes.io/dockerconfigjson' expected)",
    ):
        assert needed in task.msg, task.msg
    history = await history_text(temporal_client, handle.id)
    # The history is readable here (the Secret's name is in it), and its value is not.
    assert "registry-pull" in history
    encoded = base64.b64encode(f"robot:{SECRET_VALUE}".encode()).decode()
    for value in (SECRET_VALUE, encoded, 'dockerconfigjson\\":'):
        assert value not in history
        assert value not in report.model_dump_json()


async def test_the_export_on_the_managers_inventory_feeds_a_worker_that_cannot_reach_the_manager(
    clusters: tuple[SimCluster, str, SimCluster, str], run: RunFn
) -> None:
    _, manager_name, worker, worker_name = clusters
    platform(worker)
    exported = await run(
        RUNBOOK,
        inventory(manager_name),
        vars={"mode": "export", "worker_cluster": worker_name},
        check_mode=True,
    )
    assert exported.status == "succeeded", exported.msg
    expected: list[dict[str, Any]] = readiness_task(exported).data["expected"]
    assert {e["kind"] for e in expected} >= {"RuntimeClass", "Secret", "ClusterQueue", "LocalQueue"}
    report = await run(RUNBOOK, inventory(worker_name), vars={"expected": expected})
    assert report.status == "succeeded", report.msg
    assert "has all" in readiness_task(report).msg
