"""The report's tables as rows of plain text, shared by the HTML and the Markdown. Pure."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from pitstop.contracts import Artifact
from pitstop.report.data import ReportData, most_telling

CHANGE_RECORD = "change record"
# Figures that passed listed at most (every failed one is): as `pitstop status` lists hosts.
OK_ROWS_SHOWN = 20


class Table(BaseModel):
    title: str
    columns: list[str]
    rows: list[list[str]]
    # Said instead of an empty table.
    empty: str = ""


def at(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment is not None else "-"


def summary(data: ReportData) -> list[tuple[str, str]]:
    seconds = int((data.ended_at - data.started_at).total_seconds())
    outcomes: dict[str, int] = {}
    for row in data.rows:
        outcomes[row.status] = outcomes.get(row.status, 0) + 1
    return [
        ("run", data.run_id),
        ("runbook", data.runbook),
        ("status", data.status + ("" if data.finished else " (in progress)")),
        ("requested by", data.requested_by),
        ("cluster", data.cluster or "-"),
        ("started", at(data.started_at)),
        ("ended" if data.finished else "as of", at(data.ended_at)),
        ("duration", f"{seconds // 60}m {seconds % 60}s"),
        ("nodes", ", ".join(f"{n} {s}" for s, n in sorted(outcomes.items())) or "-"),
    ]


def failed_nodes(data: ReportData) -> Table:
    return Table(
        title="Nodes that did not end ok",
        columns=["node", "stage", "domain", "status", "reason"],
        rows=[[r.host, r.stage, r.domain or "-", r.status, r.reason] for r in data.failed_rows],
        empty="Every node ended ok.",
    )


def availability(data: ReportData) -> Table:
    rows: list[list[str]] = []
    for series in data.availability:
        limits = ", ".join(f"{lim.limit} ({lim.stage})" for lim in series.limits) or "-"
        rows.append(
            [
                series.domain,
                str(series.peak),
                _some(series.peak_hosts),
                limits,
                "yes" if series.over_limit else "no",
            ]
        )
    return Table(
        title="Failure domains",
        columns=["domain", "most out at once", "out at the peak", "limit", "over the limit"],
        rows=rows,
        empty="No node was cordoned.",
    )


def _some(hosts: list[str], shown: int = 10) -> str:
    more = f", … {len(hosts) - shown} more" if len(hosts) > shown else ""
    return ", ".join(hosts[:shown]) + more


def validation(data: ReportData) -> Table:
    rows: list[list[str]] = []
    failed = sum(1 for f in data.figures if not f.ok)
    shown = most_telling(data.figures, lambda f: not f.ok, failed + OK_ROWS_SHOWN)
    for f in shown:
        unit = f" {f.unit}" if f.unit else ""
        rows.append(
            [
                f.host,
                f.stage,
                f.metric,
                f"{f.value:g}{unit}",
                f"{f.baseline:g}{unit}" if f.baseline is not None else "-",
                f"{f.deviation_pct:+.1f}% (allowed -{f.allowed_pct:g}%)"
                if f.deviation_pct is not None and f.allowed_pct is not None
                else "-",
                "passed" if f.ok else "failed",
            ]
        )
    if len(shown) < len(data.figures):
        rows.append(
            [f"… {len(data.figures) - len(shown)} more that passed", "", "", "", "", "", "(data file)"]
        )
    return Table(
        title="Validation figures",
        columns=["node", "stage", "metric", "value", "baseline", "deviation", "verdict"],
        rows=rows,
        empty="The run registered no validation figures.",
    )


def gates(data: ReportData) -> Table:
    rows: list[list[str]] = []
    for gate in data.gates:
        votes = "; ".join(
            f"{v.approver} {'approved' if v.approve else 'rejected'} at {v.at:%H:%M:%S}"
            f" ({v.source if v.verified else 'unverified'})" + (f": {v.comment}" if v.comment else "")
            for v in gate.votes
        )
        rows.append(
            [
                gate.gate,
                gate.status,
                at(gate.opened_at),
                at(gate.closed_at),
                votes or "-",
                gate.closed_reason or "",
            ]
        )
    return Table(
        title="Gates",
        columns=["gate", "decision", "opened", "decided", "votes (who, when, verified by)", "reason"],
        rows=rows,
        empty="The run had no gates.",
    )


def waves(data: ReportData) -> Table:
    return Table(
        title="Waves",
        columns=["stage", "wave", "hosts", "started", "hosts ended", "observed until"],
        rows=[
            [
                w.stage,
                f"{w.number} {w.wave}",
                str(w.hosts),
                at(w.started_at),
                at(w.hosts_ended_at),
                at(w.observed_until),
            ]
            for w in data.waves
        ],
        empty="No stage ran in waves"
        + ("" if data.finished else " yet (waves are known when the run ends)")
        + ".",
    )


def change_record(artifacts: list[Artifact]) -> Artifact | None:
    return next((a for a in artifacts if a.name.lower() == CHANGE_RECORD), None)


def artifacts(data: ReportData) -> Table:
    return Table(
        title="Change record and other documents",
        columns=["document", "where", "left by"],
        rows=[[a.name, a.uri, "/".join(x for x in (a.stage, a.host, a.task) if x)] for a in data.artifacts],
        empty="The run left no documents (a runbook writes its change record with records.change_record).",
    )


def all_tables(data: ReportData) -> list[Table]:
    return [
        failed_nodes(data),
        availability(data),
        validation(data),
        gates(data),
        waves(data),
        artifacts(data),
    ]
