"""The shipped promotion runbook (runbooks/promotion.yaml) through the engine: rings of clusters
one at a time, each cluster's change a child run (`runs.run`) held until the promotion went
through, a gate between rings, and a failing ring rolling back the rings already done.

The change is a small runbook of the worker's runbook directory whose task (`test.step`) records
each call, so the tests count what ran where, and whose rollback records an undo."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from pitstop.contracts import Decision, RunReport, RunRequest, RunStatus
from tests import testmodules
from tests.integration.engine.conftest import StartFn, status_when, write_bundle

REPO = Path(__file__).resolve().parents[3]
PROMOTION = (REPO / "runbooks" / "promotion.yaml").read_text()

CHANGE = """\
name: change
stages:
  - name: apply
    hosts: localhost
    any_errors_fatal: true
    tasks:
      # The earlier rings' runs (held open by the promotion) are this change's evidence.
      - name: The earlier rings went through
        runs.require: {run_id: "{{ item }}", runbook: change}
        loop: "{{ promotion_runs }}"
      - name: The change
        test.step:
          value: {cluster: "{{ cluster_name }}", evidence: "{{ promotion_runs }}"}
          fail_hosts: "{{ ['localhost'] if (regress | default(false)) else [] }}"
    rollback:
      - name: Undo the change
        test.step: {value: {undo: "{{ cluster_name }}"}}
"""

INVENTORY = """\
all:
  children:
    ring_lab:
      hosts:
        lab: {cluster_inventory: inventories/lab.yaml, evidence_from: []}
    ring_staging:
      hosts:
        staging: {cluster_inventory: inventories/staging.yaml, evidence_from: [lab]}
    ring_prod:
      hosts:
        prod: {cluster_inventory: inventories/prod.yaml, evidence_from: [lab, staging]}
"""
# The promotion inventories every cluster before and after (its `fleet_inventory_runbook`): here
# a stand-in that records nothing, so the steps counted are the change's.
FLEET_INVENTORY = """\
name: fleet-inventory
hosts: localhost
tasks:
  - debug: {msg: "inventory of {{ cluster_name }}"}
"""
FAST = {"soak": "1s", "poll": "0.2s"}


@pytest.fixture
def runbook_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The worker's runbook directory: the change and each cluster's inventory."""
    root = tmp_path / "worker-runbooks"
    (root / "inventories").mkdir(parents=True)
    (root / "change.yaml").write_text(CHANGE)
    (root / "fleet-inventory.yaml").write_text(FLEET_INVENTORY)
    for cluster in ("lab", "staging", "prod"):
        regress = "true" if cluster == "staging" else "false"
        (root / "inventories" / f"{cluster}.yaml").write_text(
            f"all:\n  vars:\n    cluster_name: {cluster}\n    regress_here: {regress}\n"
        )
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(root))
    return root


def steps() -> list[dict[str, Any]]:
    return [args["value"] for _, _, args in testmodules.CALLS]


async def approve(handle: WorkflowHandle[Any, RunReport], gate: str) -> None:
    def gate_open(status: RunStatus) -> bool:
        return any(g.rule.gate_id == gate and g.status == "open" for g in status.gates)

    await status_when(handle, gate_open, within=60)
    decision = Decision(gate=gate, approver="alice", approve=True, comment="ring ok")
    await handle.execute_update("decide", decision)


async def child(client: Client, parent: str, cluster: str) -> RunReport:
    handle = client.get_workflow_handle(f"{parent}.{cluster}", result_type=RunReport)
    report: RunReport = await handle.result()
    return report


async def test_a_promotion_runs_ring_by_ring_holds_each_run_and_releases_them_at_the_end(
    runbook_dir: Path, start_run: StartFn, temporal_client: Client
) -> None:
    handle = await start_run(
        PROMOTION, INVENTORY, vars={**FAST, "change_runbook": "change.yaml"}, requested_by="requester"
    )
    lab = temporal_client.get_workflow_handle(f"{handle.id}.lab", result_type=RunReport)
    # The lab ring ran and soaked; its run is held (open, waiting for the promotion) while the
    # staging gate waits for a person, and staging has not been touched.
    await approve_when_lab_is_held(handle, lab)
    await approve(handle, "production:before")
    report = await handle.result()

    assert report.status == "succeeded", report.msg
    assert [s["cluster"] for s in steps()] == ["lab", "staging", "prod"], "each ring once, in order"
    evidence = {s["cluster"]: s["evidence"] for s in steps()}
    assert evidence == {
        "lab": [],
        "staging": [f"{handle.id}.lab"],
        "prod": [f"{handle.id}.lab", f"{handle.id}.staging"],
    }, "each ring's change receives the runs of the rings before it"
    for cluster in ("lab", "staging", "prod"):
        ended = await child(temporal_client, handle.id, cluster)
        assert ended.status == "succeeded", f"{cluster}: released, it ends as its stages left it"
        assert ended.requested_by == "requester", "the child runs for the promotion's requester"
    staging = await child(temporal_client, handle.id, "staging")
    required = [t for s in staging.stages for h in s.hosts for t in h.tasks if t.module == "runs.require"]
    assert [t.status for t in required] == ["ok"], required
    said = [r["msg"] for r in required[0].data["results"]]
    assert said == [f"run {handle.id}.lab (change, held, held open by its promotion) counts"], said
    release = next(s for s in report.stages if s.name == "release")
    assert {h.host: h.status for h in release.hosts} == {"lab": "ok", "staging": "ok", "prod": "ok"}
    # Every cluster inventoried before and after, each a child of its own beside the change's;
    # no bucket given, the fleet views were skipped.
    for cluster in ("lab", "staging", "prod"):
        for when in ("before", "after"):
            inventoried = await child(temporal_client, handle.id, f"{cluster}.inventory-{when}")
            assert inventoried.status == "succeeded", (cluster, when, inventoried.msg)
    fleet = [t for s in report.stages if s.name.startswith("fleet-") for h in s.hosts for t in h.tasks]
    assert [t.status for t in fleet] == ["skipped", "skipped"], fleet


async def approve_when_lab_is_held(
    handle: WorkflowHandle[Any, RunReport], lab: WorkflowHandle[Any, RunReport]
) -> None:
    def gate_open(status: RunStatus) -> bool:
        return any(g.rule.gate_id == "staging:before" and g.status == "open" for g in status.gates)

    await status_when(handle, gate_open, within=60)
    held: RunStatus = await lab.query("status", result_type=RunStatus)
    assert held.status == "held", "the lab run stays open until the promotion went through"
    assert [s["cluster"] for s in steps()] == ["lab"], "nothing ran on staging before its gate"
    await handle.execute_update(
        "decide", Decision(gate="staging:before", approver="alice", approve=True, comment="lab soaked")
    )


async def test_a_regression_in_staging_rolls_staging_and_lab_back_and_never_touches_production(
    runbook_dir: Path, start_run: StartFn, temporal_client: Client
) -> None:
    # Staging's change fails there: its own run rolls it back, as its runbook says.
    (runbook_dir / "change.yaml").write_text(CHANGE.replace("(regress | default(false))", "regress_here"))
    handle = await start_run(PROMOTION, INVENTORY, vars={**FAST, "change_runbook": "change.yaml"})
    await approve(handle, "staging:before")
    report = await handle.result()

    assert report.status == "rolled_back", report.msg
    assert "staging" in (report.msg or "") or any(s.rollback_reason for s in report.stages)
    ran = steps()
    assert [s.get("cluster") for s in ran if "cluster" in s] == ["lab", "staging"]
    undone = [s["undo"] for s in ran if "undo" in s]
    assert undone == ["staging", "lab"], "staging undid itself, then the promotion rolled lab back"
    assert not any(s.get("cluster") == "prod" or s.get("undo") == "prod" for s in ran), "prod untouched"
    with pytest.raises(RPCError) as missing:
        await temporal_client.get_workflow_handle(f"{handle.id}.prod").describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND, "no run was ever started on production"

    lab = await child(temporal_client, handle.id, "lab")
    assert lab.status == "rolled_back"
    assert any(f"promotion {handle.id}" in (s.rollback_reason or "") for s in lab.stages), lab.stages
    staging = await child(temporal_client, handle.id, "staging")
    assert staging.status == "rolled_back", "staging rolled itself back and ended (never held)"
    stages = {s.name: s.status for s in report.stages}
    assert stages["production"] != "ok" and stages["release"] != "ok", stages


async def test_a_runbook_cannot_release_or_roll_back_a_run_that_is_not_its_own_child(
    runbook_dir: Path, start_run: StartFn
) -> None:
    runbook = """\
    name: meddle
    stages:
      - name: one
        hosts: ring_lab
        tasks:
          - name: Roll back a run this one never started
            runs.rollback: {reason: "not mine"}
    """
    report = await (await start_run(runbook, INVENTORY)).result()
    task = report.stages[0].hosts[0].tasks[0]
    assert task.status == "failed"
    assert f"has no child run {report.run_id}.lab (runs.run starts it)" in task.msg


async def start_promotion(
    client: Client, queue: str, tmp_path: Path, inventory: str = INVENTORY, **vars: Any
) -> WorkflowHandle[Any, RunReport]:
    files = write_bundle(tmp_path / "promotion", PROMOTION, inventory)
    request = RunRequest(
        runbook="runbook.yaml",
        inventory="inventory.yaml",
        files=files,
        requested_by="requester",
        vars={**FAST, "change_runbook": "change.yaml", **vars},
    )
    return await client.start_workflow(
        "RunbookWorkflow",
        request,
        id=f"promo-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        result_type=RunReport,
    )


def failed_tasks(report: RunReport) -> dict[str, str]:
    return {
        f"{s.name}/{h.host}": t.msg
        for s in report.stages
        for h in s.hosts
        for t in h.tasks
        if t.status == "failed"
    }


async def test_a_run_someone_else_started_under_a_childs_id_is_refused_never_adopted(
    runbook_dir: Path, engine_worker: str, temporal_client: Client, tmp_path: Path
) -> None:
    # Any client can guess the id `<promotion>.lab` and start a run under it first: here a plan
    # (check mode) by another requester, held, which a promotion must not count as lab's change.
    forged_id = f"promo-{uuid.uuid4().hex[:8]}"
    forged = RunRequest(
        runbook="change.yaml",
        inventory="inventories/lab.yaml",
        requested_by="mallory",
        check_mode=True,
        hold=True,
    )
    await temporal_client.start_workflow(
        "RunbookWorkflow", forged, id=f"{forged_id}.lab", task_queue=engine_worker, result_type=RunReport
    )
    files = write_bundle(tmp_path / "promotion", PROMOTION, INVENTORY)
    request = RunRequest(
        runbook="runbook.yaml",
        inventory="inventory.yaml",
        files=files,
        requested_by="requester",
        vars={**FAST, "change_runbook": "change.yaml"},
    )
    handle = await temporal_client.start_workflow(
        "RunbookWorkflow", request, id=forged_id, task_queue=engine_worker, result_type=RunReport
    )
    report = await handle.result()

    assert report.status != "succeeded"
    said = failed_tasks(report)
    assert "lab/lab" in said, said
    assert f"a run {forged_id}.lab exists that this run did not start" in said["lab/lab"]
    assert not [r for r in testmodules.RECORDS if not r.check_mode], "no change ran for real anywhere"
    with contextlib.suppress(RPCError):  # it may have ended (a plan ends once planned)
        await temporal_client.get_workflow_handle(f"{forged_id}.lab").terminate("test over")


async def test_two_hosts_that_map_to_one_child_id_do_not_share_a_run(
    runbook_dir: Path, engine_worker: str, temporal_client: Client, tmp_path: Path
) -> None:
    inventory = INVENTORY.replace(
        "        lab: {cluster_inventory: inventories/lab.yaml, evidence_from: []}",
        "        lab/1: {cluster_inventory: inventories/lab.yaml, evidence_from: []}\n"
        "        lab 1: {cluster_inventory: inventories/lab.yaml, evidence_from: []}",
    )
    handle = await start_promotion(temporal_client, engine_worker, tmp_path, inventory)
    report = await handle.result()
    said = failed_tasks(report)
    assert len([k for k in said if k.startswith("lab/")]) == 1, said
    assert any("did not start for this host" in m for m in said.values()), said
    assert [s.get("cluster") for s in steps() if "cluster" in s] == ["lab"], "one change ran, for one host"


async def test_a_held_child_terminated_by_hand_stops_the_next_ring_and_is_not_called_rolled_back(
    runbook_dir: Path, engine_worker: str, temporal_client: Client, tmp_path: Path
) -> None:
    handle = await start_promotion(temporal_client, engine_worker, tmp_path)
    lab = temporal_client.get_workflow_handle(f"{handle.id}.lab")

    def gate_open(status: RunStatus) -> bool:
        return any(g.rule.gate_id == "staging:before" and g.status == "open" for g in status.gates)

    await status_when(handle, gate_open, within=60)
    await lab.terminate("an operator ended it")
    await handle.execute_update("decide", Decision(gate="staging:before", approver="alice", approve=True))
    report = await handle.result()

    # Staging's change requires lab's run, which proves nothing now; the promotion rolls back,
    # and lab's rollback says that nothing undid lab's change (no hang, no false "rolled back").
    assert report.status == "rolled_back", report.msg
    said = failed_tasks(report)
    assert "compensation failed on" in report.msg and "lab" in report.msg, report.msg
    staging = await child(temporal_client, handle.id, "staging")
    required = [
        t.data for s in staging.stages for h in s.hosts for t in h.tasks if t.module == "runs.require"
    ]
    assert "did not complete (it terminated)" in str(required), required
    assert list(said) == ["staging/staging"], said


async def test_a_held_run_counts_as_evidence_only_for_its_own_promotion(
    runbook_dir: Path, engine_worker: str, temporal_client: Client, tmp_path: Path, start_run: StartFn
) -> None:
    handle = await start_promotion(temporal_client, engine_worker, tmp_path)

    def gate_open(status: RunStatus) -> bool:
        return any(g.rule.gate_id == "staging:before" and g.status == "open" for g in status.gates)

    await status_when(handle, gate_open, within=60)
    outsider = f"""\
    name: outsider
    stages:
      - name: one
        hosts: localhost
        tasks:
          - runs.require: {{run_id: "{handle.id}.lab", runbook: change}}
    """
    report = await (await start_run(outsider)).result()
    msg = report.stages[0].hosts[0].tasks[0].msg
    assert f"run {handle.id}.lab is held open by promotion {handle.id}" in msg, msg
    await handle.signal("abort", "test over")
