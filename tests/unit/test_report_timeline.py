"""The report's pure derivations (pitstop/report: phases, spans, availability, marks, figures)
from a real recorded run: the demo's maintenance runbook on the rehearsal cluster
(tests/fixtures/reports/demo-maintenance.json, see its README), and small made-up runs for
the edges the recording does not have."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pitstop.contracts import HostResult, RunReport, StageReport, TaskOutcome
from pitstop.report.availability import domain_series
from pitstop.report.data import ReportData, derive
from pitstop.report.layout import RunLayout, StageLayout
from pitstop.report.phases import PHASES, phase_of
from pitstop.report.source import RunSource
from pitstop.report.timeline import node_rows, phase_spans, stage_bands

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "demo-maintenance.json"
DEGRADED = "gpu-node-008"
CANARY = "gpu-node-001"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def source() -> RunSource:
    return RunSource.model_validate_json(FIXTURE.read_text())


@pytest.fixture(scope="module")
def data(source: RunSource) -> ReportData:
    return derive(source.report, source.layout)


def _phases(data: ReportData, host: str) -> list[str]:
    """The node's phases in order, each once per run of spans (ok/changed splits merged)."""
    row = next(r for r in data.rows if r.host == host)
    out: list[str] = []
    for span in row.phases:
        if not out or out[-1] != span.phase:
            out.append(span.phase)
    return out


def test_modules_map_to_phases_through_one_table() -> None:
    assert [phase_of(m) for m in ("kube.cordon", "kube.drain", "ssh.firmware_update", "ssh.reboot")] == [
        "cordon",
        "drain",
        "update",
        "reboot",
    ]
    assert [phase_of(m) for m in ("gpu.dcgm_diag", "gpu.nccl_test", "baseline.compare", "kube.uncordon")] == [
        "validate",
        "validate",
        "validate",
        "uncordon",
    ]
    # A family's other modules by prefix; anything else is "other".
    assert phase_of("ssh.command") == "update" and phase_of("gpu.some_new_flash") == "update"
    assert phase_of("acceptance.check") == "validate"
    assert phase_of("debug") == phase_of("kube.annotate") == phase_of(None) == "other"
    assert set(PHASES) >= {"cordon", "drain", "update", "reboot", "validate", "uncordon", "other"}


def test_a_maintained_node_goes_through_every_phase_in_order(data: ReportData) -> None:
    maintained = ["other", "cordon", "drain", "update", "reboot", "validate", "uncordon"]
    # The canary then records its figures as the next run's baseline (baseline.record: other).
    assert _phases(data, CANARY) == [*maintained, "other"]
    for host in ("gpu-node-002", "gpu-node-012", CANARY):
        # Pre-checks (capacity, facts before) come first, as `other`.
        assert _phases(data, host)[:7] == maintained
        row = next(r for r in data.rows if r.host == host)
        assert row.status == "ok" and row.reason == ""
        assert all(s.outcome in ("ok", "changed") for s in row.phases)
        assert row.out_from is not None and row.out_until is not None and row.out_from < row.out_until


def test_the_degraded_node_is_red_with_the_reason_of_the_check_that_failed(data: ReportData) -> None:
    row = next(r for r in data.rows if r.host == DEGRADED)
    assert row.status == "failed"
    assert row.reason.startswith("NCCL all_reduce bandwidth"), row.reason
    assert "118 GB/s" in row.reason and "baseline 392" in row.reason
    # The validation that failed is the red span; DCGM before it passed (green), and the
    # rescue after it (annotate, fail) is `other`, not a return to service.
    validate = [s for s in row.phases if s.phase == "validate"]
    assert [s.outcome for s in validate] == ["ok", "failed"]
    assert validate[-1].tasks == ["NCCL all_reduce bandwidth (minimum and baseline)"]
    after = row.phases[row.phases.index(validate[-1]) + 1 :]
    assert after and {s.phase for s in after} == {"other"}
    assert "uncordon" not in _phases(data, DEGRADED)
    # Never given back: out of service to the end of the run.
    assert row.out_from is not None and row.out_until is None
    assert [r.host for r in data.failed_rows] == [DEGRADED]


def test_canary_then_gate_then_the_fleet_in_three_waves(data: ReportData) -> None:
    assert [b.name for b in data.stages] == ["canary", "fleet"]
    canary, fleet = data.stages
    [gate] = data.gates
    assert gate.gate == "canary:after" and gate.status == "approved"
    assert [(v.approver, v.approve) for v in gate.votes] == [("alice", True)]
    assert gate.closed_at is not None
    assert canary.end <= gate.opened_at <= gate.closed_at <= fleet.start
    assert [(w.number, w.wave) for w in data.waves] == [(1, "zone-a"), (2, "zone-b"), (3, "zone-c")]
    assert data.waves[0].started_at is not None and gate.closed_at <= data.waves[0].started_at
    # Each fleet node started in its own wave's time (and its row says which wave it is in).
    for row in data.rows:
        if row.stage != "fleet":
            continue
        wave = next(w for w in data.waves if w.wave == row.wave)
        assert wave.started_at is not None and wave.hosts_ended_at is not None
        assert wave.started_at <= row.start <= row.end <= wave.hosts_ended_at
    assert next(r for r in data.rows if r.host == CANARY).stage == "canary"


def test_failure_domains_stay_within_their_limit_and_the_degraded_node_keeps_counting(
    data: ReportData,
) -> None:
    by_domain = {s.domain: s for s in data.availability}
    assert set(by_domain) == {"zone-a", "zone-b", "zone-c"}
    for series in by_domain.values():
        assert [(lim.stage, lim.limit) for lim in series.limits] == [("fleet", 2)]
        assert 1 <= series.peak <= 2 and not series.over_limit
        assert series.points[-1].out == (1 if series.domain == "zone-b" else 0)
    # The canary (zone-a) is out before the fleet stage starts.
    first = by_domain["zone-a"].points[0]
    assert first.out == 1 and first.at < data.stages[1].start
    assert (
        DEGRADED not in {h for s in by_domain.values() for h in s.peak_hosts} or by_domain["zone-b"].peak <= 2
    )


def test_a_domain_over_its_limit_is_said_so() -> None:
    hosts = [_host(f"n{i}", T0 + timedelta(seconds=i), T0 + timedelta(seconds=10 + i)) for i in range(3)]
    report = _report([StageReport(name="s", status="ok", hosts=hosts)])
    layout = RunLayout(
        stages=[StageLayout(name="s", domains={h.host: "d" for h in hosts}, max_unavailable_per_domain=2)]
    )
    rows = node_rows(report, layout)
    [series] = domain_series(rows, stage_bands(report), layout)
    assert series.peak == 3 and series.peak_hosts == ["n0", "n1", "n2"]
    assert series.over_limit
    assert [p.out for p in series.points] == [1, 2, 3, 2, 1, 0]


def test_validation_figures_against_the_baseline(data: ReportData) -> None:
    assert {f.host for f in data.figures} == {r.host for r in data.rows}
    assert {f.metric for f in data.figures} == {"nccl_busbw_gbps"}
    bad = [f for f in data.figures if not f.ok]
    assert [f.host for f in bad] == [DEGRADED]
    [f] = bad
    assert (f.value, f.baseline, f.allowed_pct, f.unit) == (118.0, 392.0, 10.0, "GB/s")
    assert f.floor == pytest.approx(352.8)
    assert all(g.value >= (g.floor or 0) for g in data.figures if g.ok)


def test_a_figure_without_a_baseline_is_still_drawn() -> None:
    task = _task(
        "gpu.nccl_test", T0, T0 + timedelta(seconds=1), data={"avg_busbw_gbps": 390.5, "baseline": None}
    )
    report = _report([StageReport(name="s", status="ok", hosts=[_host("n0", T0, T0, tasks=[task])])])
    [figure] = derive(report, RunLayout()).figures
    assert (figure.value, figure.baseline, figure.floor, figure.ok) == (390.5, None, None, True)


def test_a_host_in_flight_is_one_grey_span() -> None:
    running = HostResult(
        host="n0", stage="s", status="running", started_at=T0, ended_at=T0 + timedelta(seconds=5)
    )
    report = _report([StageReport(name="s", status="running", hosts=[running])])
    data = derive(report, RunLayout(), finished=False)
    [row] = data.rows
    assert [(s.phase, s.outcome) for s in row.phases] == [("other", "running")]
    assert row.reason == "" and not data.finished


def test_a_stage_on_localhost_is_a_stage_band_and_no_node_row() -> None:
    # A runbook's last stage writes the run's report on the worker (`hosts: localhost`) while
    # the run goes on: it is no node of the fleet, so it neither draws a row nor counts as one.
    node = _host("n0", T0, T0 + timedelta(seconds=5), tasks=[_task("kube.cordon", T0, T0)])
    worker = HostResult(
        host="localhost",
        stage="report",
        status="running",
        started_at=T0 + timedelta(seconds=6),
        ended_at=T0 + timedelta(seconds=7),
    )
    report = _report(
        [
            StageReport(name="s", status="ok", hosts=[node]),
            StageReport(name="report", status="running", hosts=[worker]),
        ]
    )
    data = derive(report, RunLayout(), finished=False)
    assert [r.host for r in data.rows] == ["n0"]
    assert [b.name for b in data.stages] == ["s", "report"]
    assert [s.domain for s in data.availability] == ["(no domain)"]


def test_skipped_tasks_draw_nothing_and_a_runbook_without_cordon_keeps_its_phases() -> None:
    tasks = [
        _task("ssh.firmware_update", T0, T0 + timedelta(seconds=2)),
        _task("kube.uncordon", T0 + timedelta(seconds=2), T0 + timedelta(seconds=2), status="skipped"),
        _task("gpu.dcgm_diag", T0 + timedelta(seconds=2), T0 + timedelta(seconds=3)),
    ]
    assert [s.phase for s in phase_spans(tasks)] == ["update", "validate"]


def _task(
    module: str, start: datetime, end: datetime, status: str = "ok", data: dict[str, object] | None = None
) -> TaskOutcome:
    return TaskOutcome.model_validate(
        {
            "task_id": module,
            "name": module,
            "module": module,
            "status": status,
            "started_at": start,
            "ended_at": end,
            "data": data or {},
        }
    )


def _host(name: str, start: datetime, end: datetime, tasks: list[TaskOutcome] | None = None) -> HostResult:
    if tasks is None:
        tasks = [_task("kube.cordon", start, start), _task("kube.uncordon", end, end)]
    return HostResult(host=name, stage="s", status="ok", tasks=tasks, started_at=start, ended_at=end)


def _report(stages: list[StageReport]) -> RunReport:
    return RunReport(
        run_id="r",
        runbook="rb",
        requested_by="me",
        check_mode=False,
        status="succeeded",
        started_at=T0,
        ended_at=T0 + timedelta(minutes=1),
        stages=stages,
    )
