"""Judging acceptance measurements against the pre-upgrade baseline (pure).

A probe answers with a `Measurement`: its own verdict (`ok`: True, False, or None when the
check cannot be measured here, with the reason in `detail`) and, for metric checks, a figure.
`judge` turns those into per-layer results:

* `n/a`: not measured (never counted as passed); a check listed in `require` is `failed` instead;
* `failed`: the probe's own verdict (a DaemonSet not ready, an Xid event, a Job that failed);
* `deviation`: the figure moved the wrong way by more than the threshold against the baseline;
* `passed`: otherwise. A metric with no baseline figure is recorded only (first run).

The verdict `passed` only when nothing failed or deviates; with `on_deviation: report` a
deviation alone does not fail the module (`failed`), it waits for an explanation at a gate.

`deviation_pct` is the signed relative change `(value - baseline) / baseline * 100`; whether it
is a regression depends on the metric's direction. A baseline of 0 with a worse value has no
finite percentage (`deviation_pct: null`) and is always a deviation.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from pitstop.acceptance.probes import CheckSpec, Direction

CheckStatus = Literal["passed", "failed", "deviation", "n/a"]
LayerStatus = Literal["passed", "failed", "deviation", "n/a"]
OnDeviation = Literal["fail", "report"]


class Measurement(BaseModel):
    ok: bool | None = Field(description="The probe's verdict; None: not measurable (see detail).")
    value: float | None = None
    detail: str = ""
    nodes: dict[str, float] = Field(default_factory=dict, description="Per-node figures, if any.")


def not_measured(reason: str) -> Measurement:
    return Measurement(ok=None, detail=reason)


class Policy(BaseModel):
    max_deviation_pct: float = Field(default=10.0, ge=0)
    thresholds: dict[str, float] = Field(default_factory=dict, description="Per-check overrides.")
    directions: dict[str, Direction] = Field(default_factory=dict, description="Per-check overrides.")
    on_deviation: OnDeviation = "fail"
    require: list[str] = Field(default_factory=list, description="Checks that may not be n/a.")


class CheckResult(BaseModel):
    name: str
    value: float | None = None
    unit: str = ""
    baseline: float | None = None
    deviation_pct: float | None = None
    threshold_pct: float | None = None
    direction: Direction | None = None
    status: CheckStatus
    detail: str = ""
    nodes: dict[str, float] = Field(default_factory=dict)


class LayerResult(BaseModel):
    status: LayerStatus
    checks: list[CheckResult] = Field(default_factory=list)


class Deviation(BaseModel):
    check: str
    value: float
    baseline: float
    unit: str = ""
    deviation_pct: float | None
    threshold_pct: float
    direction: Direction
    message: str


class Verdict(BaseModel):
    layers: dict[str, LayerResult] = Field(default_factory=dict)
    deviations: list[Deviation] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list, description="One line per failed check.")
    passed: bool = Field(description="Nothing failed and nothing deviates from the baseline.")
    failed: bool = Field(
        description="Whether the module fails: a failure, or a deviation unless on_deviation is report "
        "(then the deviations wait for a written explanation at a gate)."
    )
    measured: dict[str, float] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict, description="Checks per status.")

    def summary(self) -> str:
        """The module's `msg`: failures and deviations by check, else the counts."""
        problems = [*self.failures, *(d.message for d in self.deviations)]
        counts = ", ".join(f"{n} {status}" for status, n in self.counts.items() if n)
        if problems:
            head = "acceptance FAILED" if self.failed else "acceptance has deviations to explain"
            return f"{head}: " + "; ".join(problems) + f" ({counts})"
        return f"acceptance passed ({counts})"


def _num(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


def relative_change(value: float, baseline: float) -> float | None:
    """Signed percent change; None when the baseline is 0 and the value is not."""
    if baseline == 0:
        return 0.0 if value == 0 else None
    return round((value - baseline) / abs(baseline) * 100.0, 3)


def is_regression(value: float, baseline: float, direction: Direction, threshold_pct: float) -> bool:
    change = relative_change(value, baseline)
    worse = (
        value < baseline
        if direction == "higher_is_better"
        else value > baseline
        if direction == "lower_is_better"
        else value != baseline
    )
    if not worse:
        return False
    return change is None or abs(change) > threshold_pct


def _deviation_message(
    key: str, spec: CheckSpec, value: float, baseline: float, pct: float | None, limit: float
) -> str:
    unit = f" {spec.unit}" if spec.unit else ""
    change = f"{pct:+.1f}%" if pct is not None else "new"
    return f"{key}: {_num(value)}{unit} vs baseline {_num(baseline)} ({change}, limit {limit:g}%)"


def judge(
    specs: list[CheckSpec], measurements: dict[str, Measurement], baseline: dict[str, float], policy: Policy
) -> Verdict:
    layers: dict[str, LayerResult] = {}
    deviations: list[Deviation] = []
    failures: list[str] = []
    measured: dict[str, float] = {}
    required = set(policy.require)
    for spec in specs:
        m = measurements.get(spec.key) or not_measured("no probe answered for this check")
        direction = policy.directions.get(spec.key, spec.direction) if spec.metric else None
        limit = policy.thresholds.get(spec.key, policy.max_deviation_pct)
        reference = baseline.get(spec.key) if direction is not None else None
        result = CheckResult(
            name=spec.name,
            value=m.value,
            unit=spec.unit,
            baseline=reference,
            threshold_pct=limit if direction is not None else None,
            direction=direction,
            status="passed",
            detail=m.detail,
            nodes=m.nodes,
        )
        if direction is not None and m.value is not None and m.ok is not None:
            measured[spec.key] = m.value
        if m.value is not None and reference is not None:
            result.deviation_pct = relative_change(m.value, reference)
        if m.ok is None:
            if spec.key in required:
                result.status = "failed"
                failures.append(f"{spec.key}: required but not measured ({m.detail})")
            else:
                result.status = "n/a"
        elif not m.ok:
            result.status = "failed"
            against = f" (baseline {_num(reference)})" if reference is not None else ""
            failures.append(f"{spec.key}: {m.detail}{against}")
        elif direction is not None and m.value is not None and reference is not None:
            if is_regression(m.value, reference, direction, limit):
                result.status = "deviation"
                deviations.append(
                    Deviation(
                        check=spec.key,
                        value=m.value,
                        baseline=reference,
                        unit=spec.unit,
                        deviation_pct=result.deviation_pct,
                        threshold_pct=limit,
                        direction=direction,
                        message=_deviation_message(
                            spec.key, spec, m.value, reference, result.deviation_pct, limit
                        ),
                    )
                )
        elif direction is not None and m.value is not None:
            result.detail = f"{m.detail} (no baseline: recorded)" if m.detail else "no baseline: recorded"
        layer = layers.setdefault(spec.layer, LayerResult(status="n/a"))
        layer.checks.append(result)
    for layer in layers.values():
        statuses = {c.status for c in layer.checks}
        layer.status = next((s for s in ("failed", "deviation", "passed") if s in statuses), "n/a")
    counts = {s: 0 for s in ("passed", "failed", "deviation", "n/a")}
    for layer in layers.values():
        for check in layer.checks:
            counts[check.status] += 1
    return Verdict(
        layers=layers,
        deviations=deviations,
        failures=failures,
        passed=not failures and not deviations,
        failed=bool(failures) or (bool(deviations) and policy.on_deviation == "fail"),
        measured=measured,
        counts=counts,
    )
