"""A run's report rendered once and then written: `<run>.html` (self-contained), `<run>.md`
with its PNGs beside it, and `<run>.data.json` (the derived data that drove the pictures, with
the RunReport and layout it came from, so the report can be redrawn without Temporal).

`render_report` makes the files' contents in memory; `write_report` puts them in a directory
(`pitstop report`, the demo) and `records.run_report` puts the same bytes in S3, so both say
exactly the same thing. Rendering draws with matplotlib: CPU work an event loop runs in a thread."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from pitstop.report import html, markdown
from pitstop.report.data import ReportData, derive
from pitstop.report.source import RunSource

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class ReportFiles(BaseModel):
    html: Path
    markdown: Path
    data: Path
    pictures: list[Path]

    def all(self) -> list[Path]:
        return [self.html, self.markdown, self.data, *self.pictures]


class ReportDataFile(BaseModel):
    """`<run>.data.json`: what the report drew, and what it drew it from."""

    derived: ReportData
    source: RunSource


class RenderedReport(BaseModel):
    """The report's files by name (relative names: the Markdown links its PNGs by them)."""

    stem: str
    html: str
    markdown: str
    data_json: str
    # File name -> PNG, in the report's order.
    pictures: dict[str, bytes]

    @property
    def html_name(self) -> str:
        return f"{self.stem}.html"

    @property
    def markdown_name(self) -> str:
        return f"{self.stem}.md"

    @property
    def data_name(self) -> str:
        return f"{self.stem}.data.json"

    def files(self) -> dict[str, tuple[bytes, str]]:
        """Every file: name -> (content, media type), HTML first."""
        out = {
            self.html_name: (self.html.encode(), "text/html; charset=utf-8"),
            self.markdown_name: (self.markdown.encode(), "text/markdown; charset=utf-8"),
        }
        out.update({name: (png, "image/png") for name, png in self.pictures.items()})
        out[self.data_name] = (self.data_json.encode(), "application/json")
        return out


def report_stem(run_id: str) -> str:
    """The files' common name: the run id, safe as a file name and an object key."""
    return _UNSAFE.sub("_", run_id) or "run"


def pictures(data: ReportData) -> dict[str, tuple[str, bytes]]:
    """Title -> (file suffix, PNG), in the report's order; a picture with nothing to show is left out."""
    # matplotlib is imported when a picture is drawn (in the caller's thread), not when a worker
    # that may one day write a report starts.
    from pitstop.report import plots

    out: dict[str, tuple[str, bytes]] = {}
    if data.rows:
        out["Timeline"] = ("timeline", plots.timeline_png(data))
    if data.availability:
        out["Failure-domain availability"] = ("availability", plots.availability_png(data))
    if data.figures:
        out["Validation against baseline"] = ("validation", plots.validation_png(data))
    return out


def render_report(source: RunSource) -> RenderedReport:
    data = derive(source.report, source.layout, finished=source.finished)
    stem = report_stem(data.run_id)
    drawn = pictures(data)
    names = {title: f"{stem}-{suffix}.png" for title, (suffix, _) in drawn.items()}
    return RenderedReport(
        stem=stem,
        html=html.render(data, {t: png for t, (_, png) in drawn.items()}),
        markdown=markdown.render(data, names),
        data_json=ReportDataFile(derived=data, source=source).model_dump_json(indent=1),
        pictures={names[title]: png for title, (_, png) in drawn.items()},
    )


def write_report(source: RunSource, out_dir: Path) -> ReportFiles:
    rendered = render_report(source)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, (content, _) in rendered.files().items():
        (out_dir / name).write_bytes(content)
    return ReportFiles(
        html=out_dir / rendered.html_name,
        markdown=out_dir / rendered.markdown_name,
        data=out_dir / rendered.data_name,
        pictures=[out_dir / name for name in rendered.pictures],
    )
