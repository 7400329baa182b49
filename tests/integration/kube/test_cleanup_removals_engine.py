"""runbooks/tasks/cleanup-removals.yaml through the engine (RunbookWorkflow -> HostWorkflow ->
kube.removals, a gate, kube.delete) against the rehearsal cluster, with the shipped manifests:
kuberay v1.2.2 ships a rehearsal Deployment that v1.3.0 no longer does; the upgrade leaves it
behind and the cleanup removes it once the gate is approved, and only then; kueue's upgrade
dropped nothing; a check-mode run deletes nothing and opens no gate."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from pitstop.contracts import Decision, RunReport, RunStatus
from pitstop_sim import SimCluster
from tests.integration.engine.conftest import RunFn, StartFn, status_when
from tests.integration.kube.conftest import StartSim

REPO = Path(__file__).resolve().parents[3]
TASK_FILE = REPO / "runbooks" / "tasks" / "cleanup-removals.yaml"
SHIPPED = REPO / "runbooks" / "manifests" / "platform"
RETIRED = "kuberay-rehearsal-retired"
GATE = "cleanup-removals@localhost"
CLUSTER = """
cluster: {nodes: 2, domains: 2}
timing: {time_scale: 20}
"""
INVENTORY = "cluster: {name: rehearsal}\nall:\n  hosts:\n    localhost: {}\n"
VARS = """
vars:
  manifests: manifests/platform
  targets: {kuberay: v1.3.0, kueue: v0.10.1, kubernetes: v1.31.2}
approvers:
  sre: [alice, bob]
"""
# The previous releases as they were installed, the preflight's version inventory, then the
# upgrade's kube.apply of the new releases (as platform-upgrade.yaml's controllers stage).
INSTALL = (
    """
name: install-and-upgrade
"""
    + VARS
    + """
stages:
  - name: controllers
    hosts: localhost
    tasks:
      - name: Namespaces
        kube.apply:
          definition:
            - {apiVersion: v1, kind: Namespace, metadata: {name: ray-system}}
            - {apiVersion: v1, kind: Namespace, metadata: {name: kueue-system}}
      - name: The previous releases
        kube.apply: {src: "{{ manifests }}/{{ item }}", force_conflicts: true}
        loop: [kuberay/v1.2.2, kueue/v0.9.1]
      - name: The new releases
        kube.apply: {src: "{{ manifests }}/{{ item }}/{{ targets[item] }}", force_conflicts: true}
        loop: [kuberay, kueue]
"""
)
CLEANUP = (
    """
name: cleanup
"""
    + VARS
    + """
stages:
  - name: preflight
    hosts: localhost
    tasks:
      - name: The version inventory before the upgrade (inventory.versions in the real preflight)
        set_fact:
          preflight: {inventory: {current: {kuberay: v1.2.2, kueue: v0.9.1, kubernetes: v1.30.6}}}
  - name: cleanup
    hosts: localhost
    tasks:
      # As platform-upgrade.yaml's cleanup stage wraps it: what is not deleted is left for later.
      - name: Objects the new releases no longer ship
        block:
          - import_tasks: tasks/cleanup-removals.yaml
        rescue:
          - name: Left for later, in the change record
            set_fact:
              cleanup_left: "not deleted ({{ ansible_failed_task.name }}: {{ ansible_failed_result.msg }})"
      - name: What the change record lists
        debug: "{{ cleanup_left | default('nothing left') }}"
"""
)


@pytest.fixture
def upgraded(start_sim: StartSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimCluster:
    """The rehearsal cluster; the worker's runbook directory holds the shipped manifests."""
    for component in ("kuberay", "kueue"):
        shutil.copytree(SHIPPED / component, tmp_path / "manifests" / "platform" / component)
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    sim = start_sim(CLUSTER)
    sim.register("rehearsal")
    return sim


def files() -> dict[str, str]:
    return {"tasks/cleanup-removals.yaml": TASK_FILE.read_text()}


def tasks(report: RunReport, stage: str) -> dict[str, Any]:
    found = next(s for s in report.stages if s.name == stage)
    return {t.name: t for t in found.hosts[0].tasks}


def retired(sim: SimCluster) -> dict[str, Any] | None:
    return sim.get("apps/deployments", RETIRED, namespace="ray-system")


async def install(run: RunFn) -> None:
    report = await run(INSTALL, INVENTORY)
    assert report.status == "succeeded", report.msg


async def test_the_cleanup_lists_the_dropped_object_asks_the_gate_then_deletes_only_it(
    upgraded: SimCluster, run: RunFn, start_run: StartFn
) -> None:
    await install(run)
    left_behind = retired(upgraded)
    assert left_behind is not None, "the upgrade's apply does not prune: the old object stays"

    handle = await start_run(CLEANUP, INVENTORY, extra_files=files())

    def gate_open(status: RunStatus) -> bool:
        return any(g.rule.gate_id == GATE and g.status == "open" for g in status.gates)

    status = await status_when(handle, gate_open, within=60)
    assert retired(upgraded) is not None, "nothing is deleted before the gate is approved"
    assert next(g for g in status.gates if g.rule.gate_id == GATE).rule.approvers == ["alice", "bob"]
    await handle.execute_update("decide", Decision(gate=GATE, approver="alice", approve=True, comment="ok"))
    report = await handle.result()

    assert report.status == "succeeded", report.msg
    done = tasks(report, "cleanup")
    plan = done[
        "Objects the upgraded components' previous releases shipped and their new releases no longer do"
    ]
    assert plan.msg.splitlines() == [
        "1 objects the new releases no longer ship: 1 to delete, 0 kept, 0 already gone",
        f"Deployment ray-system/{RETIRED} (kuberay v1.2.2 -> v1.3.0): delete - "
        "the new release no longer ships it",
    ]
    deleted = done["The objects the new releases no longer ship, deleted (each only as it was when listed)"]
    assert (deleted.status, deleted.msg) == (
        "changed",
        "deleted 1 objects (Background propagation), 0 already gone",
    )
    assert retired(upgraded) is None
    # What the new releases ship is untouched.
    assert upgraded.get("apps/deployments", "kuberay-operator", namespace="ray-system") is not None
    assert upgraded.get("apps/deployments", "kueue-controller-manager", namespace="kueue-system") is not None


async def test_a_rejected_gate_leaves_everything_and_a_check_mode_run_deletes_nothing(
    upgraded: SimCluster, run: RunFn, start_run: StartFn
) -> None:
    await install(run)
    uid = (retired(upgraded) or {})["metadata"]["uid"]

    checked = await run(CLEANUP, INVENTORY, extra_files=files(), check_mode=True)
    assert checked.status == "succeeded", checked.msg
    dry = tasks(checked, "cleanup")[
        "The objects the new releases no longer ship, deleted (each only as it was when listed)"
    ]
    assert dry.msg == "would delete 1 objects (Background propagation), 0 already gone"
    assert (retired(upgraded) or {})["metadata"]["uid"] == uid

    handle = await start_run(CLEANUP, INVENTORY, extra_files=files())
    await status_when(
        handle, lambda s: any(g.rule.gate_id == GATE and g.status == "open" for g in s.gates), 60
    )
    await handle.execute_update(
        "decide", Decision(gate=GATE, approver="bob", approve=False, comment="not now")
    )
    report = await handle.result()
    # The upgrade is done either way: a rejected cleanup is left for later and said so.
    assert report.status == "succeeded", report.msg
    said = tasks(report, "cleanup")["What the change record lists"].msg
    assert said.startswith("not deleted (Delete what the new releases no longer ship"), said
    assert (retired(upgraded) or {})["metadata"]["uid"] == uid
