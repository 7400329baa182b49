"""Acceptance baselines (docs/upgrade-process.md "Acceptance by layer"): reference figures per
GPU product and node pool, and the judgement of new figures against them.

Pure logic here; `activities/baseline.py` reads and writes the store.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

Direction = Literal["higher_is_better", "lower_is_better"]


class Reference(BaseModel):
    value: float
    unit: str = ""
    recorded_at: datetime
    source: str = Field(default="", description="Run id or host the figure came from.")
    samples: int = 1


class Baseline(BaseModel):
    """Reference figures of one (GPU product, node pool)."""

    product: str
    pool: str
    metrics: dict[str, Reference] = Field(default_factory=dict)


class Threshold(BaseModel):
    max_deviation_pct: float = Field(default=5.0, ge=0, description="Allowed drop (or rise) in percent.")
    direction: Direction = "higher_is_better"


class Deviation(BaseModel):
    metric: str
    value: float
    baseline: float
    deviation_pct: float = Field(description="Signed: negative means worse than the baseline.")
    allowed_pct: float
    ok: bool
    unit: str = ""

    def describe(self) -> str:
        word = "below" if self.value < self.baseline else "above"
        unit = f" {self.unit}" if self.unit else ""
        pct = abs(self.value - self.baseline) / abs(self.baseline) * 100 if self.baseline else float("inf")
        return (
            f"{self.metric} {self.value:g}{unit} is {pct:.1f}% "
            f"{word} the baseline {self.baseline:g}{unit} (allowed {self.allowed_pct:g}%)"
        )


def merge(
    baseline: Baseline, figures: dict[str, float], when: datetime, source: str, units: dict[str, str]
) -> Baseline:
    """Record new figures: a running mean per metric, so one noisy node does not set the bar."""
    metrics = dict(baseline.metrics)
    for name, value in figures.items():
        old = metrics.get(name)
        if old is None:
            metrics[name] = Reference(value=value, unit=units.get(name, ""), recorded_at=when, source=source)
            continue
        n = old.samples + 1
        metrics[name] = Reference(
            value=old.value + (value - old.value) / n,
            unit=units.get(name, old.unit),
            recorded_at=when,
            source=source,
            samples=n,
        )
    return baseline.model_copy(update={"metrics": metrics})


def compare(
    baseline: Baseline, figures: dict[str, float], thresholds: dict[str, Threshold]
) -> list[Deviation]:
    """Each figure against its reference; a figure with no reference is an error, not a pass."""
    out: list[Deviation] = []
    for name, value in figures.items():
        ref = baseline.metrics.get(name)
        if ref is None:
            raise KeyError(
                f"no baseline for {name!r} of {baseline.product}/{baseline.pool}; record one first "
                "(baseline.record) or remove it from the comparison"
            )
        rule = thresholds.get(name, Threshold())
        if ref.value == 0:
            signed = 0.0 if value == 0 else float("inf")
        else:
            signed = (value - ref.value) / abs(ref.value) * 100.0
        if rule.direction == "lower_is_better":
            signed = -signed
        ok = signed >= -rule.max_deviation_pct
        out.append(
            Deviation(
                metric=name,
                value=value,
                baseline=ref.value,
                deviation_pct=round(signed, 3),
                allowed_pct=rule.max_deviation_pct,
                ok=ok,
                unit=ref.unit,
            )
        )
    return out
