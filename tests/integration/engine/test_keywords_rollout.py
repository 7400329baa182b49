"""Stage keywords that decide which hosts run when: `serial`, `max_fail_percentage`,
`any_errors_fatal`, `rolling` (window, failure domains, order), and continuing as new.

Concurrency is measured from the start and end of every `test.step` call (the worker's
monotonic clock), never from how long the run took.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from pitstop.contracts import RunReport
from tests.integration.engine.conftest import RunFn, StartFn, hosts_inventory
from tests.testmodules import CALLS, RECORDS, CallRecord
from workflows import run_hosts


def max_overlap(records: Iterable[CallRecord]) -> int:
    """Most calls running at the same moment."""
    calls = list(records)
    # At equal times an end sorts before a start: touching intervals do not overlap.
    edges = sorted([(r.started, 1) for r in calls] + [(r.ended, -1) for r in calls])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


async def launched_before_handing_over(client: Client, handle: WorkflowHandle[Any, RunReport]) -> int:
    """Children the run's first execution started before it continued as new; a later
    execution took the remaining hosts and completed the run."""
    first = client.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id)
    assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
    latest = await client.get_workflow_handle(handle.id).describe()
    assert latest.run_id != handle.first_execution_run_id
    assert latest.status == WorkflowExecutionStatus.COMPLETED
    return len(
        [
            e
            async for e in first.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
        ]
    )


def stage_records(stage: str) -> list[CallRecord]:
    return [r for r in RECORDS if r.task.startswith(f"{stage}/")]


async def test_serial_ramp_runs_batches_of_1_3_2_and_each_batch_ends_before_the_next_starts(
    run: RunFn,
) -> None:
    report = await run(
        """
        name: ramp
        hosts: gpu
        serial: [1, "50%"]
        tasks:
          - name: step
            test.step: {value: "{{ inventory_hostname }}", sleep: 0.5}
        """,
        hosts_inventory(6),
    )
    assert report.status == "succeeded", report.msg
    by_host = {r.host: r for r in RECORDS}
    assert sorted(by_host) == [f"h{i:02d}" for i in range(6)]
    batches = [["h00"], ["h01", "h02", "h03"], ["h04", "h05"]]
    for earlier, later in itertools.pairwise(batches):
        # The barrier: every host of the next batch starts after every host of this one ended.
        assert min(by_host[h].started for h in later) > max(by_host[h].ended for h in earlier)
    for batch in batches[1:]:
        # A batch is one batch: its hosts run at the same time.
        assert max(by_host[h].started for h in batch) < min(by_host[h].ended for h in batch)
    # The host workflows tell the same story in the report.
    hosts = {h.host: h for h in report.stages[0].hosts}
    assert min(hosts[h].started_at for h in batches[2]) >= max(hosts[h].ended_at for h in batches[1])


async def test_serial_failure_budget_is_cumulative_and_stops_before_the_next_batch(run: RunFn) -> None:
    # Batch 1 (h00, h01): one failure is 50% of the batch but 1 of 6 of the stage: go on.
    # Batch 2 (h02, h03): a second failure makes 2 of 6 > 20%: batch 3 never starts.
    report = await run(
        """
        name: budget
        hosts: gpu
        serial: 2
        max_fail_percentage: 20
        tasks:
          - name: step
            test.step: {value: x, fail_hosts: [h00, h03]}
        """,
        hosts_inventory(6),
    )
    assert sorted(h for h, _, _ in CALLS) == ["h00", "h01", "h02", "h03"]
    assert report.status == "rolled_back"
    assert report.rollback_reason is not None
    assert "failure budget exceeded in stage 'budget': 2 of 6 hosts failed (max_fail_percentage 20)" in (
        report.rollback_reason
    )
    assert report.rollback_reason in report.msg
    stage = report.stages[0]
    assert {h.host: h.status for h in stage.hosts} == {
        "h00": "failed",
        "h01": "ok",
        "h02": "ok",
        "h03": "failed",
    }


async def test_any_errors_fatal_starts_no_host_after_the_first_failure(run: RunFn) -> None:
    report = await run(
        """
        name: fatal
        hosts: gpu
        rolling: {max_in_flight: 1}
        any_errors_fatal: true
        tasks:
          - name: step
            test.step: {value: x, fail_hosts: [h01]}
        """,
        hosts_inventory(4),
    )
    assert [h for h, _, _ in CALLS] == ["h00", "h01"]
    assert report.status == "rolled_back"
    assert report.rollback_reason == "any_errors_fatal: h01 failed in stage 'fatal'"


ROLLING_INVENTORY = """
all:
  children:
    gpu:
      hosts:
        h00: {failure_domain: d0, rack: r0}
        h01: {failure_domain: d1, rack: r0}
        h02: {failure_domain: d2, rack: r1}
        h03: {failure_domain: d0, rack: r1}
        h04: {failure_domain: d1, rack: r2}
        h05: {failure_domain: d2, rack: r2}
"""


async def test_rolling_windows_respect_max_in_flight_domains_and_round_robin_order(run: RunFn) -> None:
    report = await run(
        """
        name: rolling
        stages:
          - name: window
            hosts: gpu
            rolling: {max_in_flight: 2, max_unavailable_per_domain: 1}
            tasks:
              - test.step: {value: "{{ inventory_hostname }}", sleep: 0.3}
          - name: racks
            hosts: gpu
            # Every host may start (window 6), but only one per rack, the domain given
            # by the expression (failure_domain alone would allow two per rack).
            rolling: {max_in_flight: 6, max_unavailable_per_domain: 1, domain: "{{ rack }}"}
            tasks:
              - test.step: {value: "{{ inventory_hostname }}", sleep: 0.3}
          - name: interleaved
            hosts: gpu
            rolling: {max_in_flight: 1, domain: "{{ rack }}", order: domain_round_robin}
            tasks:
              - test.step: {value: "{{ inventory_hostname }}"}
        """,
        ROLLING_INVENTORY,
    )
    assert report.status == "succeeded", report.msg
    domain = {"h00": "d0", "h01": "d1", "h02": "d2", "h03": "d0", "h04": "d1", "h05": "d2"}
    rack = {"h00": "r0", "h01": "r0", "h02": "r1", "h03": "r1", "h04": "r2", "h05": "r2"}

    window = stage_records("window")
    assert len(window) == 6
    assert max_overlap(window) <= 2
    for d in set(domain.values()):
        assert max_overlap(r for r in window if domain[r.host] == d) <= 1

    racks = stage_records("racks")
    assert len(racks) == 6
    for r in set(rack.values()):
        assert max_overlap(c for c in racks if rack[c.host] == r) == 1
    # The rack limit, not the window, held hosts back: more than one rack ran at once.
    assert max_overlap(racks) >= 2

    interleaved = sorted(stage_records("interleaved"), key=lambda c: c.started)
    assert [c.host for c in interleaved] == ["h00", "h02", "h04", "h01", "h03", "h05"]


async def test_a_failed_host_holds_its_domain_and_the_stage_stops_with_the_reason(run: RunFn) -> None:
    # h00 fails and stays unavailable (left cordoned): h02, in the same domain, can never
    # start. The stage ends, saying why, instead of waiting forever.
    report = await run(
        """
        name: domains
        hosts: gpu
        rolling: {max_in_flight: 2, max_unavailable_per_domain: 1}
        tasks:
          - test.step: {value: x, fail_hosts: [h00]}
        """,
        hosts_inventory(4, domains=2),
    )
    assert sorted(h for h, _, _ in CALLS) == ["h00", "h01", "h03"]
    assert report.status == "failed"
    assert report.msg == (
        "stage 'domains' stopped: every pending host's failure domain is at "
        "max_unavailable_per_domain 1 (d0: 1 unavailable)"
    )
    stage = report.stages[0]
    assert stage.status == "failed"


async def test_a_host_that_failed_takes_no_part_in_later_stages(run: RunFn) -> None:
    report = await run(
        """
        name: two
        stages:
          - name: one
            hosts: gpu
            tasks:
              - test.step: {value: one, fail_hosts: [h01]}
          - name: two
            hosts: gpu
            tasks:
              - test.step: {value: two}
        """,
        hosts_inventory(2),
    )
    assert report.status == "completed_with_failures"
    assert sorted((h, a["value"]) for h, _, a in CALLS) == [("h00", "one"), ("h00", "two"), ("h01", "one")]
    later = {h.host: h for h in report.stages[1].hosts}
    assert later["h01"].status == "skipped"
    assert later["h01"].msg == "not run: failed in stage 'one'"


async def test_run_continues_as_new_and_every_host_runs_exactly_once(
    start_run: StartFn, temporal_client: Client
) -> None:
    handle = await start_run(
        """
        name: long
        hosts: gpu
        tasks:
          - name: step
            test.step: {value: "{{ inventory_hostname }}"}
        """,
        hosts_inventory(8),
        max_launches_per_execution=3,
    )
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert sorted(h for h, _, _ in CALLS) == [f"h{i:02d}" for i in range(8)]
    assert sorted(h.host for h in report.stages[0].hosts) == [f"h{i:02d}" for i in range(8)]

    assert await launched_before_handing_over(temporal_client, handle) == 3


async def test_a_history_past_its_budget_continues_as_new_and_every_host_runs_exactly_once(
    start_run: StartFn, temporal_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The budget in events, not in launches: a server that never suggests continuing as new
    # (the dev server's thresholds are far away) must still see this execution hand over.
    monkeypatch.setattr(run_hosts, "HISTORY_EVENTS_BUDGET", 40)
    handle = await start_run(
        """
        name: long
        hosts: gpu
        serial: 1
        tasks:
          - name: step
            test.step: {value: "{{ inventory_hostname }}"}
        """,
        hosts_inventory(8),
    )
    report = await handle.result()
    assert report.status == "succeeded", report.msg
    assert sorted(h for h, _, _ in CALLS) == [f"h{i:02d}" for i in range(8)]

    # Not every host fitted, though launches were allowed (2000 per execution by default).
    assert 1 <= await launched_before_handing_over(temporal_client, handle) < 8
