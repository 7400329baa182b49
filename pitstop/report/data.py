"""Everything a report draws and lists, derived once from a RunReport and the plan's layout.
Written beside the report as `<run>.data.json`: what drove each picture, for people and tests.
Pure."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from pydantic import BaseModel, Field

from pitstop.contracts import Artifact, RunReport
from pitstop.report.availability import DomainSeries, domain_series
from pitstop.report.layout import RunLayout
from pitstop.report.timeline import (
    GateMark,
    NodeRow,
    StageBand,
    WaveMark,
    gate_marks,
    node_rows,
    stage_bands,
    wave_marks,
)
from pitstop.report.validation import Figure, figures

T = TypeVar("T")


class ReportData(BaseModel):
    run_id: str
    runbook: str
    status: str
    requested_by: str
    cluster: str | None = None
    check_mode: bool = False
    started_at: datetime
    ended_at: datetime
    # False: a run in progress, drawn as far as it has gone.
    finished: bool = True
    msg: str = ""
    rows: list[NodeRow] = Field(default_factory=list)
    stages: list[StageBand] = Field(default_factory=list)
    waves: list[WaveMark] = Field(default_factory=list)
    gates: list[GateMark] = Field(default_factory=list)
    availability: list[DomainSeries] = Field(default_factory=list)
    figures: list[Figure] = Field(default_factory=list)
    artifacts: list[Artifact] = Field(default_factory=list)
    notices: list[str] = Field(default_factory=list)

    @property
    def failed_rows(self) -> list[NodeRow]:
        return [r for r in self.rows if r.status not in ("ok", "running", "skipped")]


def derive(report: RunReport, layout: RunLayout, finished: bool = True) -> ReportData:
    rows = node_rows(report, layout)
    bands = stage_bands(report)
    return ReportData(
        run_id=report.run_id,
        runbook=report.runbook,
        status=report.status,
        requested_by=report.requested_by,
        cluster=report.cluster,
        check_mode=report.check_mode,
        started_at=report.started_at,
        ended_at=report.ended_at,
        finished=finished,
        msg=report.msg,
        rows=rows,
        stages=bands,
        waves=wave_marks(report),
        gates=gate_marks(report),
        availability=domain_series(rows, bands, layout),
        figures=figures(report),
        artifacts=report.artifacts,
        notices=report.notices,
    )


def most_telling(items: list[T], bad: Callable[[T], bool], limit: int) -> list[T]:
    """At most `limit` items in their order: every bad one first (up to the limit), then the
    earliest others. A fleet of 10,000 nodes draws the ones that need a look, not 10,000 rows."""
    chosen = {id(item) for item in [i for i in items if bad(i)][:limit]}
    for item in items:
        if len(chosen) >= limit:
            break
        chosen.add(id(item))
    return [item for item in items if id(item) in chosen]
