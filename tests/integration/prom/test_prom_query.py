"""`prom.query` against a real Prometheus: thresholds per series, range queries, NaN and
infinities as Prometheus encodes them, empty results, Prometheus's own errors, and the worker
policy's refusal of a URL it does not allow."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from activities.prom import query
from tests.integration.prom.conftest import Lab


def test_a_threshold_every_series_must_meet_fails_naming_the_series_that_break_it(lab: Lab) -> None:
    args = {"url": lab.prometheus, "query": "lab_gpu_temp_celsius", "expect": {"op": "<", "value": 85}}
    result = lab.run(query, "prom.query", args)
    assert result.failed
    assert result.msg == (
        'lab_gpu_temp_celsius: 1 of 2 series break < 85 (every sample): lab_gpu_temp_celsius{gpu="0", '
        'instance="'
        + result.data["series"][0]["labels"]["instance"]
        + '", job="lab", node="gpu-node-002"} = 91'
    )
    assert result.data["result_type"] == "vector" and result.data["count"] == 2
    values = {s["labels"]["node"]: s["value"] for s in result.data["series"]}
    assert values == {"gpu-node-001": 60.0, "gpu-node-002": 91.0}

    passed = lab.run(query, "prom.query", {**args, "expect": None, "max": 95})
    assert not passed.failed and passed.msg == "lab_gpu_temp_celsius: all 2 series meet <= 95"


def test_mode_any_passes_when_one_series_meets_it(lab: Lab) -> None:
    args = {"url": lab.prometheus, "query": "lab_gpu_temp_celsius", "max": 70, "mode": "any"}
    result = lab.run(query, "prom.query", args)
    assert not result.failed and result.msg.endswith("1 of 2 series meet <= 70")
    none = lab.run(query, "prom.query", {**args, "max": 10})
    assert none.failed and "none of 2 series meets <= 10" in none.msg


def test_a_range_query_judges_every_sample_of_each_series(lab: Lab) -> None:
    args = {
        "url": lab.prometheus,
        "query": 'lab_gpu_temp_celsius{node="gpu-node-001"}',
        "range": "30s",
        "step": "1s",
        "min": 50,
        "max": 70,
    }
    result = lab.run(query, "prom.query", args)
    assert not result.failed, result.msg
    series = result.data["series"][0]
    assert result.data["result_type"] == "matrix" and series["samples"] >= 1
    assert series["min"] == series["max"] == 60.0


def test_nan_and_infinities_meet_no_threshold_and_stay_as_prometheus_wrote_them(lab: Lab) -> None:
    result = lab.run(query, "prom.query", {"url": lab.prometheus, "query": "lab_ratio", "max": 1})
    assert result.failed and "2 of 2 series break <= 1" in result.msg
    raw = {s["labels"]["node"]: (s["raw"], s["value"]) for s in result.data["series"]}
    assert raw == {"gpu-node-001": ("NaN", None), "gpu-node-002": ("+Inf", None)}
    # +Inf is more than anything, NaN is nothing at all.
    above = lab.run(
        query, "prom.query", {"url": lab.prometheus, "query": "lab_ratio", "min": 1, "mode": "any"}
    )
    assert not above.failed and above.msg.endswith("1 of 2 series meet >= 1")


def test_a_scalar_is_one_series_without_labels(lab: Lab) -> None:
    result = lab.run(query, "prom.query", {"url": lab.prometheus, "query": "scalar(sum(lab_xid))", "max": 0})
    assert result.failed and result.data["result_type"] == "scalar"
    assert result.msg == "scalar(sum(lab_xid)): 1 of 1 series break <= 0 (every sample): {} = 79"


def test_an_empty_result_fails_unless_the_runbook_says_nothing_is_healthy(lab: Lab) -> None:
    args = {"url": lab.prometheus, "query": "lab_xid > 100", "max": 0}
    result = lab.run(query, "prom.query", args)
    assert result.failed and "returned no series" in result.msg and "on_empty: ok" in result.msg
    ok = lab.run(query, "prom.query", {**args, "on_empty": "ok"})
    assert not ok.failed and ok.msg == "lab_xid > 100: no series (on_empty: ok)"


def test_a_query_prometheus_refuses_is_invalid_args_with_its_words(lab: Lab) -> None:
    with pytest.raises(ApplicationError) as refused:
        lab.run(query, "prom.query", {"url": lab.prometheus, "query": "sum(lab_xid"})
    assert refused.value.type == "InvalidArgs" and refused.value.non_retryable
    assert f"prom.query: {lab.prometheus}/api/v1/query answered bad_data: " in refused.value.message
    assert "unclosed left parenthesis" in refused.value.message


def test_a_url_the_policy_does_not_allow_is_refused_before_any_request(lab: Lab) -> None:
    for url in ("http://169.254.169.254/latest/meta-data", "http://127.0.0.1:1/"):
        with pytest.raises(ApplicationError) as refused:
            lab.run(query, "prom.query", {"url": url, "query": "up"})
        assert refused.value.type == "PolicyViolation"
        assert (
            f"prom.query: {url} is not a Prometheus or Alertmanager this worker may query (policy "
            f"prometheus.endpoints: {lab.prometheus}, {lab.alertmanager}); ask the worker's operator"
        ) in refused.value.message


def test_a_token_secret_must_be_granted_for_prometheus(lab: Lab) -> None:
    args = {"url": lab.prometheus, "query": "up", "token": {"secret": "prom-token"}}
    with pytest.raises(ApplicationError) as refused:
        lab.run(query, "prom.query", args)
    assert refused.value.type == "PolicyViolation"
    assert "prom.query: token: secret 'prom-token' is not granted to any use on this worker" in (
        refused.value.message
    )
