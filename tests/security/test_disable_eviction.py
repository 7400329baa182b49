"""`disable_eviction` (the one way past PodDisruptionBudgets) only as a literal, behind a gate,
and in plain sight (pitstop/runbook/eviction.py).

The attack: `kube.drain: {disable_eviction: "{{ x }}"}` let `-e x=true` (any Temporal client,
any inventory var) turn a drain into DELETEs that ignore every PDB. Now the loader refuses
anything but the YAML literal, and the literal only in a stage gated before it; `pitstop
validate`, `pitstop plan` and a run started straight from a Temporal client all refuse at the
value's file:line:col, before any pod is touched. An allowed use is shown by `pitstop validate`
and in the run's status from the first moment.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest
from temporalio.client import Client
from typer.testing import CliRunner, Result

from pitstop.cli.app import app
from pitstop.contracts import RunStatus
from pitstop.runbook import RunbookError, load_runbook
from pitstop.runbook.eviction import WARNING
from pitstop.settings import Settings
from pitstop_sim import SimCluster
from tests.integration.engine.conftest import StartFn, status_when
from tests.integration.kube import conftest as kube_fixtures
from tests.integration.kube.conftest import StartSim

start_sim = kube_fixtures.start_sim
engine_worker, start_run, run = kube_fixtures.engine_worker, kube_fixtures.start_run, kube_fixtures.run

GATED = """\
name: force-drain
approvers: {sre: [alice, bob]}
stages:
  - name: force
    hosts: nodes
    serial: 1
    gate: {before: true, approvers: sre, prompt: "Delete pods without the Eviction API?"}
    tasks:
      - name: cordon
        kube.cordon: {}
      - name: drain without PDBs
        kube.drain: {disable_eviction: true, retry_interval_seconds: 0.2}
"""


def _validate(tmp_path: Path, text: str, extra: dict[str, str] | None = None) -> Result:
    runbook = tmp_path / "runbook.yaml"
    runbook.write_text(textwrap.dedent(text))
    for name, body in (extra or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(body))
    return CliRunner().invoke(app, ["validate", str(runbook)])


REFUSED = {
    "a template": (
        GATED.replace("disable_eviction: true", 'disable_eviction: "{{ disable_eviction }}"'),
        "runbook.yaml:12:40: 'disable_eviction' must be the literal true or false, "
        "got '{{ disable_eviction }}'",
    ),
    "a string": (
        GATED.replace("disable_eviction: true", 'disable_eviction: "true"'),
        "runbook.yaml:12:40: 'disable_eviction' must be the literal true or false, got 'true'",
    ),
    "a default from vars": (
        GATED.replace("disable_eviction: true", 'disable_eviction: "{{ force | default(false) }}"'),
        "runbook.yaml:12:40: 'disable_eviction' must be the literal true or false",
    ),
    "no gate": (
        GATED.replace(
            '    gate: {before: true, approvers: sre, prompt: "Delete pods without the Eviction API?"}\n', ""
        ),
        "runbook.yaml:11:40: 'disable_eviction: true' in stage 'force', which has no gate before it",
    ),
    "a gate after only": (
        GATED.replace("gate: {before: true,", "gate: {after: true,"),
        "runbook.yaml:12:40: 'disable_eviction: true' in stage 'force', which has no gate before it",
    ),
    "a gate that approves itself": (
        GATED.replace("approvers: sre,", "approvers: sre, timeout: 1h, on_timeout: approve,"),
        "runbook.yaml:12:40: 'disable_eviction: true' in stage 'force', "
        "whose gate approves itself on timeout",
    ),
    "a handler": (
        GATED.replace(
            "      - name: drain without PDBs\n",
            "        notify: force it\n    handlers:\n      - name: force it\n",
        ),
        "'disable_eviction: true' in the handlers of stage 'force'; only a stage's tasks may use it",
    ),
    "a rollback": (
        GATED.replace(
            "      - name: drain without PDBs\n", "    rollback:\n      - name: drain without PDBs\n"
        ),
        "'disable_eviction: true' in the rollback of stage 'force'; only a stage's tasks may use it",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_validate_refuses_every_other_use_at_its_place(tmp_path: Path, case: str) -> None:
    text, expected = REFUSED[case]
    result = _validate(tmp_path, text)
    assert result.exit_code == 1, result.output
    assert expected in " ".join(result.output.split())
    assert "PodDisruptionBudgets are NOT honoured" in " ".join(result.output.split())


def test_an_imported_task_file_is_judged_by_the_stage_that_imports_it(tmp_path: Path) -> None:
    drain = """\
    - name: drain without PDBs
      kube.drain: {disable_eviction: true}
    """
    two_stages = """\
    name: two
    approvers: {sre: [alice]}
    stages:
      - name: gated
        hosts: nodes
        serial: 1
        gate: {before: true, approvers: sre}
        tasks:
          - import_tasks: tasks/drain.yaml
      - name: open
        hosts: nodes
        serial: 1
        tasks:
          - block:
              - import_tasks: tasks/drain.yaml
    """
    result = _validate(tmp_path, two_stages, {"tasks/drain.yaml": drain})
    assert result.exit_code == 1
    assert (
        "drain.yaml:2:34: 'disable_eviction: true' in stage 'open', which has no gate before it"
        in " ".join(result.output.split())
    )


def test_the_literal_behind_a_gate_validates_and_is_shown(tmp_path: Path) -> None:
    result = _validate(tmp_path, GATED)
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())
    assert f"warning stage 'force': {WARNING} (kube.drain with disable_eviction: true at " in shown
    # The location is a path of any length (the session's temporary directory): the terminal's
    # width may fold it anywhere, so it is looked for with the folds taken out.
    assert "runbook.yaml:11)" in "".join(result.output.split())


# --- the plan and runs, through the embedded Temporal and the rehearsal cluster -------------

CLUSTER = """
cluster: {nodes: 2, domains: 1}
timing: {time_scale: 20, pod_start_seconds: 1, recreate_delay_seconds: 1}
workloads:
  deployments:
    - name: web
      namespace: serving
      replicas: 2
      placement: [gpu-node-001, gpu-node-001]
      pdb: {max_unavailable: 0}
"""


def _inventory(sim: SimCluster) -> str:
    """The inventory names the cluster; the worker holds its kubeconfig (registered)."""
    sim.register("rehearsal")
    return """
    cluster: {name: rehearsal}
    all:
      children:
        nodes:
          hosts:
            gpu-node-001: {}
    """


def _nothing_deleted(sim: SimCluster) -> None:
    counters = sim.counters()
    assert counters.deletions_total == 0 and counters.evictions_total == 0
    assert not (sim.get("nodes", "gpu-node-001") or {})["spec"].get("unschedulable")


async def test_pitstop_plan_with_the_var_on_the_command_line_is_refused_before_anything_starts(
    start_sim: StartSim,
    temporal_client: Client,
    temporal_settings: Settings,
    engine_worker: str,
    tmp_path: Path,
) -> None:
    sim = start_sim(CLUSTER)
    runbook = tmp_path / "runbook.yaml"
    runbook.write_text(GATED.replace("disable_eviction: true", 'disable_eviction: "{{ disable_eviction }}"'))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(textwrap.dedent(_inventory(sim)))
    before = (await temporal_client.count_workflows()).count
    env = {"TEMPORAL_ADDRESS": temporal_settings.temporal_address, "PITSTOP_TASK_QUEUE": engine_worker}
    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["plan", str(runbook), "-i", str(inventory), "-e", "disable_eviction=true"],
        env=env,
    )
    assert result.exit_code == 1
    # rich wraps long lines anywhere: compare without whitespace
    shown = "".join(result.output.split())
    assert "".join(f"{runbook}:12:40: 'disable_eviction' must be the literal true or false".split()) in shown
    assert (await temporal_client.count_workflows()).count == before, "no run was started"
    _nothing_deleted(sim)


async def test_a_run_started_by_any_client_with_the_var_is_refused_by_the_worker(
    start_sim: StartSim, start_run: StartFn, temporal_client: Client
) -> None:
    """The same attack without the CLI: a RunRequest with the runbook and the extra var, as the
    Temporal UI or any client of the namespace would send it. plan.load (on the worker) refuses;
    no host workflow starts, no pod is touched."""
    sim = start_sim(CLUSTER)
    handle = await start_run(
        GATED.replace("disable_eviction: true", 'disable_eviction: "{{ disable_eviction }}"'),
        _inventory(sim),
        vars={"disable_eviction": True},
    )
    report = await handle.result()
    assert report.status == "failed"
    assert report.msg.startswith("plan failed: runbook.yaml:12:40: 'disable_eviction' must be the literal")
    assert report.stages == []
    history = await temporal_client.get_workflow_handle(handle.id).fetch_history()
    assert not any(
        e.HasField("start_child_workflow_execution_initiated_event_attributes") for e in history.events
    )
    _nothing_deleted(sim)


async def test_the_plan_and_the_waiting_run_say_that_pdbs_are_not_honoured(
    start_sim: StartSim, start_run: StartFn
) -> None:
    sim = start_sim(CLUSTER)
    plan = await (await start_run(GATED, _inventory(sim), check_mode=True)).result()
    expected = f"stage 'force': {WARNING} (kube.drain with disable_eviction: true at runbook.yaml:11)"
    assert plan.status == "succeeded", plan.msg
    assert plan.notices == [expected]
    _nothing_deleted(sim)
    # The real run shows it while its gate waits, before any pod is deleted.
    handle = await start_run(GATED, _inventory(sim))
    status: RunStatus = await status_when(handle, lambda s: s.status == "waiting_gate")
    assert status.notices == [expected]
    assert [(g.rule.gate_id, g.status) for g in status.gates] == [("force:before", "open")]
    _nothing_deleted(sim)
    await handle.signal("abort", "test over")
    await handle.result()
    _nothing_deleted(sim)


def test_the_loader_is_the_same_for_validate_plan_and_the_worker(tmp_path: Path) -> None:
    runbook = tmp_path / "runbook.yaml"
    runbook.write_text(GATED.replace("disable_eviction: true", 'disable_eviction: "{{ x }}"'))
    with pytest.raises(RunbookError) as err:
        load_runbook(runbook)
    assert (err.value.line, err.value.column) == (12, 40)
