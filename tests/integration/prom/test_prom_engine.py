"""prom.* in a run: a stage's observe window judged by the real Prometheus's alerts on the
stage's nodes fails (and rolls the stage back) naming the alert and the node; the same window on
a quiet node passes; prom.query in an `until` loop waits for a series to meet its threshold."""

from __future__ import annotations

from tests.integration.engine.conftest import RunFn, engine_worker, run, start_run
from tests.integration.prom.conftest import Lab

__all__ = ["engine_worker", "run", "start_run"]

RUNBOOK = """
name: observe-by-alerts
vars:
  prom_url: "{prom}"
stages:
  - name: fleet
    hosts: "{hosts}"
    serial: 1
    tasks:
      - debug: {{msg: "maintained {{{{ inventory_hostname }}}}"}}
    rollback:
      - debug: {{msg: "roll back {{{{ inventory_hostname }}}}"}}
    observe:
      duration: 2s
      interval: 1s
      checks:
        - name: No alert fires on the nodes just maintained
          prom.alerts:
            url: "{{{{ prom_url }}}}"
            match_re: {{node: "{{{{ stage.done_hosts | map('regex_escape') | join('|') }}}}"}}
        - name: The hottest GPU of those nodes stays below 95 C
          prom.query:
            url: "{{{{ prom_url }}}}"
            query: max(lab_gpu_temp_celsius)
            max: 95
"""
INVENTORY = """
all:
  children:
    gpu:
      hosts:
        gpu-node-001: {}
        gpu-node-002: {}
"""


async def test_an_observe_window_fails_on_a_firing_alert_naming_it_and_the_node(lab: Lab, run: RunFn) -> None:
    report = await run(RUNBOOK.format(prom=lab.prometheus, hosts="gpu"), INVENTORY)
    assert report.status in ("rolled_back", "failed"), report.msg
    stage = report.stages[0]
    assert stage.status == "rolled_back"
    assert stage.rollback_reason is not None
    assert "LabGpuXid{" in stage.rollback_reason and 'node="gpu-node-002"' in stage.rollback_reason
    assert " firing since " in stage.rollback_reason


async def test_the_same_window_on_a_quiet_node_passes(lab: Lab, run: RunFn) -> None:
    report = await run(RUNBOOK.format(prom=lab.prometheus, hosts="gpu-node-001"), INVENTORY)
    assert report.status == "succeeded", report.msg
    assert report.stages[0].status == "ok" and report.stages[0].observations


async def test_prom_query_in_an_until_loop(lab: Lab, run: RunFn) -> None:
    runbook = f"""
    name: wait-for-metrics
    hosts: localhost
    tasks:
      - name: Wait until both GPUs report a temperature
        prom.query: {{url: "{lab.prometheus}", query: "count(lab_gpu_temp_celsius)", min: 2}}
        register: seen
        until: seen.ok
        retries: 5
        delay: 1
      - assert: {{that: ["seen.count == 1", "seen.series[0].value == 2"]}}
    """
    report = await run(runbook, None)
    assert report.status == "succeeded", report.msg
