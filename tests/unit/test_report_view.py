"""A finished fleet-wide run's report: every host that did not end ok is listed, the ok ones
up to a limit per stage with a count of the rest (or all of them when asked)."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from rich.console import Console

from pitstop.contracts import HostResult, RunReport, StageReport, WaveReport
from pitstop.views import report_view

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _host(i: int, status: str) -> HostResult:
    return HostResult(
        host=f"node-{i:05d}",
        stage="maintain",
        status=status,
        msg="boom" if status == "failed" else "",
        started_at=NOW,
        ended_at=NOW,
    )


def _text(report: RunReport, ok_rows: int | None) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(report_view(report, ok_rows=ok_rows))
    return console.export_text()


def test_ok_hosts_are_counted_past_the_limit_and_failures_always_listed() -> None:
    hosts = [_host(i, "failed" if i in (3, 997) else "ok") for i in range(1000)]
    report = RunReport(
        run_id="r1",
        runbook="fleet",
        requested_by="alice",
        check_mode=False,
        status="failed",
        started_at=NOW,
        ended_at=NOW,
        stages=[StageReport(name="maintain", status="failed", hosts=hosts)],
    )
    short = _text(report, ok_rows=20)
    assert "node-00003" in short and "node-00997" in short  # failures, wherever they are
    assert "node-00020" in short and "node-00021" not in short  # 20 ok rows: 0-20 without 3
    assert "… 978 more" in short and "--all-hosts" in short
    full = _text(report, ok_rows=None)
    assert "node-00998" in full and "more" not in full


def test_a_stage_run_in_waves_lists_each_wave_with_its_gate_and_window() -> None:
    waves = [
        WaveReport(wave="zone-a", number=1, hosts=4, started_at=NOW, hosts_ended_at=NOW, observed_until=NOW),
        WaveReport(wave="zone-b", number=2, hosts=3, gate="widen:wave-zone-b", started_at=NOW),
    ]
    report = RunReport(
        run_id="r1",
        runbook="upgrade",
        requested_by="alice",
        check_mode=False,
        status="rolled_back",
        started_at=NOW,
        ended_at=NOW,
        stages=[StageReport(name="widen", status="rolled_back", waves=waves)],
    )
    text = _text(report, ok_rows=20)
    assert "waves" in text
    rows = [line for line in text.splitlines() if "zone-" in line]
    assert "1 zone-a" in rows[0] and "00:00:00" in rows[0] and "widen:wave" not in rows[0]
    assert "2 zone-b" in rows[1] and "widen:wave-zone-b" in rows[1] and rows[1].rstrip("│ ").endswith("-")
