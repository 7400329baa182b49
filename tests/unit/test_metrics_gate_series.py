"""`pitstop_gate_waiting_seconds` has one series per run and gate rule: a per-host gate
(`name@host`) of a 10,000-host stage is one series (its oldest), not one per host."""

from __future__ import annotations

import time

from pitstop.metrics.runs import OpenGate, RunsCollector, Snapshot


def test_per_host_gates_are_one_series_per_rule_with_the_oldest_age() -> None:
    now = time.time()
    collector = RunsCollector()
    collector.snapshot = Snapshot(
        gates=[OpenGate("run-1", f"drain-ok@gpu-node-{i:05d}", now - i) for i in range(10_000)]
        + [OpenGate("run-1", "canary:after", now - 5)],
        ok=True,
    )
    (ages,) = [f for f in collector.collect() if f.name == "pitstop_gate_waiting_seconds"]
    series = {(s.labels["run_id"], s.labels["gate"]): s.value for s in ages.samples}
    assert set(series) == {("run-1", "drain-ok"), ("run-1", "canary:after")}
    assert series[("run-1", "drain-ok")] >= 9_999
    assert 5 <= series[("run-1", "canary:after")] < 9_999
    (waiting,) = [f for f in collector.collect() if f.name == "pitstop_gates_waiting"]
    assert waiting.samples[0].value == 10_001
