"""Failure-domain availability over time: how many nodes of each domain were out of service
(cordon to uncordon) at each moment, against the stage's `max_unavailable_per_domain`. Pure."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from pitstop.report.layout import RunLayout
from pitstop.report.timeline import NodeRow, StageBand

NO_DOMAIN = "(no domain)"


class StepPoint(BaseModel):
    at: datetime
    out: int


class LimitSpan(BaseModel):
    """A stage's per-domain limit, over the time that stage ran."""

    stage: str
    limit: int
    start: datetime
    end: datetime


class DomainSeries(BaseModel):
    domain: str
    # A step function: `out` nodes from each point's time until the next point.
    points: list[StepPoint] = Field(default_factory=list)
    peak: int = 0
    # The hosts that were out at the peak.
    peak_hosts: list[str] = Field(default_factory=list)
    limits: list[LimitSpan] = Field(default_factory=list)

    @property
    def over_limit(self) -> bool:
        """Out of service beyond a limit while that limit's stage ran."""
        for limit in self.limits:
            before = [p for p in self.points if p.at <= limit.start]
            during = [p for p in self.points if limit.start <= p.at <= limit.end]
            if any(p.out > limit.limit for p in (before[-1:] + during)):
                return True
        return False


def domain_series(rows: list[NodeRow], bands: list[StageBand], layout: RunLayout) -> list[DomainSeries]:
    """One series per failure domain; a node never given back stays out (its last step lasts)."""
    changes: dict[str, list[tuple[datetime, int, str]]] = {}
    for row in rows:
        if row.out_from is None:
            continue
        events = changes.setdefault(row.domain or NO_DOMAIN, [])
        events.append((row.out_from, +1, row.host))
        if row.out_until is not None:
            events.append((row.out_until, -1, row.host))
    limits = _limits(bands, layout)
    series: list[DomainSeries] = []
    for domain in sorted(changes):
        # At one instant, a node coming back counts before one leaving (no false peak).
        events = sorted(changes[domain], key=lambda e: (e[0], e[1]))
        out: set[str] = set()
        points: list[StepPoint] = []
        peak, peak_hosts = 0, []
        for at, step, host in events:
            if step > 0:
                out.add(host)
            else:
                out.discard(host)
            if points and points[-1].at == at:
                points[-1] = StepPoint(at=at, out=len(out))
            else:
                points.append(StepPoint(at=at, out=len(out)))
            if len(out) > peak:
                peak, peak_hosts = len(out), sorted(out)
        series.append(
            DomainSeries(domain=domain, points=points, peak=peak, peak_hosts=peak_hosts, limits=limits)
        )
    return series


def _limits(bands: list[StageBand], layout: RunLayout) -> list[LimitSpan]:
    spans: list[LimitSpan] = []
    for band in bands:
        stage = layout.stage(band.name)
        if stage is not None and stage.max_unavailable_per_domain is not None:
            spans.append(
                LimitSpan(
                    stage=band.name, limit=stage.max_unavailable_per_domain, start=band.start, end=band.end
                )
            )
    return spans
