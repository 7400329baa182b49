"""Record the workflow histories the replay tests replay: `python -m tests.replay.record`.

Starts an embedded Temporal dev server on free ports in a scratch directory, serves the
engine's workflows and activities plus the test modules in this process, runs each
scenario below to its end (approving gates through the `decide` Update as they open),
checks that it ended as the scenario expects, and writes into `tests/histories/`:

- `<scenario>.runbook.json`: the RunbookWorkflow history (`WorkflowHistory.to_json()`);
  `<scenario>.runbook-<n>.json` for earlier executions when the run continued as new;
- `<scenario>.host-<what>.json`: the history of selected HostWorkflow children;
- `manifest.json`: for each file, the workflow id and type replay needs (a history holds
  neither) and what the scenario covers.

Re-record after every change to `workflows/` (see `tests/histories/README.md`). Old files
are removed first, so a renamed scenario leaves nothing stale behind.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from activities import ACTIVITIES
from pitstop.client import connect
from pitstop.contracts import Decision, RunReport, RunRequest, RunState, RunStatus
from pitstop.devstack import DevStack, free_ports_config
from pitstop.settings import Settings
from pitstop.worker_app import WorkerKeys, build_worker
from tests import testmodules
from workflows import WORKFLOWS

HISTORIES_DIR = Path(__file__).resolve().parent.parent / "histories"
MANIFEST = "manifest.json"
TASK_QUEUE = "replay-record"
APPROVER = "alice"
REQUESTER = "requester"


class RecordedHistory(BaseModel):
    """One entry of `manifest.json`."""

    file: str
    workflow_id: str
    workflow_type: str
    scenario: str
    covers: str


@dataclass(frozen=True)
class Scenario:
    name: str
    covers: str
    runbook: str
    hosts: int
    expect: RunState
    domains: int = 1
    check_mode: bool = False
    max_launches_per_execution: int = 400
    # Started with `hold` (a promotion's ring): once held, the recorder sends this signal.
    held: Literal["release", "rollback"] | None = None
    # HostWorkflow children to keep, as suffixes of `<run id>/`: `<stage>/<host>`,
    # `<stage>/rollback/<host>`, `run/rollback`, `<stage>/observe/<n>`.
    children: Sequence[str] = field(default_factory=tuple)

    def inventory(self) -> str:
        lines = ["all:", "  children:", "    gpu:", "      hosts:"]
        lines += [f"        h{i:02d}: {{failure_domain: d{i % self.domains}}}" for i in range(self.hosts)]
        return "\n".join(lines) + "\n"

    @property
    def workflow_id(self) -> str:
        return f"replay-{self.name}"


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="serial",
        covers="serial ramp, register, set_fact, when, loop, assert, notify + handlers",
        hosts=3,
        expect="succeeded",
        children=("fleet/h00",),
        runbook="""
        name: replay-serial
        stages:
          - name: fleet
            hosts: gpu
            serial: [1, 2]
            tasks:
              - name: step
                test.step: {value: "{{ inventory_hostname }}"}
                register: stepped
                notify: announce
              - set_fact: {seen: "{{ stepped.msg }}"}
              - name: per item
                test.step: {value: "{{ item }}"}
                loop: [a, b]
              - debug: {msg: "{{ seen }}"}
                when: seen is defined
              - name: skipped by when
                test.step: {value: never}
                when: inventory_hostname == "nobody"
              - assert: {that: ["stepped.changed"]}
        handlers:
          - name: announce
            test.step: {value: handler}
        """,
    ),
    Scenario(
        name="local",
        covers="local activities (a read-only module) between regular activities, registered results",
        hosts=2,
        expect="succeeded",
        children=("fleet/h00",),
        runbook="""
        name: replay-local
        stages:
          - name: fleet
            hosts: gpu
            tasks:
              - name: read first
                test.read: {value: "{{ inventory_hostname }}"}
                register: first
              - name: read again
                test.read: {value: "{{ first.value }}-again"}
              - name: step
                test.step: {value: "{{ first.msg }}"}
              - name: read last
                test.read: {value: last}
        """,
    ),
    Scenario(
        name="rolling",
        covers=(
            "rolling window with per-domain limit and domain round robin, run_once, continue-as-new "
            "(max_launches_per_execution), observe window with checks"
        ),
        hosts=6,
        domains=2,
        expect="succeeded",
        max_launches_per_execution=4,
        children=("fleet/h00", "fleet/observe/0"),
        runbook="""
        name: replay-rolling
        stages:
          - name: fleet
            hosts: gpu
            rolling: {max_in_flight: 3, max_unavailable_per_domain: 2, order: domain_round_robin}
            tasks:
              - name: once for the stage
                test.step: {value: once}
                run_once: true
              - name: upgrade
                test.step: {value: "{{ inventory_hostname }}", sleep: 0.05}
            observe:
              duration: 2s
              interval: 1s
              checks:
                - name: no failed host
                  assert: {that: "stage.failed_hosts | length == 0"}
        """,
    ),
    Scenario(
        name="gates",
        covers=(
            "stage `before` gate (four-eyes) with a refused and an accepted `decide` Update, "
            "per-host gate task, stage `after` gate"
        ),
        hosts=2,
        expect="succeeded",
        children=("canary/h00",),
        runbook="""
        name: replay-gates
        approvers:
          sre: [alice, bob]
        stages:
          - name: canary
            hosts: h00
            gate: {before: true, approvers: sre, four_eyes: true}
            tasks:
              - name: prepare
                test.step: {value: prepare}
              - name: confirm on the node
                gate: {approvers: sre, prompt: "Node looks fine?"}
              - name: finish
                test.step: {value: finish}
          - name: fleet
            hosts: gpu:!h00
            rolling: {max_in_flight: 1}
            gate: {after: true, approvers: sre}
            tasks:
              - debug: {msg: "fleet {{ inventory_hostname }}"}
        """,
    ),
    Scenario(
        name="rescue",
        covers=(
            "block/rescue/always, until/retries/delay on durable timers, ignore_errors, "
            "failed_when, changed_when"
        ),
        hosts=2,
        expect="succeeded",
        children=("fleet/h01",),
        runbook="""
        name: replay-rescue
        stages:
          - name: fleet
            hosts: gpu
            tasks:
              - name: guarded
                block:
                  - name: may fail
                    test.step: {value: one, fail_hosts: [h01]}
                  - debug: {msg: "reached on {{ inventory_hostname }}"}
                rescue:
                  - name: recover
                    test.step: {value: rescued}
                always:
                  - name: cleanup
                    test.step: {value: cleanup}
              - name: poll until it holds (it never does)
                test.step: {value: poll}
                register: polled
                until: polled.value == "ready"
                retries: 1
                delay: 1s
                ignore_errors: true
              - name: judged by conditions
                test.step: {value: judged}
                register: judged
                failed_when: judged.value != "judged"
                changed_when: false
        """,
    ),
    Scenario(
        name="rollback",
        covers="rollback_when after a failed host, stage rollback in reverse order, run-level rollback",
        hosts=3,
        expect="rolled_back",
        children=("canary/h01", "canary/rollback/h01", "run/rollback"),
        runbook="""
        name: replay-rollback
        stages:
          - name: canary
            hosts: gpu
            serial: 1
            tasks:
              - name: upgrade
                test.step: {value: up, fail_hosts: [h01]}
            rollback_when:
              - "{{ stage.failed_hosts | length > 0 }}"
            rollback:
              - name: undo
                test.step: {value: undo}
          - name: fleet
            hosts: gpu
            tasks:
              - debug: {msg: never reached}
        rollback:
          - name: tell
            debug: {msg: "rolled back {{ run.id }}: {{ run.rollback_reason }}"}
        """,
    ),
    Scenario(
        name="check",
        covers="check mode: gate approved without asking, modules in check mode, check_mode: false",
        hosts=2,
        expect="succeeded",
        check_mode=True,
        children=("fleet/h00",),
        runbook="""
        name: replay-check
        approvers:
          sre: [alice]
        stages:
          - name: fleet
            hosts: gpu
            rolling: {max_in_flight: 2}
            gate: {before: true, approvers: sre}
            tasks:
              - name: would change
                test.step: {value: planned}
              - name: cannot run in check mode
                test.nocheck: {cmd: reboot}
              - name: read-only probe
                test.step: {value: probe}
                check_mode: false
        """,
    ),
    Scenario(
        name="waves",
        covers=(
            "waves by failure domain: canary coverage checked before the first wave, a gate before "
            "the second wave (approved through the `decide` Update), a window with checks per wave"
        ),
        hosts=6,
        domains=2,
        expect="succeeded",
        children=("fleet/wave/d1/observe/0",),
        runbook="""
        name: replay-waves
        approvers:
          sre: [alice]
        stages:
          - name: canary
            hosts: h00:h01
            tasks:
              - test.step: {value: canary}
          - name: fleet
            hosts: gpu:!h00:!h01
            rolling: {max_in_flight: 2}
            waves:
              gate: {approvers: sre, prompt: "Next domain?"}
              observe:
                duration: 1s
                interval: 1s
                checks:
                  - assert: {that: "stage.wave.count == 2"}
              canary: {stage: canary, cover: "{{ failure_domain }}"}
            tasks:
              - name: upgrade
                test.step: {value: "{{ inventory_hostname }}"}
        """,
    ),
    Scenario(
        name="hold",
        covers="a promotion's ring: held after its stages succeed, then rolled back by the promotion "
        "(the `rollback` signal while held: every stage's rollback, latest first)",
        hosts=2,
        expect="rolled_back",
        held="rollback",
        children=("fleet/rollback/h00",),
        runbook="""
        name: replay-hold
        stages:
          - name: fleet
            hosts: gpu
            tasks:
              - name: change
                test.step: {value: "{{ inventory_hostname }}"}
            rollback:
              - name: undo
                test.step: {value: "undo {{ inventory_hostname }}"}
        """,
    ),
)


async def answer_hold(
    handle: WorkflowHandle[Any, RunReport], scenario: Scenario, done: asyncio.Event
) -> None:
    """Once the run is held, send the scenario's signal (as a promotion would)."""
    while scenario.held is not None and not done.is_set():
        status = await handle.query("status", result_type=RunStatus)
        if status.status == "held":
            if scenario.held == "rollback":
                await handle.signal("rollback", "recorded: a later ring failed")
            else:
                await handle.signal("release")
            return
        await asyncio.sleep(0.2)


async def approve_open_gates(handle: WorkflowHandle[Any, RunReport], done: asyncio.Event) -> None:
    """Approve every gate as it opens; before each approval, a refused vote by the requester
    (not an approver), so the histories hold both outcomes of the Update."""
    voted: set[str] = set()
    while not done.is_set():
        status = await handle.query("status", result_type=RunStatus)
        for gate in status.gates:
            gate_id = gate.rule.gate_id
            if gate.status != "open" or gate_id in voted:
                continue
            voted.add(gate_id)
            try:
                await handle.execute_update(
                    "decide", Decision(gate=gate_id, approve=True, approver=REQUESTER)
                )
            except WorkflowUpdateFailedError:
                pass  # refused, as intended: the refusal is in the history
            else:
                raise RuntimeError(f"gate {gate_id}: the requester's vote was accepted; it must be refused")
            await handle.execute_update(
                "decide", Decision(gate=gate_id, approve=True, approver=APPROVER, comment="recorded")
            )
        await asyncio.sleep(0.2)


async def run_scenario(client: Client, scenario: Scenario) -> tuple[RunReport, list[str]]:
    """Run one scenario to its end; returns the report and the run ids of its executions."""
    request = RunRequest(
        runbook="runbook.yaml",
        inventory="inventory.yaml",
        files={"runbook.yaml": textwrap.dedent(scenario.runbook), "inventory.yaml": scenario.inventory()},
        requested_by=REQUESTER,
        check_mode=scenario.check_mode,
        max_launches_per_execution=scenario.max_launches_per_execution,
        hold=scenario.held is not None,
    )
    handle = await client.start_workflow(
        "RunbookWorkflow", request, id=scenario.workflow_id, task_queue=TASK_QUEUE, result_type=RunReport
    )
    done = asyncio.Event()
    voter = asyncio.create_task(approve_open_gates(handle, done))
    holder = asyncio.create_task(answer_hold(handle, scenario, done))
    try:
        report = await asyncio.wait_for(handle.result(), timeout=120)
    finally:
        done.set()
        await voter
        await holder
    if report.status != scenario.expect:
        raise RuntimeError(
            f"scenario {scenario.name!r} ended {report.status!r}, expected {scenario.expect!r}: {report.msg}"
        )
    run_ids: list[str] = []
    async for execution in client.list_workflows(f'WorkflowId = "{scenario.workflow_id}"'):
        run_ids.append(execution.run_id)
    return report, run_ids


async def record_scenario(client: Client, scenario: Scenario, out: Path) -> list[RecordedHistory]:
    _, run_ids = await run_scenario(client, scenario)
    if scenario.max_launches_per_execution < 400 and len(run_ids) < 2:
        raise RuntimeError(f"scenario {scenario.name!r} was meant to continue as new but ran once")
    recorded: list[RecordedHistory] = []

    async def keep(workflow_id: str, run_id: str | None, workflow_type: str, file: str) -> None:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        (out / file).write_text(history.to_json() + "\n")
        recorded.append(
            RecordedHistory(
                file=file,
                workflow_id=workflow_id,
                workflow_type=workflow_type,
                scenario=scenario.name,
                covers=scenario.covers,
            )
        )

    # list_workflows returns the newest execution first.
    for n, run_id in enumerate(reversed(run_ids), start=1):
        last = n == len(run_ids)
        name = f"{scenario.name}.runbook.json" if last else f"{scenario.name}.runbook-{n}.json"
        await keep(scenario.workflow_id, run_id, "RunbookWorkflow", name)
    for child in scenario.children:
        file = f"{scenario.name}.host-{child.replace('/', '-')}.json"
        await keep(f"{scenario.workflow_id}/{child}", None, "HostWorkflow", file)
    return recorded


async def record_all(settings: Settings, out: Path) -> list[RecordedHistory]:
    client = await connect(settings)
    worker = build_worker(
        client,
        TASK_QUEUE,
        workflows=WORKFLOWS,
        activities=[*ACTIVITIES, *testmodules.TEST_ACTIVITIES],
        # The scratch stack's own keys: a signature in the recorded markers proves nothing later.
        keys=WorkerKeys.load(settings.home),
    )
    recorded: list[RecordedHistory] = []
    async with worker:
        for scenario in SCENARIOS:
            entries = await record_scenario(client, scenario, out)
            print(f"recorded {scenario.name}: {', '.join(e.file for e in entries)}", flush=True)
            recorded.extend(entries)
    return recorded


def main() -> int:
    HISTORIES_DIR.mkdir(exist_ok=True)
    for old in HISTORIES_DIR.glob("*.json"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="pitstop-record-") as home:
        config = free_ports_config(Path(home), parts=("temporal",))
        with DevStack(config).running(timeout=60) as stack:
            settings = Settings(temporal_address=stack.temporal_address, home=Path(home))
            recorded = asyncio.run(record_all(settings, HISTORIES_DIR))
    manifest = [entry.model_dump() for entry in recorded]
    (HISTORIES_DIR / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {len(recorded)} histories and {MANIFEST} to {HISTORIES_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
