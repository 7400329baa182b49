"""What the fleet view takes from a finished run's RunReport (pure): where its module results
are (stage, host, task) and what they say when the report kept them.

A task's data stays in the report only while it is small (workflows/host_state.py `small`,
4 KB): an `inventory.versions` result or a drill report is larger, so the report says
`{"truncated": true}` and the fleet view reads the result from the host workflow's history
(pitstop/fleet/source.py); these functions say where."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from pitstop.compat.components import ROW_OF
from pitstop.contracts import RunReport, TaskOutcome
from pitstop.fleet.models import Backup, ClusterInventory, ComponentVersion, Drill

INVENTORY_MODULE = "inventory.versions"
UPLOAD_MODULE = "storage.upload"
DRILL_MODULE = "records.drill_report"
DONE = ("ok", "changed")


class TaskAt(BaseModel):
    """A task of a run and the host workflow that ran it (`<run>/<stage>/<host>`)."""

    run_id: str
    stage: str
    host: str
    task: TaskOutcome

    @property
    def host_workflow_id(self) -> str:
        return f"{self.run_id}/{self.stage}/{self.host}"

    @property
    def data(self) -> dict[str, Any] | None:
        """The task's data as the report kept it, None when it was too large to keep."""
        data = self.task.data
        return None if data.get("truncated") is True else data


def last_task(report: RunReport, module: str) -> TaskAt | None:
    """The module's last task that ended ok or changed (the newest state it saw)."""
    found: TaskAt | None = None
    for stage in report.stages:
        for host in stage.hosts:
            for task in host.tasks:
                if task.module != module or task.status not in DONE:
                    continue
                if found is None or task.ended_at >= found.task.ended_at:
                    found = TaskAt(run_id=report.run_id, stage=stage.name, host=host.host, task=task)
    return found


def inventory_of(report: RunReport, at: TaskAt, data: dict[str, Any]) -> ClusterInventory | None:
    """The version inventory from an `inventory.versions` result's data (its `rows`)."""
    rows = data.get("rows")
    if not isinstance(rows, list):
        return None
    components = [
        ComponentVersion(
            component=str(row["component"]),
            row=str(row.get("row") or ROW_OF.get(str(row["component"]), "")),
            current=str(row.get("current", "")),
        )
        for row in rows
        if isinstance(row, dict) and row.get("component")
    ]
    return ClusterInventory(
        run_id=report.run_id, runbook=report.runbook, taken_at=at.task.ended_at, components=components
    )


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def backup_of(report: RunReport, data: dict[str, Any] | None) -> Backup:
    """A succeeded backup run and, from its `storage.upload` result, what it stored."""
    data = data or {}
    uri = data.get("uri")
    sha = data.get("sha256")
    return Backup(
        run_id=report.run_id,
        ended_at=report.ended_at,
        uri=str(uri) if uri else None,
        taken_at=_time(data.get("taken_at")),
        sha256=str(sha) if sha else None,
    )


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def drill_of(report: RunReport, data: dict[str, Any] | None) -> Drill:
    """A drill run's verdict: the drill report's own (passed, RTO, RPO, reasons) when it wrote
    one; otherwise the run's outcome (a drill that failed before its report)."""
    if data is not None and isinstance(data.get("passed"), bool):
        reasons = data.get("reasons")
        uri = data.get("md_uri") or data.get("json_uri")
        return Drill(
            run_id=report.run_id,
            ended_at=report.ended_at,
            passed=bool(data["passed"]),
            rto_s=_seconds(data.get("rto_s")),
            rpo_s=_seconds(data.get("rpo_s")),
            reasons=[str(r) for r in reasons] if isinstance(reasons, list) else [],
            report_uri=str(uri) if uri else None,
        )
    passed = report.status == "succeeded"
    return Drill(
        run_id=report.run_id,
        ended_at=report.ended_at,
        passed=passed,
        reasons=[] if passed else [report.msg or f"the drill run ended {report.status}"],
    )
