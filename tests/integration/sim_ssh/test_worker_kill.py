"""A firmware rollout through the engine survives SIGKILL of its worker mid-flash: the node is
flashed exactly once, and the new firmware is active after the reboot that follows.

The worker is a real process (`python -m tests.worker_for_tests`, as in the engine's
durability test) talking to a simulated node over SSH with the generated inventory. The
updater is slowed down so that the kill lands while it runs; the flash carries on on the
node, and Temporal's retry of the task (after the task's `timeout`) finds it done or still
running from the marker pitstop left on the node, instead of flashing again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from pitstop.contracts import RunReport, RunRequest
from pitstop.settings import Settings
from pitstop_sim.ssh import SshNodeFaults
from tests.integration.engine.conftest import write_bundle
from tests.integration.engine.test_durability import WorkerProcess, wait_for
from tests.integration.sim_ssh.conftest import NODE, SimNodes

TARGET = "97.00.01.00.01"
# Simulated seconds (time scale 20): the flash runs 3 real seconds, longer than it takes to
# kill the worker once it started.
FLASH_SECONDS = 60

RUNBOOK = """
name: firmware-rollout
hosts: {node}
serial: 1
tasks:
  - name: flash
    ssh.firmware_update: {{target: "{target}", image: "{image}"}}
    # Per attempt: the attempt that dies with its worker is retried after this.
    timeout: 5s
  - name: reboot
    ssh.reboot: {{poll_interval: 0.2, reboot_timeout: 60}}
"""


@pytest.fixture
def worker(
    temporal_settings: Settings, task_queue: str, tmp_path: Path, nodes: SimNodes
) -> Iterator[WorkerProcess]:
    # Created after `nodes`: the worker's environment carries PITSTOP_SECRETS_DIR (the SSH key).
    proc = WorkerProcess(temporal_settings, task_queue, tmp_path)
    yield proc
    proc.kill()


@pytest.mark.timeout(150)
async def test_killing_the_worker_mid_flash_does_not_flash_twice(
    temporal_client: Client, nodes: SimNodes, worker: WorkerProcess, task_queue: str, tmp_path: Path
) -> None:
    sim = nodes.sim
    sim.set_ssh_faults(NODE, SshNodeFaults(flash_seconds=FLASH_SECONDS))
    image = nodes.firmware_image(TARGET)
    runbook = RUNBOOK.format(node=NODE, target=TARGET, image=image)
    files = write_bundle(tmp_path / "bundle", runbook, sim.inventory_path.read_text())
    await worker.start()
    handle: WorkflowHandle[object, RunReport] = await temporal_client.start_workflow(
        "RunbookWorkflow",
        RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files, requested_by="requester"),
        id=f"sim-firmware-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=RunReport,
        execution_timeout=timedelta(minutes=2),
    )

    async def flash_started() -> bool:
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            report = await handle.result()
            raise AssertionError(f"the run ended before the flash started: {report.status} {report.msg}")
        return sim.counters().firmware_flashes.get(NODE, 0) >= 1

    await wait_for("the flash to start", flash_started)
    worker.kill()
    assert sim.ssh_info(NODE).running, "the updater runs on after its worker died"
    assert sim.node_profile(NODE).firmware_version != TARGET
    await worker.start()

    report = await asyncio.wait_for(handle.result(), timeout=100)

    assert report.status == "succeeded", report.msg
    tasks = {t.name: t for t in report.stages[0].hosts[0].tasks}
    assert tasks["flash"].status == "changed" and tasks["reboot"].status == "changed"
    assert sim.counters().firmware_flashes == {NODE: 1}
    assert sim.counters().reboots == {NODE: 1}
    assert sim.node_profile(NODE).firmware_version == TARGET
    node = sim.get("nodes", NODE)
    assert node is not None and node["metadata"]["labels"]["pitstop.dev/firmware-version"] == TARGET
    events = [e.event for e in sim.timeline() if e.node == NODE and e.event != "registered"]
    assert events == ["reboot", "not_ready", "ready"]
