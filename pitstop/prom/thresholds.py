"""Judge a query's series against a runbook's threshold.

A threshold is one or more conditions on each sample (`expect: {op, value}`, `max`, `min`);
`samples` says which samples of a series must meet them (a range query has many), `mode` how
many series must pass (`for_all`: every one, `any`: at least one). NaN is no number: it meets no
condition (a ratio of 0/0 says nothing is known, which is not "below the limit"). +Inf and -Inf
compare as infinities. An empty result is judged by `on_empty` alone, because a PromQL typo
and a healthy filter (`... > 0` with nothing above 0) both return nothing.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pitstop.prom.response import QueryResult, Sample, Series, series_name

Op = Literal["<", "<=", ">", ">=", "==", "!="]
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
SamplesMode = Literal["all", "last", "any"]
SeriesMode = Literal["for_all", "any"]
# Series named in a message: enough to act on, short enough for a Slack line.
SHOWN = 5


class Condition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    op: Op = Field(description="Comparison of each sample with `value`.")
    value: float = Field(description="The threshold.")

    def holds(self, number: float) -> bool:
        return not math.isnan(number) and _OPS[self.op](number, self.value)

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"


class Verdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool
    msg: str
    failing: tuple[str, ...] = ()  # series names that did not pass (first SHOWN)


def _passes(series: Series, conditions: list[Condition], samples: SamplesMode) -> bool:
    def good(sample: Sample) -> bool:
        return all(c.holds(sample.number) for c in conditions)

    if samples == "last":
        return good(series.last)
    if samples == "any":
        return any(good(s) for s in series.samples)
    return all(good(s) for s in series.samples)


def _worst(series: Series, conditions: list[Condition]) -> str:
    """`name{...} = v` with the first sample that breaks a condition (or the last one)."""
    bad = next((s for s in series.samples if not all(c.holds(s.number) for c in conditions)), series.last)
    return f"{series_name(series.labels)} = {bad.raw}"


def judge(
    result: QueryResult,
    conditions: list[Condition],
    *,
    samples: SamplesMode = "all",
    mode: SeriesMode = "for_all",
    on_empty: Literal["fail", "ok"] = "fail",
) -> Verdict:
    series = result.series
    wanted = " and ".join(str(c) for c in conditions)
    if not series:
        if on_empty == "ok":
            return Verdict(ok=True, msg="no series (on_empty: ok)")
        return Verdict(
            ok=False,
            msg="the query returned no series (a metric missing, a label misspelt, or nothing matched); "
            "set on_empty: ok if nothing is the healthy answer",
        )
    if not conditions:
        return Verdict(ok=True, msg=f"{len(series)} series")
    passed = [s for s in series if _passes(s, conditions, samples)]
    failed = [s for s in series if not _passes(s, conditions, samples)]
    which = {"all": "every sample", "last": "the last sample", "any": "some sample"}[samples]
    if mode == "any":
        if passed:
            return Verdict(ok=True, msg=f"{len(passed)} of {len(series)} series meet {wanted}")
        shown = [_worst(s, conditions) for s in failed[:SHOWN]]
        more = f" (and {len(failed) - SHOWN} more)" if len(failed) > SHOWN else ""
        return Verdict(
            ok=False,
            msg=f"none of {len(series)} series meets {wanted} ({which}): {'; '.join(shown)}{more}",
            failing=tuple(series_name(s.labels) for s in failed[:SHOWN]),
        )
    if not failed:
        return Verdict(ok=True, msg=f"all {len(series)} series meet {wanted}")
    shown = [_worst(s, conditions) for s in failed[:SHOWN]]
    more = f" (and {len(failed) - SHOWN} more)" if len(failed) > SHOWN else ""
    return Verdict(
        ok=False,
        msg=f"{len(failed)} of {len(series)} series break {wanted} ({which}): {'; '.join(shown)}{more}",
        failing=tuple(series_name(s.labels) for s in failed[:SHOWN]),
    )
