"""`waves`: a stage's hosts one wave (failure domain) at a time, each wave with its own gate and
observe window; canary coverage refused at plan time (no canary) and before the first wave (no
canary that passed); a failing wave window or a rejected wave gate rolls the stage back and no
later wave starts.

Whether two waves ever changed at once is measured from the start and end of every `test.step`
call (the worker's monotonic clock), never from how long the run took.
"""

from __future__ import annotations

from collections.abc import Callable

from pitstop.approvals import Decision
from pitstop.contracts import RunStatus, VoteRecord
from tests.integration.engine.conftest import RunFn, StartFn, status_when
from tests.testmodules import CALLS, RECORDS, CallRecord

INVENTORY = """
all:
  children:
    gpu:
      hosts:
        h00: {failure_domain: d0, product: H100}
        h01: {failure_domain: d1, product: H100}
        h02: {failure_domain: d2, product: A100}
        h03: {failure_domain: d0, product: H100}
        h04: {failure_domain: d1, product: H100}
        h05: {failure_domain: d2, product: A100}
    canary:
      hosts:
        c00: {failure_domain: d0, product: H100}
        c01: {failure_domain: d2, product: A100}
"""

WAVES = """
name: waves
approvers:
  sre: [alice]
stages:
  - name: canary
    hosts: canary
    tasks:
      - name: step
        test.step: {value: "{{ inventory_hostname }}", fail_hosts: {{ failing_canaries }}}
  - name: widen
    hosts: gpu
    rolling: {max_in_flight: 4}
    waves:
      by: "{{ failure_domain }}"
      order: [d2]
      gate: {approvers: sre, prompt: "Next failure domain?"}
      observe:
        duration: 0.2
        interval: 0.1
        checks:
          - name: look
            test.step: {value: "wave {{ stage.wave.number }}/{{ stage.wave.count }} {{ stage.wave.name }}"}
      canary: {stage: canary, cover: "{{ product }}"}
    tasks:
      - name: step
        test.step: {value: "{{ inventory_hostname }}", sleep: 0.1}
    rollback:
      - name: undo
        test.step: {value: "undo {{ inventory_hostname }}"}
"""


def waves(failing_canaries: str = "[]", **replace: str) -> str:
    text = WAVES.replace("{{ failing_canaries }}", failing_canaries)
    for old, new in replace.items():
        text = text.replace(old, new)
    return text


def widen_calls() -> list[CallRecord]:
    return [r for r in RECORDS if r.task.startswith("widen/")]


def gate_open(gate_id: str) -> Callable[[RunStatus], bool]:
    return lambda s: any(g.rule.gate_id == gate_id and g.status == "open" for g in s.gates)


async def test_one_failure_domain_at_a_time_each_with_its_gate_and_window(start_run: StartFn) -> None:
    handle = await start_run(waves(), INVENTORY)
    for gate_id, label in (("widen:wave-d0", "2/3 d0"), ("widen:wave-d1", "3/3 d1")):
        status = await status_when(handle, gate_open(gate_id))
        widen = next(s for s in status.stages if s.name == "widen")
        assert (widen.status, widen.wave) == ("waiting_gate", label)
        prompt = next(g for g in status.gates if g.rule.gate_id == gate_id).rule.prompt
        assert prompt.startswith("Next failure domain?\nNext: wave ") and "(2 hosts)" in prompt
        vote = await handle.execute_update(
            "decide", Decision(gate=gate_id, approver="alice", approve=True), result_type=VoteRecord
        )
        assert vote.accepted
    report = await handle.result()
    assert report.status == "succeeded", report.msg

    domain = {f"h0{i}": f"d{i % 3}" for i in range(6)}
    hosts = [r for r in RECORDS if r.task == "widen/0"]
    spans = {
        d: (
            min(r.started for r in hosts if domain[r.host] == d),
            max(r.ended for r in hosts if domain[r.host] == d),
        )
        for d in ("d0", "d1", "d2")
    }
    # d2 first (waves.order), then the others in inventory order; never two domains at once.
    assert spans["d2"][1] < spans["d0"][0] and spans["d0"][1] < spans["d1"][0]
    # Within a wave the window still runs its hosts together (max_in_flight 4): the run started
    # both of d2's hosts before either ended (its own decisions, whatever the machine's load).
    events = [e async for e in handle.fetch_history_events()]
    d2_ids = {f"{handle.id}/widen/{h}" for h in ("h02", "h05")}
    started = [
        i
        for i, e in enumerate(events)
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
        and e.start_child_workflow_execution_initiated_event_attributes.workflow_id in d2_ids
    ]
    ended = [
        i
        for i, e in enumerate(events)
        if e.HasField("child_workflow_execution_completed_event_attributes")
        and e.child_workflow_execution_completed_event_attributes.workflow_execution.workflow_id in d2_ids
    ]
    assert len(started) == len(ended) == 2 and max(started) < min(ended), (started, ended)

    # Each wave was watched after its hosts and before the next wave's gate and hosts.
    looks = [r for r in RECORDS if r.task.startswith("widen/wave/observe/")]
    said = [r.args["value"] for r in looks]
    assert said == ["wave 1/3 d2"] * 2 + ["wave 2/3 d0"] * 2 + ["wave 3/3 d1"] * 2
    for wave, next_wave in (("d2", "d0"), ("d0", "d1")):
        watched = [r for r in looks if r.args["value"].endswith(wave)]
        assert min(r.started for r in watched) > spans[wave][1]
        assert max(r.ended for r in watched) < spans[next_wave][0]

    stage = next(s for s in report.stages if s.name == "widen")
    assert [(w.wave, w.number, w.hosts, w.gate) for w in stage.waves] == [
        ("d2", 1, 2, None),
        ("d0", 2, 2, "widen:wave-d0"),
        ("d1", 3, 2, "widen:wave-d1"),
    ]
    assert all(w.observed_until is not None and w.started_at is not None for w in stage.waves)
    assert len(stage.observations) == 6
    assert {g.rule.gate_id: g.status for g in report.gates} == {
        "widen:wave-d0": "approved",
        "widen:wave-d1": "approved",
    }


async def test_a_product_without_a_canary_is_refused_when_the_run_is_planned(run: RunFn) -> None:
    inventory = INVENTORY.replace(
        "c01: {failure_domain: d2, product: A100}", "c01: {failure_domain: d2, product: H100}"
    )
    report = await run(waves(), inventory)
    assert report.status == "failed"
    assert (
        "stage 'widen' would change hosts that no canary in stage 'canary' stands for "
        "(waves.canary.cover): {{ product }} = 'A100' on 2 hosts (h02, h05) (the canaries give 'H100')"
    ) in report.msg
    assert CALLS == []


async def test_a_product_whose_canary_failed_stops_the_stage_before_any_host(run: RunFn) -> None:
    report = await run(waves(failing_canaries="[c01]"), INVENTORY)
    assert report.status == "failed"
    assert report.msg == (
        "stage 'widen' did not start: no canary in stage 'canary' passed for {{ product }} = 'A100' "
        "(2 hosts, e.g. h02): its canaries (c01) did not pass"
    )
    assert widen_calls() == []
    widen = next(s for s in report.stages if s.name == "widen")
    assert widen.status == "failed" and widen.hosts == []


async def test_a_failing_wave_window_rolls_the_stage_back_and_no_later_wave_starts(run: RunFn) -> None:
    failing = waves().replace(
        'test.step: {value: "wave {{ stage.wave.number }}',
        'test.step: {fail_hosts: [localhost], value: "wave {{ stage.wave.number }}',
    )
    report = await run(failing, INVENTORY)
    assert report.status == "rolled_back"
    assert report.rollback_reason is not None
    assert report.rollback_reason.startswith("observe check failed in stage 'widen', wave 'd2': look:")
    started = {r.host for r in RECORDS if r.task == "widen/0"}
    assert started == {"h02", "h05"}
    undone = {r.host for r in RECORDS if r.task == "widen/rollback/0"}
    assert undone == {"h02", "h05"}
    assert [w.wave for w in next(s for s in report.stages if s.name == "widen").waves] == ["d2"]


async def test_a_rejected_wave_gate_rolls_the_waves_done_back(start_run: StartFn) -> None:
    handle = await start_run(waves(), INVENTORY)
    await status_when(handle, gate_open("widen:wave-d0"))
    await handle.execute_update(
        "decide", Decision(gate="widen:wave-d0", approver="alice", approve=False, comment="NCCL dipped in d2")
    )
    report = await handle.result()
    assert report.status == "rolled_back"
    assert report.rollback_reason is not None and report.rollback_reason.startswith("gate widen:wave-d0 ")
    assert {r.host for r in RECORDS if r.task == "widen/0"} == {"h02", "h05"}
    assert {r.host for r in RECORDS if r.task == "widen/rollback/0"} == {"h02", "h05"}


async def test_a_wave_where_every_host_failed_stops_the_run_before_the_next_wave(start_run: StartFn) -> None:
    failing = waves().replace(
        'test.step: {value: "{{ inventory_hostname }}", sleep: 0.1}',
        'test.step: {value: "{{ inventory_hostname }}", fail_hosts: [h00, h03]}',
    )
    handle = await start_run(failing, INVENTORY)
    await status_when(handle, gate_open("widen:wave-d0"))
    await handle.execute_update("decide", Decision(gate="widen:wave-d0", approver="alice", approve=True))
    report = await handle.result()
    # The first wave (d2) went through; the second (d0) lost every host: no third wave.
    assert report.status == "failed"
    assert report.msg.startswith("every host of wave 'd0' of stage 'widen' failed (h0"), report.msg
    assert {r.host for r in RECORDS if r.task == "widen/0"} == {"h02", "h05", "h00", "h03"}
    assert [g.rule.gate_id for g in report.gates] == ["widen:wave-d0"]


async def test_canaries_whose_tasks_tags_left_out_do_not_stand_for_anything(run: RunFn) -> None:
    tagged = waves().replace(
        '        test.step: {value: "{{ inventory_hostname }}", sleep: 0.1}\n',
        '        test.step: {value: "{{ inventory_hostname }}", sleep: 0.1}\n        tags: [upgrade]\n',
    )
    report = await run(tagged, INVENTORY, tags=["upgrade"])
    assert report.status == "failed"
    assert report.msg.startswith("stage 'widen' did not start: no canary in stage 'canary' passed for"), (
        report.msg
    )
    assert [r for r in RECORDS if r.task.startswith(("canary/", "widen/"))] == []


async def test_a_stage_its_canaries_do_not_stand_for_asks_no_approver(run: RunFn) -> None:
    gated = waves(failing_canaries="[c01]").replace(
        "    rolling: {max_in_flight: 4}\n",
        "    rolling: {max_in_flight: 4}\n    gate: {before: true, approvers: sre}\n",
    )
    report = await run(gated, INVENTORY)
    assert report.status == "failed" and report.msg.startswith("stage 'widen' did not start"), report.msg
    assert report.gates == []  # widen:before never opened
    assert widen_calls() == []


async def test_a_failing_wave_check_stops_the_run_before_that_wave_changes_anything(
    start_run: StartFn,
) -> None:
    # The wave's checks run once it may start (after its gate): they see the wave's own hosts.
    checked = waves().replace(
        "      canary: {stage: canary",
        "      checks:\n"
        "        - name: spread\n"
        "          test.step: {value: \"{{ stage.wave.name }}: {{ stage.wave_hosts | join(',') }}\"}\n"
        "          failed_when: \"stage.wave.name == 'd0'\"\n"
        "      canary: {stage: canary",
    )
    handle = await start_run(checked, INVENTORY)
    await status_when(handle, gate_open("widen:wave-d0"))
    await handle.execute_update("decide", Decision(gate="widen:wave-d0", approver="alice", approve=True))
    report = await handle.result()
    assert report.status == "failed"
    assert report.msg.startswith("wave 'd0' of stage 'widen' did not start: spread: "), report.msg
    checks = [r.args["value"] for r in RECORDS if r.task.startswith("widen/wave/checks/")]
    assert checks == ["d2: h02,h05", "d0: h00,h03"]
    # d2 went through; nothing of d0 (or d1, after it) ran, and nothing was rolled back.
    assert {r.host for r in RECORDS if r.task == "widen/0"} == {"h02", "h05"}
    assert not [r for r in RECORDS if r.task == "widen/rollback/0"]
    widen = next(s for s in report.stages if s.name == "widen")
    assert [w.wave for w in widen.waves] == ["d2", "d0"]
    assert widen.waves[0].checks is not None and widen.waves[0].checks.startswith("spread: ")
    assert widen.waves[1].checks == "failed_when condition met: stage.wave.name == 'd0' (step d0: h00,h03)"
    assert {h.host for h in widen.hosts} == {"h02", "h05"}
    status = await handle.query("status", result_type=RunStatus)
    hosts = next(s for s in status.stages if s.name == "widen").hosts
    assert {h for h, state in hosts.items() if state == "skipped"} == {"h00", "h03", "h01", "h04"}
