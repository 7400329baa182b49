"""The fleet view drawn: rich tables for the terminal, one Markdown file, one HTML file. Every
text is escaped for its format (cluster, run and stage names come from runs)."""

from __future__ import annotations

from html import escape

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pitstop.fleet.models import FleetStatus
from pitstop.fleet.tables import FleetTable, all_tables
from pitstop.report.tables import at

MARK_STYLE = "bold red"


def _header(fleet: FleetStatus) -> str:
    return f"Fleet status at {at(fleet.generated_at)}: {len(fleet.clusters)} cluster(s), {fleet.discovery}"


def terminal(fleet: FleetStatus) -> RenderableType:
    parts: list[RenderableType] = [Text(_header(fleet))]
    for table in all_tables(fleet):
        parts.append(Text(""))
        if not table.rows:
            parts += [Text(table.title, style="bold"), Text(table.empty)]
        else:
            drawn = Table(title=table.title, title_justify="left", title_style="bold")
            for column in table.columns:
                drawn.add_column(column, overflow="fold")
            marked = set(table.marked)
            for r, row in enumerate(table.rows):
                drawn.add_row(
                    *(Text(cell, style=MARK_STYLE if (r, c) in marked else "") for c, cell in enumerate(row))
                )
            parts.append(drawn)
        parts += [Text(note) for note in table.notes]
    return Group(*parts)


def _md(value: str) -> str:
    # A pipe or a newline in a reason would break the table.
    return value.replace("|", "\\|").replace("\n", " ")


def markdown(fleet: FleetStatus) -> str:
    lines = ["# Fleet status", "", _md(_header(fleet)), ""]
    for table in all_tables(fleet):
        lines += [f"## {table.title}", ""]
        if not table.rows:
            lines += [table.empty, ""]
        else:
            marked = set(table.marked)
            lines.append("| " + " | ".join(table.columns) + " |")
            lines.append("|" + "---|" * len(table.columns))
            for r, row in enumerate(table.rows):
                cells = [f"**{_md(v)}**" if (r, c) in marked and v else _md(v) for c, v in enumerate(row)]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
        if table.notes:
            lines += [*(f"- {_md(n)}" for n in table.notes), ""]
    lines += [
        "Marked in **bold**: versions off the newest or the majority, missing backups, "
        "failed or missing drills.",
        "",
    ]
    return "\n".join(lines)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1400px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } .marked { color: #de2d26; font-weight: bold; } .note { color: #666; }
"""


def _html_table(table: FleetTable) -> str:
    parts = [f"<h2>{escape(table.title)}</h2>"]
    if not table.rows:
        parts.append(f'<p class="note">{escape(table.empty)}</p>')
    else:
        marked = set(table.marked)
        head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
        body = "".join(
            "<tr>"
            + "".join(
                f'<td class="marked">{escape(v)}</td>' if (r, c) in marked else f"<td>{escape(v)}</td>"
                for c, v in enumerate(row)
            )
            + "</tr>"
            for r, row in enumerate(table.rows)
        )
        parts.append(f"<table><tr>{head}</tr>{body}</table>")
    if table.notes:
        parts.append("<ul>" + "".join(f"<li>{escape(n)}</li>" for n in table.notes) + "</ul>")
    return "".join(parts)


def html(fleet: FleetStatus) -> str:
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8"><title>Fleet status</title>',
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Fleet status</h1>",
        f"<p>{escape(_header(fleet))}</p>",
        *(_html_table(t) for t in all_tables(fleet)),
        '<p class="note">Marked in red: versions off the newest or the majority, missing backups, '
        "failed or missing drills.</p>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
