"""Parsing and judging real Prometheus and Alertmanager answers (tests/fixtures/real/prometheus,
recorded from Debian's prometheus 2.42 and alertmanager 0.25: SOURCES.md there)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pitstop.module_args.prom import PromAlertsArgs, PromQueryArgs
from pitstop.prom.alerts import matching, parse_alertmanager_alerts, parse_prometheus_alerts
from pitstop.prom.durations import parse_duration
from pitstop.prom.response import PromApiError, QueryResult, parse_query, series_name
from pitstop.prom.thresholds import Condition, judge

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real" / "prometheus"


def answer(name: str) -> tuple[int, bytes]:
    return int((REAL / f"{name}.status").read_text()), (REAL / f"{name}.json").read_bytes()


def parsed(name: str) -> QueryResult:
    return parse_query(*answer(name))


def test_a_vector_keeps_labels_and_values_as_prometheus_wrote_them() -> None:
    result = parsed("query_vector")
    assert result.result_type == "vector"
    by_node = {s.labels["node"]: s.last for s in result.series}
    assert by_node["gpu-node-002"].raw == "91" and by_node["gpu-node-002"].number == 91.0
    assert series_name(result.series[0].labels).startswith('lab_gpu_temp_celsius{gpu="0", instance=')


def test_nan_and_infinities_are_strings_read_as_floats() -> None:
    samples = {(s.labels["__name__"], s.labels["node"]): s.last for s in parsed("query_nan_inf").series}
    assert samples["lab_ratio", "gpu-node-001"].raw == "NaN" and math.isnan(
        samples["lab_ratio", "gpu-node-001"].number
    )
    assert samples["lab_ratio", "gpu-node-002"].number == math.inf
    assert (
        samples["lab_low", "gpu-node-001"].raw == "-Inf"
        and samples["lab_low", "gpu-node-001"].number == -math.inf
    )


def test_nan_meets_no_condition_and_infinities_compare_as_infinities() -> None:
    result = parsed("query_nan_inf")
    low = judge(result, [Condition(op="<", value=1)])
    assert not low.ok and low.msg.startswith("2 of 3 series break < 1 (every sample)")
    assert "NaN" in low.msg and "+Inf" in low.msg and "-Inf" not in low.msg
    assert not judge(result, [Condition(op="!=", value=0)]).ok  # NaN != 0 is not "known to differ"


def test_scalar_string_matrix_and_empty_results() -> None:
    scalar = parsed("query_scalar")
    assert (
        scalar.result_type == "scalar"
        and scalar.series[0].labels == {}
        and scalar.series[0].last.number == 79
    )
    text = parsed("query_string")
    assert text.result_type == "string" and text.text == "pitstop" and text.series == ()
    matrix = parsed("query_range_matrix")
    assert matrix.result_type == "matrix" and all(len(s.samples) >= 1 for s in matrix.series)
    empty = parsed("query_empty")
    assert empty.series == ()
    assert not judge(empty, [Condition(op="<", value=1)]).ok
    assert judge(empty, [Condition(op="<", value=1)], on_empty="ok").ok


@pytest.mark.parametrize(
    ("name", "error_type", "status", "words"),
    [
        ("query_bad_data", "bad_data", 400, "parse error: unclosed left parenthesis"),
        ("query_execution_error", "execution", 422, "many-to-many matching not allowed"),
    ],
)
def test_prometheus_errors_keep_their_type_and_words(
    name: str, error_type: str, status: int, words: str
) -> None:
    with pytest.raises(PromApiError) as error:
        parsed(name)
    assert error.value.error_type == error_type and error.value.status_code == status
    assert words in error.value.error and error.value.query_is_wrong


def test_an_answer_that_is_not_the_api_says_so() -> None:
    with pytest.raises(PromApiError) as error:
        parse_query(404, b"404 page not found\n")
    assert error.value.error_type == "not_api" and "404 page not found" in error.value.error


def test_threshold_modes_over_series_and_samples() -> None:
    result = parsed("query_vector")  # 60 and 91
    assert not judge(result, [Condition(op="<=", value=85)]).ok
    assert judge(result, [Condition(op="<=", value=85)], mode="any").ok
    assert judge(result, [Condition(op=">=", value=50), Condition(op="<=", value=95)]).ok
    failing = judge(result, [Condition(op="<=", value=85)])
    assert len(failing.failing) == 1 and 'node="gpu-node-002"' in failing.failing[0]


def test_prometheus_alerts_carry_state_active_at_and_value() -> None:
    alerts = parse_prometheus_alerts(*answer("alerts_prometheus"))
    states = {a.name: a.state for a in alerts}
    assert states == {"LabGpuXid": "firing", "LabGpuHot": "pending"}
    xid = next(a for a in alerts if a.name == "LabGpuXid")
    assert xid.value == "7.9e+01" and xid.active_at and xid.active_at.endswith("Z")
    assert xid.describe().startswith(
        'LabGpuXid{gpu="0", instance="' + xid.labels["instance"] + '", job="lab", node="gpu-node-002", '
        'severity="critical"} firing since '
    )
    assert xid.describe().endswith("(value 7.9e+01): Xid 79 on node gpu-node-002")


def test_alertmanager_alerts_and_its_errors() -> None:
    alerts = parse_alertmanager_alerts(*answer("alerts_alertmanager"))
    assert [(a.name, a.state, a.labels["node"]) for a in alerts] == [("LabGpuXid", "active", "gpu-node-002")]
    assert alerts[0].active_at is not None and alerts[0].summary == "Xid 79 on node gpu-node-002"
    with pytest.raises(PromApiError) as error:
        parse_alertmanager_alerts(*answer("alertmanager_bad_filter"))
    assert error.value.error_type == "bad_data" and "error parsing regexp" in error.value.error


def test_label_matchers_are_equal_and_anchored_re2() -> None:
    alerts = parse_prometheus_alerts(*answer("alerts_prometheus"))
    assert [a.name for a in matching(alerts, {"node": "gpu-node-002"}, {})] == ["LabGpuHot", "LabGpuXid"]
    assert [a.name for a in matching(alerts, {}, {"alertname": "Lab.*Xid"})] == ["LabGpuXid"]
    assert matching(alerts, {}, {"alertname": "Xid"}) == []  # anchored: not a substring search
    assert matching(alerts, {"node": "gpu-node-001"}, {}) == []
    assert [a.name for a in matching(alerts, {"missing": ""}, {})] == ["LabGpuHot", "LabGpuXid"]


def test_args_refuse_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        PromQueryArgs(url="http://p:9090", query="up", range="ten minutes")
    with pytest.raises(ValueError, match="not an RE2 regular expression"):
        PromAlertsArgs(url="http://p:9090", match_re={"alertname": "(?=x)"})
    with pytest.raises(ValueError, match="include_pending is Prometheus's"):
        PromAlertsArgs(url="http://am:9093", api="alertmanager", include_pending=True)
    args = PromQueryArgs(url="http://p:9090", query="up", expect={"op": "<", "value": 5}, max=4, min=1)
    assert [str(c) for c in args.conditions()] == ["< 5", "<= 4", ">= 1"]
    assert parse_duration("1h30m") == 5400 and parse_duration("250ms") == 0.25
