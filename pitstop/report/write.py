"""Write a run's report into a directory: `<run>.html` (self-contained), `<run>.md` with its
PNGs beside it, and `<run>.data.json` (the derived data that drove the pictures, with the
RunReport and layout it came from, so the report can be redrawn without Temporal)."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from pitstop.report import html, markdown, plots
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


def pictures(data: ReportData) -> dict[str, tuple[str, bytes]]:
    """Title -> (file suffix, PNG), in the report's order; a picture with nothing to show is left out."""
    out: dict[str, tuple[str, bytes]] = {}
    if data.rows:
        out["Timeline"] = ("timeline", plots.timeline_png(data))
    if data.availability:
        out["Failure-domain availability"] = ("availability", plots.availability_png(data))
    if data.figures:
        out["Validation against baseline"] = ("validation", plots.validation_png(data))
    return out


def write_report(source: RunSource, out_dir: Path) -> ReportFiles:
    data = derive(source.report, source.layout, finished=source.finished)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = _UNSAFE.sub("_", data.run_id) or "run"
    drawn = pictures(data)
    png_paths: list[Path] = []
    names: dict[str, str] = {}
    for title, (suffix, png) in drawn.items():
        path = out_dir / f"{stem}-{suffix}.png"
        path.write_bytes(png)
        png_paths.append(path)
        names[title] = path.name
    html_path = out_dir / f"{stem}.html"
    html_path.write_text(html.render(data, {t: png for t, (_, png) in drawn.items()}), encoding="utf-8")
    md_path = out_dir / f"{stem}.md"
    md_path.write_text(markdown.render(data, names), encoding="utf-8")
    data_path = out_dir / f"{stem}.data.json"
    data_path.write_text(
        ReportDataFile(derived=data, source=source).model_dump_json(indent=1), encoding="utf-8"
    )
    return ReportFiles(html=html_path, markdown=md_path, data=data_path, pictures=png_paths)
