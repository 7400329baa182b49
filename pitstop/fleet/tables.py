"""The fleet view's sections as rows of plain text (pure), shared by the terminal, the Markdown
and the HTML: cells a reader must notice (skew, a failed drill) are marked, each renderer
shows the mark its own way."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from pitstop.compat.components import COMPONENT_KEYS, ROW_OF
from pitstop.fleet.models import INVENTORY_RUNBOOK, ClusterStatus, FleetStatus
from pitstop.report.tables import at

NEVER_INVENTORIED = f"never inventoried: run {INVENTORY_RUNBOOK} on it"
NEVER_BACKED_UP = "never backed up"
NEVER_DRILLED = "never drilled"


class FleetTable(BaseModel):
    title: str
    columns: list[str]
    rows: list[list[str]] = Field(default_factory=list)
    # (row, column) of the cells to highlight.
    marked: list[tuple[int, int]] = Field(default_factory=list)
    # Said instead of an empty table.
    empty: str = ""
    # Lines said after the table.
    notes: list[str] = Field(default_factory=list)


def _age(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "-"
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 3600:
        ago = f"{seconds // 60}m ago"
    elif seconds < 86400:
        ago = f"{seconds // 3600}h ago"
    else:
        ago = f"{seconds // 86400}d ago"
    return f"{at(moment)} ({ago})"


def versions(fleet: FleetStatus) -> FleetTable:
    """One row per component (grouped under the version inventory's ten rows), one column per
    inventoried cluster; a cluster off the newest or the majority is marked."""
    inventoried = [c for c in fleet.clusters if c.inventory is not None]
    table = FleetTable(
        title="Version inventory",
        columns=["version inventory row", "component", *(c.name for c in inventoried)],
        empty="No cluster has been inventoried.",
    )
    skewed = {s.component: set(s.highlighted) for s in fleet.skew}
    seen = [p.component for c in inventoried if c.inventory for p in c.inventory.components]
    order = [*COMPONENT_KEYS, *dict.fromkeys(k for k in seen if k not in COMPONENT_KEYS)]
    last_row = None
    for component in order if inventoried else []:
        row = ROW_OF.get(component, "")
        cells = [row if row != last_row else "", component]
        last_row = row
        for column, cluster in enumerate(inventoried, start=2):
            version = cluster.inventory.version_of(component) if cluster.inventory else None
            cells.append(version if version is not None else "-")
            if cluster.name in skewed.get(component, set()):
                table.marked.append((len(table.rows), column))
        table.rows.append(cells)
    for cluster in fleet.clusters:
        inv = cluster.inventory
        if inv is None:
            table.notes.append(f"{cluster.name}: {NEVER_INVENTORIED}")
        else:
            table.notes.append(
                f"{cluster.name}: inventoried by {inv.runbook} run {inv.run_id} at {at(inv.taken_at)}"
            )
    return table


def skew(fleet: FleetStatus) -> FleetTable:
    table = FleetTable(
        title="Skew between clusters",
        columns=["component", "newest", "majority", "behind the newest", "off the majority"],
        empty=(
            "No skew: every inventoried cluster runs the same versions."
            if sum(c.inventory is not None for c in fleet.clusters) > 1
            else "Fewer than two clusters inventoried: nothing to compare."
        ),
    )
    for index, row in enumerate(fleet.skew):
        behind = ", ".join(f"{c} ({row.by_cluster[c]})" for c in row.behind_newest) or "-"
        off = ", ".join(f"{c} ({row.by_cluster[c]})" for c in row.off_majority) or "-"
        table.rows.append([row.component, row.newest or "-", row.majority or "-", behind, off])
        table.marked += [(index, 3)] if row.behind_newest else []
        table.marked += [(index, 4)] if row.off_majority else []
    return table


def _backup(cluster: ClusterStatus, now: datetime) -> str:
    b = cluster.backup
    text = NEVER_BACKED_UP if b is None else f"{_age(b.ended_at, now)} run {b.run_id}"
    if b is not None and b.uri:
        text += f", {b.uri}"
    if cluster.backup_failed is not None:
        f = cluster.backup_failed
        text += f"; newer run {f.run_id} {f.status}" + (f": {f.msg}" if f.msg else "")
    return text


def _drill(cluster: ClusterStatus, now: datetime) -> str:
    d = cluster.drill
    if d is None:
        return NEVER_DRILLED
    seconds = ", ".join(
        f"{label} {value:.1f}s" for label, value in (("RTO", d.rto_s), ("RPO", d.rpo_s)) if value is not None
    )
    text = f"{'PASSED' if d.passed else 'FAILED'} {_age(d.ended_at, now)} run {d.run_id}"
    text += f", {seconds}" if seconds else ""
    text += f": {'; '.join(d.reasons)}" if d.reasons else ""
    return text + (f", report {d.report_uri}" if d.report_uri else "")


def recovery(fleet: FleetStatus) -> FleetTable:
    table = FleetTable(
        title="etcd backups and restore drills",
        columns=["cluster", "last successful backup", "last restore drill"],
        empty="No cluster.",
    )
    for index, cluster in enumerate(fleet.clusters):
        table.rows.append(
            [cluster.name, _backup(cluster, fleet.generated_at), _drill(cluster, fleet.generated_at)]
        )
        if cluster.backup is None or cluster.backup_failed is not None:
            table.marked.append((index, 1))
        if cluster.drill is None or not cluster.drill.passed:
            table.marked.append((index, 2))
    return table


def in_flight(fleet: FleetStatus) -> FleetTable:
    table = FleetTable(
        title="Runs in progress",
        columns=["cluster", "runbook", "run", "stage", "status", "started"],
        empty="No run in progress.",
    )
    for cluster in fleet.clusters:
        for run in cluster.in_flight:
            table.rows.append(
                [
                    cluster.name,
                    run.runbook,
                    run.run_id,
                    run.stage or "-",
                    run.status or "-",
                    at(run.started_at),
                ]
            )
        if cluster.in_flight_more:
            table.notes.append(
                f"{cluster.name}: more runs in progress than the {len(cluster.in_flight)} shown"
            )
    return table


def all_tables(fleet: FleetStatus) -> list[FleetTable]:
    return [versions(fleet), skew(fleet), recovery(fleet), in_flight(fleet)]
