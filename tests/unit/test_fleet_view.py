"""The fleet view's sections and files (pitstop/fleet/tables.py, render.py) from a FleetStatus,
what it takes from a RunReport (pitstop/fleet/extract.py), and the shipped fleet-inventory
runbook and its schedule."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from pitstop.cli.app import build_app
from pitstop.contracts import HostResult, RunReport, StageReport, TaskOutcome
from pitstop.fleet import render
from pitstop.fleet.extract import DRILL_MODULE, INVENTORY_MODULE, drill_of, inventory_of, last_task
from pitstop.fleet.models import (
    Backup,
    ClusterInventory,
    ClusterStatus,
    ComponentVersion,
    Drill,
    FleetStatus,
    RunInFlight,
)
from pitstop.fleet.skew import fleet_skew
from pitstop.schedules import load_schedules

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _inventory(run: str, kubernetes: str) -> ClusterInventory:
    return ClusterInventory(
        run_id=run,
        runbook="fleet-inventory",
        taken_at=NOW - timedelta(hours=2),
        components=[
            ComponentVersion(
                component="kubernetes", row="Kubernetes and containerd/CRI-O", current=kubernetes
            ),
            ComponentVersion(component="gpu-driver", row="GPU driver and CUDA level", current="550.90.07"),
        ],
    )


def _fleet() -> FleetStatus:
    lab = ClusterStatus(
        name="lab",
        inventory=_inventory("inv-lab", "v1.31.2"),
        backup=Backup(
            run_id="bk-1", ended_at=NOW - timedelta(minutes=30), uri="s3://b/etcd-backups/lab/x.db"
        ),
        drill=Drill(run_id="dr-1", ended_at=NOW - timedelta(days=2), passed=True, rto_s=2.04, rpo_s=14.0),
        in_flight=[
            RunInFlight(run_id="run-9", runbook="platform-upgrade", stage="workers", status="waiting_gate")
        ],
    )
    prod = ClusterStatus(name="prod", inventory=_inventory("inv-prod", "v1.30.6"))
    empty = ClusterStatus(name="new")
    inventories = {c.name: c.inventory for c in (lab, prod) if c.inventory is not None}
    return FleetStatus(
        generated_at=NOW, clusters=[lab, prod, empty], skew=fleet_skew(inventories), discovery="named"
    )


def _text(fleet: FleetStatus) -> str:
    console = Console(record=True, width=300, file=io.StringIO())
    console.print(render.terminal(fleet))
    return console.export_text()


def test_the_terminal_view_shows_versions_skew_recovery_and_runs() -> None:
    text = _text(_fleet())
    lines = text.splitlines()
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    assert ["Kubernetes and containerd/CRI-O", "kubernetes", "v1.31.2", "v1.30.6"] in cells  # lab, prod
    [skew] = [line for line in lines if line.startswith("│ kubernetes") and "prod (v1.30.6)" in line]
    assert "v1.31.2" in skew
    assert not any(line.startswith("│ gpu-driver") and "(550" in line for line in lines)
    assert "new: never inventoried: run runbooks/fleet-inventory.yaml on it" in text
    assert "lab: inventoried by fleet-inventory run inv-lab at 2026-12-03 10:00:00 UTC" in text
    [lab] = [" | ".join(row) for row in cells if row[0] == "lab" and len(row) == 3]
    assert "run bk-1, s3://b/etcd-backups/lab/x.db" in lab and "(30m ago)" in lab
    assert "PASSED 2026-12-01 12:00:00 UTC (2d ago) run dr-1, RTO 2.0s, RPO 14.0s" in lab
    [prod] = [" | ".join(row) for row in cells if row[0] == "prod" and len(row) == 3]
    assert "never backed up" in prod and "never drilled" in prod
    [run] = [line for line in lines if "run-9" in line]
    assert all(word in run for word in ("lab", "platform-upgrade", "workers", "waiting_gate"))


def test_markdown_and_html_hold_the_same_and_mark_the_skew() -> None:
    fleet = _fleet()
    md = render.markdown(fleet)
    assert "| Kubernetes and containerd/CRI-O | kubernetes | v1.31.2 | **v1.30.6** |" in md
    assert "| kubernetes | v1.31.2 | - | **prod (v1.30.6)** | - |" in md
    assert "- new: never inventoried: run runbooks/fleet-inventory.yaml on it" in md
    assert "| prod | **never backed up** | **never drilled** |" in md
    html = render.html(fleet)
    assert '<td class="marked">prod (v1.30.6)</td>' in html and "never drilled" in html
    assert "<script" not in html


def test_names_from_runs_are_escaped_in_every_format() -> None:
    fleet = FleetStatus(generated_at=NOW, clusters=[ClusterStatus(name="a|<b>")], discovery="named")
    assert "a\\|<b>" in render.markdown(fleet)
    assert "a|&lt;b&gt;" in render.html(fleet)


def _task(module: str, data: dict[str, object], minutes: int, status: str = "ok") -> TaskOutcome:
    return TaskOutcome(
        task_id=f"t{minutes}",
        name=module,
        module=module,
        status=status,
        started_at=NOW,
        ended_at=NOW + timedelta(minutes=minutes),
        data=data,
    )


def _report(*tasks: TaskOutcome, status: str = "succeeded", msg: str = "") -> RunReport:
    host = HostResult(
        host="localhost", stage="s", status="ok", tasks=list(tasks), started_at=NOW, ended_at=NOW
    )
    return RunReport(
        run_id="run-1",
        runbook="platform-upgrade",
        requested_by="x",
        check_mode=False,
        status=status,
        started_at=NOW,
        ended_at=NOW,
        stages=[StageReport(name="s", status="ok", hosts=[host])],
        msg=msg,
    )


def test_the_last_ok_inventory_task_and_where_its_full_result_is() -> None:
    report = _report(
        _task(INVENTORY_MODULE, {"rows": [{"component": "kubernetes", "current": "v1.30.6"}]}, 1),
        _task(INVENTORY_MODULE, {"truncated": True, "bytes": 9000}, 5),
        _task(INVENTORY_MODULE, {}, 9, status="failed"),
    )
    at = last_task(report, INVENTORY_MODULE)
    assert at is not None and at.task.task_id == "t5"
    # Too large for the report: read from the host workflow's history.
    assert at.data is None and at.host_workflow_id == "run-1/s/localhost"
    inventory = inventory_of(report, at, {"rows": [{"component": "kubernetes", "current": "v1.31.2"}]})
    assert inventory is not None
    assert [(c.component, c.row, c.current) for c in inventory.components] == [
        ("kubernetes", "Kubernetes and containerd/CRI-O", "v1.31.2")
    ]
    assert inventory_of(report, at, {"msg": "no rows"}) is None


def test_a_drill_verdict_from_its_report_or_from_the_run() -> None:
    data = {
        "passed": False,
        "reasons": ["revision 3 != 4"],
        "rto_s": 1.5,
        "rpo_s": 9,
        "md_uri": "s3://b/k.md",
    }
    drill = drill_of(_report(status="failed"), data)
    assert (drill.passed, drill.rto_s, drill.rpo_s, drill.reasons, drill.report_uri) == (
        False,
        1.5,
        9.0,
        ["revision 3 != 4"],
        "s3://b/k.md",
    )
    early = drill_of(_report(status="failed", msg="Find the newest snapshot: no snapshot"), None)
    assert (early.passed, early.reasons) == (False, ["Find the newest snapshot: no snapshot"])
    assert last_task(_report(), DRILL_MODULE) is None


def test_the_shipped_fleet_inventory_runbook_validates_and_is_scheduled() -> None:
    for inventory in ("staging.yaml", "lab.yaml"):
        result = CliRunner().invoke(
            build_app(["runbook"]),
            [
                "validate",
                str(REPO / "runbooks" / "fleet-inventory.yaml"),
                "-i",
                str(REPO / "runbooks" / "inventories" / inventory),
            ],
        )
        assert result.exit_code == 0, result.output
    [entry] = [
        s
        for s in load_schedules(REPO / "runbooks" / "schedules.yaml").schedules
        if s.id == "fleet-inventory-daily"
    ]
    assert entry.runbook == "fleet-inventory.yaml" and entry.overlap == "skip"
