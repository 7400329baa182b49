"""Validation figures per node against the baseline, as the modules left them in their task
outcomes. Pure.

Where they land: `gpu.nccl_test` puts the bus bandwidth in `data.avg_busbw_gbps` and, when the
task names a baseline, the judgement in `data.baseline` (a `pitstop.baseline.Deviation`, None
when the baseline has no such figure yet); `gpu.p2p_check` does the same for
`p2p_min_peer_gbps`; `baseline.compare` puts one Deviation per metric in `data.deviations`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from pitstop.baseline import Deviation
from pitstop.contracts import RunReport, TaskOutcome

# The figure each measuring module reports, when no baseline judged it.
_RAW_FIGURE: dict[str, tuple[str, str, str]] = {
    "gpu.nccl_test": ("avg_busbw_gbps", "nccl_busbw_gbps", "GB/s"),
}


class Figure(BaseModel):
    host: str
    stage: str
    task: str
    metric: str
    value: float
    unit: str = ""
    baseline: float | None = None
    allowed_pct: float | None = None
    deviation_pct: float | None = None
    # Whether the module judged the figure acceptable (its task's own verdict without a baseline).
    ok: bool

    @property
    def floor(self) -> float | None:
        """The lowest value the baseline allows (higher is better for every figure drawn)."""
        if self.baseline is None or self.allowed_pct is None:
            return None
        return self.baseline * (1 - self.allowed_pct / 100)


def figures(report: RunReport) -> list[Figure]:
    out: list[Figure] = []
    for stage in report.stages:
        for host in stage.hosts:
            for task in host.tasks:
                out.extend(_task_figures(host.host, stage.name, task))
    return out


def _task_figures(host: str, stage: str, task: TaskOutcome) -> list[Figure]:
    if task.status == "skipped":
        return []
    judged = [_deviation(d) for d in task.data.get("deviations") or []]
    judged.append(_deviation(task.data.get("baseline")))
    found = [
        Figure(
            host=host,
            stage=stage,
            task=task.name,
            metric=d.metric,
            value=d.value,
            unit=d.unit,
            baseline=d.baseline,
            allowed_pct=d.allowed_pct,
            deviation_pct=d.deviation_pct,
            ok=d.ok,
        )
        for d in judged
        if d is not None
    ]
    raw = _RAW_FIGURE.get(task.module or "")
    if raw is not None and not found and isinstance(task.data.get(raw[0]), int | float):
        key, metric, unit = raw
        passed = task.status in ("ok", "changed")
        found.append(
            Figure(
                host=host,
                stage=stage,
                task=task.name,
                metric=metric,
                value=float(task.data[key]),
                unit=unit,
                ok=passed,
            )
        )
    return found


def _deviation(value: Any) -> Deviation | None:
    if not isinstance(value, dict):
        return None
    try:
        return Deviation.model_validate(value)
    except ValidationError:
        return None  # another module's `baseline` key (baseline.record's figures)
