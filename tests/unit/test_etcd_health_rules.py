"""The etcd health rules (`pitstop/etcd_health.py`) on etcd 3.5.1's own outputs
(`tests/fixtures/real/etcd/`, captured from the binary the suite runs), and Prometheus's
histogram_quantile on the WAL fsync histogram."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pitstop.etcd_health import (
    alarm_names,
    histogram_quantile,
    judge,
    member_health,
    parse_metrics,
    window_buckets,
)

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "etcd"
ENDPOINT = "http://127.0.0.1:23790"
MEMBER = "8e9e05c52164694d"  # 10276657743932975437, the id etcd prints in decimal


def _json(name: str) -> Any:
    return json.loads((REAL / name).read_text())


def _judge(**overrides: Any) -> Any:
    rules: dict[str, Any] = {
        "expected_members": None,
        "max_db_ratio": 0.8,
        "max_fsync_p99_ms": 10.0,
        "max_leader_changes": None,
    }
    return rules | overrides


def test_the_metrics_etcd_exports_are_read() -> None:
    metrics = parse_metrics((REAL / "metrics_3.5.1.txt").read_text())
    assert metrics.has_leader is True and metrics.leader_changes == 1
    assert metrics.quota_bytes == 2_000_000 and metrics.db_bytes == 24576
    # Five fsyncs: four under 1 ms, the fifth under 4 ms (read from the file).
    assert metrics.fsync_buckets[0.001] == 4 and metrics.fsync_buckets[0.004] == 5
    assert metrics.fsync_buckets[math.inf] == 5


def test_histogram_quantile_as_prometheus_computes_it() -> None:
    buckets = parse_metrics((REAL / "metrics_3.5.1.txt").read_text()).fsync_buckets
    # rank 0.99 * 5 = 4.95 falls in (0.002, 0.004]: 0.002 + 0.002 * (4.95 - 4) / (5 - 4).
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.0039)
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.001 * 2.5 / 4)
    # Everything above the highest finite bound: that bound (Prometheus's rule for +Inf).
    assert histogram_quantile(0.99, {0.5: 0, 1.0: 0, math.inf: 3}) == 1.0
    assert histogram_quantile(0.99, {0.5: 0, math.inf: 0}) is None


def test_a_window_is_the_difference_of_two_scrapes_unless_the_counter_reset() -> None:
    assert window_buckets({0.001: 4, math.inf: 5}, {0.001: 4, math.inf: 9}) == {0.001: 0, math.inf: 4}
    assert window_buckets({0.001: 4, math.inf: 5}, {0.001: 1, math.inf: 1}) == {0.001: 1, math.inf: 1}


def test_a_healthy_member_has_no_problem() -> None:
    (entry,) = _json("status_healthy.json")
    metrics = parse_metrics((REAL / "metrics_3.5.1.txt").read_text())
    member = member_health(entry["Endpoint"], entry["Status"], metrics)
    assert (member.member_id, member.leader, member.version) == (MEMBER, MEMBER, "3.5.1")
    assert member.db_bytes == 20480 and member.db_ratio == pytest.approx(20480 / 2_000_000)
    assert member.fsync_p99_ms == pytest.approx(3.9)
    members = len(_json("member_list.json")["members"])
    health = judge(members, [member], alarm_names(_json("alarm_list_none.json")), **_judge())
    assert (health.members, health.answered, health.quorum, health.leader) == (1, 1, 1, MEMBER)
    assert health.problems == []
    slow = judge(members, [member], [], **_judge(max_fsync_p99_ms=2))
    said = f"{ENDPOINT}: WAL fsync p99 3.9 ms (at most 2 ms: the disk is too slow for etcd)"
    assert slow.problems == [said]


def test_nospace_is_an_alarm_and_the_database_is_near_its_quota() -> None:
    alarms = alarm_names(_json("alarm_list_nospace.json"))
    assert alarms == [f"NOSPACE on member {MEMBER}"]
    (entry,) = _json("status_nospace.json")
    metrics = parse_metrics((REAL / "metrics_3.5.1.txt").read_text())
    member = member_health(entry["Endpoint"], entry["Status"], metrics)
    health = judge(1, [member], alarms, **_judge())
    assert health.problems[0] == f"alarm NOSPACE on member {MEMBER}"
    assert health.problems[1].startswith(f"{ENDPOINT}: database 2035712 bytes is 102% of its quota 2000000")


def test_quorum_leaders_and_silent_members() -> None:
    (entry,) = _json("status_healthy.json")
    up = member_health("https://a:2379", entry["Status"], None)
    down_b = member_health("https://b:2379", None, None, error="context deadline exceeded")
    down_c = member_health("https://c:2379", None, None)
    lost = judge(3, [up, down_b, down_c], [], **_judge())
    assert lost.problems[0] == (
        "1 of 3 member(s) answered, quorum needs 2: https://b:2379 (context deadline exceeded), https://c:2379"
    )
    other = member_health("https://b:2379", {**entry["Status"], "leader": 1}, None)
    kept = judge(3, [up, other, down_c], [], **_judge(expected_members=3))
    assert kept.problems == [
        "https://c:2379 did not answer: no status",
        f"members name different leaders: 1, {MEMBER}",
    ]
