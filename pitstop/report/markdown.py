"""The report as Markdown, its pictures as PNG files beside it (linked by file name)."""

from __future__ import annotations

from pitstop.report import tables
from pitstop.report.data import ReportData
from pitstop.report.tables import Table


def render(data: ReportData, pictures: dict[str, str]) -> str:
    """`pictures`: title -> PNG file name relative to the Markdown file."""
    lines = [f"# {_text(data.runbook)}: run {_text(data.run_id)}", ""]
    lines += ["| | |", "|---|---|", *(f"| {k} | {_text(v)} |" for k, v in tables.summary(data)), ""]
    record = tables.change_record(data.artifacts)
    if record is not None:
        lines += [f"Change record: <{record.uri}>", ""]
    if data.msg:
        lines += [_text(data.msg), ""]
    if not data.finished:
        lines += ["*The run is in progress: nodes in flight are grey, waves appear when it ends.*", ""]
    for title, name in pictures.items():
        lines += [f"## {title}", "", f"![{title}]({name})", ""]
    for table in tables.all_tables(data):
        lines += _table(table)
    if data.notices:
        lines += ["## Notices", "", *(f"- {_text(n)}" for n in data.notices), ""]
    return "\n".join(lines)


def _table(table: Table) -> list[str]:
    lines = [f"## {table.title}", ""]
    if not table.rows:
        return [*lines, table.empty, ""]
    lines.append("| " + " | ".join(table.columns) + " |")
    lines.append("|" + "---|" * len(table.columns))
    lines.extend("| " + " | ".join(_text(c) for c in row) + " |" for row in table.rows)
    return [*lines, ""]


def _text(value: str) -> str:
    # A pipe or a newline in a reason would break the table.
    return value.replace("|", "\\|").replace("\n", " ")
