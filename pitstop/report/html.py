"""The report as one self-contained HTML file: the pictures embedded as base64 PNGs, the tables
as HTML, every text escaped (host names, reasons and comments come from the run)."""

from __future__ import annotations

import base64
from html import escape

from pitstop.report import tables
from pitstop.report.data import ReportData
from pitstop.report.tables import Table

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1400px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } img { max-width: 100%; border: 1px solid #ddd; }
.failed { color: #de2d26; } .note { color: #666; font-size: 0.9em; }
"""


def render(data: ReportData, pictures: dict[str, bytes]) -> str:
    """`pictures`: title -> PNG, in the order they appear (before the tables)."""
    record = tables.change_record(data.artifacts)
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(data.runbook)} {escape(data.run_id)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{escape(data.runbook)}: run {escape(data.run_id)}</h1>",
        _pairs(tables.summary(data)),
    ]
    if record is not None:
        parts.append(
            f'<p>Change record: <a href="{escape(record.uri, quote=True)}">{escape(record.uri)}</a></p>'
        )
    if data.msg:
        parts.append(f"<p>{escape(data.msg)}</p>")
    if not data.finished:
        parts.append(
            '<p class="note">The run is in progress: nodes in flight are grey, waves appear when it ends.</p>'
        )
    for title, png in pictures.items():
        encoded = base64.b64encode(png).decode()
        parts.append(f"<h2>{escape(title)}</h2>")
        parts.append(f'<img alt="{escape(title, quote=True)}" src="data:image/png;base64,{encoded}">')
    parts.extend(_table(t) for t in tables.all_tables(data))
    if data.notices:
        parts.append(
            "<h2>Notices</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in data.notices) + "</ul>"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _pairs(pairs: list[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in pairs)
    return f"<table>{rows}</table>"


def _table(table: Table) -> str:
    head = f"<h2>{escape(table.title)}</h2>"
    if not table.rows:
        return head + f'<p class="note">{escape(table.empty)}</p>'
    columns = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    return f"{head}<table><tr>{columns}</tr>{body}</table>"


def _cell(text: str) -> str:
    if text.startswith(("http://", "https://", "s3://", "file://")):
        return f'<a href="{escape(text, quote=True)}">{escape(text)}</a>'
    return escape(text)
