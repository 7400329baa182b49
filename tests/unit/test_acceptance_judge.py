"""The pure judgement of acceptance measurements against the pre-upgrade baseline."""

from __future__ import annotations

import pytest

from pitstop.acceptance.judge import (
    LayerResult,
    Measurement,
    Policy,
    is_regression,
    judge,
    not_measured,
    relative_change,
)
from pitstop.acceptance.probes import BY_KEY, CATALOGUE, select

NCCL = BY_KEY["network/nccl"]
TTFT = BY_KEY["inference/ttft"]
XID = BY_KEY["gpu/xid"]
DNS = BY_KEY["kubernetes/dns"]


def check(verdict_layers: dict[str, LayerResult], key: str) -> dict[str, object]:
    layer, name = key.split("/")
    return next(c.model_dump() for c in verdict_layers[layer].checks if c.name == name)


def test_a_drop_in_a_higher_is_better_metric_beyond_the_threshold_is_a_deviation() -> None:
    verdict = judge(
        [NCCL], {NCCL.key: Measurement(ok=True, value=205)}, {NCCL.key: 392.0}, Policy(max_deviation_pct=10)
    )
    [dev] = verdict.deviations
    assert dev.check == "network/nccl"
    assert dev.deviation_pct == pytest.approx(-47.704, abs=0.01)
    assert dev.message == "network/nccl: 205 GB/s vs baseline 392 (-47.7%, limit 10%)"
    assert verdict.passed is False and verdict.failed is True
    assert verdict.layers["network"].status == "deviation"
    assert "network/nccl: 205 GB/s vs baseline 392" in verdict.summary()


def test_a_drop_within_the_threshold_passes_and_a_rise_never_deviates() -> None:
    within = judge([NCCL], {NCCL.key: Measurement(ok=True, value=360)}, {NCCL.key: 392.0}, Policy())
    better = judge([NCCL], {NCCL.key: Measurement(ok=True, value=600)}, {NCCL.key: 392.0}, Policy())
    assert within.passed and not within.deviations
    assert better.passed and not better.deviations
    assert check(better.layers, NCCL.key)["deviation_pct"] == pytest.approx(53.061, abs=0.01)


def test_for_lower_is_better_metrics_a_rise_is_the_regression() -> None:
    slower = judge([TTFT], {TTFT.key: Measurement(ok=True, value=260)}, {TTFT.key: 180.0}, Policy())
    faster = judge([TTFT], {TTFT.key: Measurement(ok=True, value=100)}, {TTFT.key: 180.0}, Policy())
    assert [d.check for d in slower.deviations] == ["inference/ttft"]
    assert "+44.4%" in slower.deviations[0].message
    assert faster.passed and not faster.deviations


def test_per_check_thresholds_and_directions_override_the_defaults() -> None:
    strict = Policy(max_deviation_pct=50, thresholds={NCCL.key: 5})
    assert judge([NCCL], {NCCL.key: Measurement(ok=True, value=370)}, {NCCL.key: 392.0}, strict).deviations
    either = Policy(directions={NCCL.key: "either"})
    assert judge([NCCL], {NCCL.key: Measurement(ok=True, value=600)}, {NCCL.key: 392.0}, either).deviations


def test_report_mode_lists_deviations_without_failing() -> None:
    verdict = judge(
        [NCCL], {NCCL.key: Measurement(ok=True, value=205)}, {NCCL.key: 392.0}, Policy(on_deviation="report")
    )
    assert verdict.failed is False and verdict.passed is False
    assert len(verdict.deviations) == 1
    assert verdict.summary().startswith("acceptance has deviations to explain: network/nccl: 205 GB/s")


def test_the_first_run_records_figures_without_judging_them() -> None:
    verdict = judge(
        [NCCL, TTFT],
        {NCCL.key: Measurement(ok=True, value=205), TTFT.key: Measurement(ok=True, value=900)},
        {},
        Policy(),
    )
    assert verdict.passed and not verdict.deviations
    assert verdict.measured == {"network/nccl": 205, "inference/ttft": 900}
    result = check(verdict.layers, NCCL.key)
    assert result["baseline"] is None and "no baseline: recorded" in str(result["detail"])


def test_an_unmeasurable_check_is_na_with_its_reason_never_passed() -> None:
    verdict = judge(
        [DNS, NCCL], {NCCL.key: not_measured("no nodes given for the NCCL test (nodes)")}, {}, Policy()
    )
    assert check(verdict.layers, NCCL.key)["status"] == "n/a"
    assert check(verdict.layers, NCCL.key)["detail"] == "no nodes given for the NCCL test (nodes)"
    # A check no probe answered for is n/a too, not passed.
    assert check(verdict.layers, DNS.key)["status"] == "n/a"
    assert verdict.counts == {"passed": 0, "failed": 0, "deviation": 0, "n/a": 2}
    assert verdict.layers["network"].status == "n/a"
    assert NCCL.key not in verdict.measured


def test_a_required_check_that_cannot_be_measured_fails() -> None:
    verdict = judge([NCCL], {NCCL.key: not_measured("no nodes given")}, {}, Policy(require=[NCCL.key]))
    assert verdict.passed is False
    assert verdict.failures == ["network/nccl: required but not measured (no nodes given)"]


def test_a_probe_failure_fails_whatever_the_baseline_and_quotes_it() -> None:
    verdict = judge(
        [XID], {XID.key: Measurement(ok=False, value=3, detail="3 Xid events")}, {XID.key: 0.0}, Policy()
    )
    assert verdict.failures == ["gpu/xid: 3 Xid events (baseline 0)"]
    assert verdict.layers["gpu"].status == "failed"
    assert not verdict.passed
    assert check(verdict.layers, XID.key)["deviation_pct"] is None  # no finite change from 0


def test_a_zero_baseline_makes_any_regression_a_deviation() -> None:
    assert relative_change(3, 0) is None
    assert relative_change(0, 0) == 0.0
    assert is_regression(3, 0, "lower_is_better", 1000)
    assert not is_regression(0, 0, "lower_is_better", 0)


def test_layers_keep_the_catalogue_order_and_a_failure_outranks_a_deviation() -> None:
    specs = select(["network"])
    measurements = {
        "network/nccl": Measurement(ok=True, value=100),
        "network/pod_network": Measurement(ok=False, value=1, detail="NetworkUnavailable on gpu-node-002"),
    }
    verdict = judge(specs, measurements, {"network/nccl": 392.0}, Policy())
    assert [c.name for c in verdict.layers["network"].checks] == ["pod_network", "rdma", "nccl", "cross_node"]
    assert verdict.layers["network"].status == "failed"


def test_the_catalogue_covers_every_item_of_section_12() -> None:
    expected = {
        "kubernetes": {"api", "scheduling", "dns", "cni", "csi", "logs"},
        "gpu": {"discovery", "allocation", "mig_dra", "dcgm", "xid", "ecc"},
        "network": {"pod_network", "rdma", "nccl", "cross_node"},
        "storage": {"pvc", "object_storage", "model_download", "checkpoint"},
        "training": {"start", "throughput", "convergence", "recovery"},
        "inference": {"model_load", "ttft", "tpot", "scaling", "canary"},
        "governance": {"kueue", "rbac", "policy", "audit", "cost_labels"},
    }
    found: dict[str, set[str]] = {}
    for spec in CATALOGUE:
        found.setdefault(spec.layer, set()).add(spec.name)
    assert found == expected


def test_gpus_in_use_are_reported_not_judged_so_workload_churn_is_no_regression() -> None:
    """gpu/allocation is what running pods request: after a drain-heavy change fewer are in use
    for a while, which says nothing about the platform. It is recorded, never a deviation."""
    allocation = BY_KEY["gpu/allocation"]
    assert allocation.direction is None
    verdict = judge(
        [allocation], {allocation.key: Measurement(ok=True, value=4)}, {allocation.key: 40.0}, Policy()
    )
    assert verdict.passed and not verdict.deviations
    assert check(verdict.layers, allocation.key)["value"] == 4
