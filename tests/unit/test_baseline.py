"""Baselines (docs/upgrade-process.md "Acceptance by layer"): figures recorded per GPU product
and pool, deviations judged with numbers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from temporalio.exceptions import ApplicationError

from activities.baseline import baseline_compare, baseline_record, load
from pitstop.baseline import Baseline, Threshold, compare, merge
from pitstop.contracts import ModuleCall
from tests.policy_site import PolicyLayer

T0 = datetime(2026, 11, 29, tzinfo=UTC)


def call(module: str, **args: object) -> ModuleCall:
    return ModuleCall(module=module, host="localhost", args=args, run_id="run-1", task_path="t/0")


@pytest.fixture(autouse=True)
def _store_allowed(worker_policy: PolicyLayer, tmp_path: Path) -> None:
    # A `store` a runbook names is a worker path: the operator lets modules write there.
    worker_policy.allow_write(tmp_path)


def test_a_store_the_policy_does_not_allow_is_refused_before_anything_is_written(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    elsewhere = tmp_path_factory.mktemp("not-allowed")
    with pytest.raises(ApplicationError) as err:
        baseline_record(
            call("baseline.record", product="p", pool="q", metrics={"x": 1.0}, store=str(elsewhere))
        )
    assert err.value.type == "PolicyViolation" and err.value.non_retryable
    assert f"baseline.record: store: {elsewhere} is outside the directories this worker may write" in str(
        err.value
    )
    assert list(elsewhere.iterdir()) == []


def test_drop_beyond_threshold_fails_with_the_numbers(tmp_path: Path) -> None:
    store = str(tmp_path)
    baseline_record(
        call(
            "baseline.record",
            product="NVIDIA H100 80GB HBM3",
            pool="training",
            metrics={"nccl_busbw_gbps": 396.6},
            units={"nccl_busbw_gbps": "GB/s"},
            store=store,
        )
    )
    result = baseline_compare(
        call(
            "baseline.compare",
            product="NVIDIA H100 80GB HBM3",
            pool="training",
            metrics={"nccl_busbw_gbps": 312.0},
            thresholds={"nccl_busbw_gbps": {"max_deviation_pct": 5}},
            store=store,
        )
    )
    assert result.failed
    assert result.msg == "nccl_busbw_gbps 312 GB/s is 21.3% below the baseline 396.6 GB/s (allowed 5%)"
    ok = baseline_compare(
        call(
            "baseline.compare",
            product="NVIDIA H100 80GB HBM3",
            pool="training",
            metrics={"nccl_busbw_gbps": 390.0},
            store=store,
        )
    )
    assert not ok.failed and ok.msg == "within baseline: nccl_busbw_gbps -1.7%"


def test_lower_is_better_metrics_fail_when_they_rise() -> None:
    base = merge(Baseline(product="p", pool="q"), {"allreduce_latency_us": 35.0}, T0, "r", {})
    [dev] = compare(
        base, {"allreduce_latency_us": 40.0}, {"allreduce_latency_us": Threshold(direction="lower_is_better")}
    )
    assert not dev.ok and dev.deviation_pct == pytest.approx(-14.286, abs=1e-3)


def test_missing_baseline_is_a_precondition_failure(tmp_path: Path) -> None:
    with pytest.raises(ApplicationError) as err:
        baseline_compare(
            call("baseline.compare", product="A100", pool="infer", metrics={"x": 1.0}, store=str(tmp_path))
        )
    assert err.value.type == "PreconditionFailed"
    assert "no baseline for 'x' of A100/infer; record one first" in str(err.value)


def test_check_mode_records_nothing(tmp_path: Path) -> None:
    c = call("baseline.record", product="p", pool="q", metrics={"x": 1.0}, store=str(tmp_path))
    result = baseline_record(c.model_copy(update={"check_mode": True}))
    assert result.msg.startswith("would record")
    assert load(str(tmp_path), "p", "q").metrics == {}


def test_bad_args_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ApplicationError) as err:
        baseline_record(
            call("baseline.record", product="p", pool="q", metrics={"x": "fast"}, store=str(tmp_path))
        )
    assert err.value.type == "InvalidArgs" and "metrics.x" in str(err.value)


@given(st.lists(st.floats(min_value=1, max_value=1000), min_size=1, max_size=30))
def test_recorded_reference_is_the_mean_of_the_samples(values: list[float]) -> None:
    base = Baseline(product="p", pool="q")
    for v in values:
        base = merge(base, {"m": v}, T0, "r", {})
    assert base.metrics["m"].samples == len(values)
    assert base.metrics["m"].value == pytest.approx(sum(values) / len(values), rel=1e-9)
