"""What `pitstop status --watch` and `pitstop run --wait` show while a run goes: a progress bar
per stage (hosts ended of all), the hosts in flight (named, a few), the wave, and for each open
gate the command that answers it."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from rich.console import Console

from pitstop.approvals import GateRule, GateState
from pitstop.contracts import RunStatus, StageStatus
from pitstop.views import status_view

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _text(status: RunStatus) -> str:
    console = Console(width=220, record=True, file=io.StringIO())
    console.print(status_view(status))
    return console.export_text()


def test_progress_in_flight_wave_and_how_to_decide() -> None:
    fleet = {f"gpu-node-{i:03d}": "ok" for i in range(1, 4)}
    fleet |= {f"gpu-node-{i:03d}": "running" for i in range(4, 11)}
    fleet |= {f"gpu-node-{i:03d}": "pending" for i in range(11, 13)}
    status = RunStatus(
        run_id="maint-1",
        runbook="gpu-node-maintenance",
        requested_by="alice",
        check_mode=False,
        status="running",
        stages=[
            StageStatus(name="canary", status="ok", hosts={"gpu-node-000": "ok"}),
            StageStatus(name="fleet", status="running", hosts=fleet, wave="2/3 zone-b"),
        ],
        gates=[
            GateState(rule=GateRule(gate_id="fleet:wave-zone-c", approvers=["alice", "bob"]), opened_at=NOW),
            GateState(
                rule=GateRule(gate_id="canary:after", approvers=["alice"], require_verified=True),
                status="approved",
                opened_at=NOW,
            ),
        ],
    )
    text = _text(status)
    assert "1/1" in text and "3/12" in text
    # Seven in flight: five named, the rest counted.
    assert "in flight: gpu-node-004, gpu-node-005, gpu-node-006, gpu-node-007, gpu-node-008 +2" in text
    assert "wave 2/3 zone-b" in text
    assert "to decide: pitstop approve maint-1 --gate fleet:wave-zone-c   # alice, bob" in text
    assert "--gate canary:after" not in text  # decided: nothing to do
