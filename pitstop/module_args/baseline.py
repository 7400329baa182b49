"""Args of `baseline.record` and `baseline.compare` (docs/upgrade-process.md "Acceptance by layer")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field

from pitstop.baseline import Threshold
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults


class BaselineKey(ModuleArgs):
    product: str = Field(description="GPU product, e.g. the node's nvidia.com/gpu.product label.")
    pool: str = Field(description="Node pool the figures represent, e.g. 'training-h100'.")
    store: str | None = Field(
        default=None, description="Baseline directory (default $PITSTOP_BASELINE_DIR or .pitstop/baselines)."
    )


class RecordArgs(BaselineKey):
    metrics: dict[str, float] = Field(description="Figures to record, e.g. {nccl_busbw_gbps: 396.6}.")
    units: dict[str, str] = Field(default_factory=dict, description="Unit per metric, for reports.")


class CompareArgs(BaselineKey):
    metrics: dict[str, float] = Field(description="Figures measured now.")
    thresholds: dict[str, Threshold] = Field(
        default_factory=dict, description="Per metric: max_deviation_pct (default 5) and direction."
    )


RECORD: ModuleSpec[RecordArgs] = ModuleSpec(
    name="baseline.record",
    args_model=RecordArgs,
    summary="Record reference figures for a GPU product and node pool (running mean).",
    supports_check_mode=True,
    start_to_close=timedelta(seconds=30),
    retry=RetryDefaults(maximum_attempts=3),
)
COMPARE: ModuleSpec[CompareArgs] = ModuleSpec(
    name="baseline.compare",
    args_model=CompareArgs,
    summary="Fail when a figure deviates from its baseline beyond the threshold, with the numbers.",
    supports_check_mode=True,
    start_to_close=timedelta(seconds=30),
    retry=RetryDefaults(maximum_attempts=3),
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [RECORD, COMPARE]
