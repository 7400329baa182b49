"""Is an etcd cluster fit to be upgraded (or backed up): judged from what etcd itself says.

Inputs are etcd's own words: `etcdctl member list`, `endpoint status` and `alarm list` (JSON,
as etcd 3.5 prints them: `tests/fixtures/real/etcd/`) and each member's `/metrics`
(`etcd_server_*`, `etcd_mvcc_db_total_size_in_bytes`, the WAL fsync histogram). The rules are
etcd's operations guide's:

- quorum: more than half of the members must answer (a 3-member cluster survives one loss);
  every answering member must name the same leader;
- alarms: NOSPACE (the backend quota was reached: the cluster takes no writes) and CORRUPT
  (a member's data differs) stop an upgrade;
- db size against the quota: a database near `--quota-backend-bytes` raises NOSPACE under
  the writes an upgrade makes (CRD migrations, controller churn);
- leader changes: frequent elections mean an overloaded or partitioned cluster;
- WAL fsync p99: etcd's hardware guide wants it under 10 ms; slower disks make heartbeats
  miss and leaders change.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

# etcdserverpb.AlarmType (api/etcdserverpb/rpc.proto): NONE = 0, NOSPACE = 1, CORRUPT = 2.
ALARM_NAMES = {0: "NONE", 1: "NOSPACE", 2: "CORRUPT"}
FSYNC = "etcd_disk_wal_fsync_duration_seconds"


class MemberMetrics(BaseModel):
    """What one member's `/metrics` says (None: not exported)."""

    has_leader: bool | None = None
    leader_changes: float | None = None
    quota_bytes: float | None = None
    db_bytes: float | None = None
    # Cumulative WAL fsync histogram: upper bound (seconds) -> count.
    fsync_buckets: dict[float, float] = {}


class MemberHealth(BaseModel):
    endpoint: str
    answered: bool
    member_id: str = ""
    leader: str = ""
    version: str = ""
    db_bytes: int | None = None
    quota_bytes: int | None = None
    db_ratio: float | None = None
    leader_changes: int | None = None
    fsync_p99_ms: float | None = None
    error: str = ""


class EtcdHealth(BaseModel):
    members: int
    answered: int
    quorum: int
    leader: str
    alarms: list[str]
    per_member: list[MemberHealth]
    problems: list[str]


def parse_metrics(text: str) -> MemberMetrics:
    out = MemberMetrics()
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "etcd_server_has_leader":
                out.has_leader = sample.value == 1
            elif sample.name == "etcd_server_leader_changes_seen_total":
                out.leader_changes = sample.value
            elif sample.name == "etcd_server_quota_backend_bytes":
                out.quota_bytes = sample.value
            elif sample.name == "etcd_mvcc_db_total_size_in_bytes":
                out.db_bytes = sample.value
            elif sample.name == f"{FSYNC}_bucket":
                buckets[float(sample.labels["le"])] = sample.value
    out.fsync_buckets = buckets
    return out


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus's histogram_quantile over cumulative buckets (linear within the bucket; the
    +Inf bucket answers with the highest finite bound), None without observations."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    total = buckets[bounds[-1]]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def window_buckets(before: Mapping[float, float], after: Mapping[float, float]) -> dict[float, float]:
    """The observations between two scrapes (a counter reset leaves `after` as it is)."""
    if any(after.get(b, 0.0) < v for b, v in before.items()):
        return dict(after)
    return {b: v - before.get(b, 0.0) for b, v in after.items()}


def _hex(value: Any) -> str:
    # etcd prints member ids as decimal uint64 in JSON and as hex in its logs and etcdctl tables.
    try:
        return f"{int(value):x}"
    except (TypeError, ValueError):
        return str(value or "")


def alarm_names(alarm_list: Mapping[str, Any]) -> list[str]:
    """`etcdctl alarm list -w json`: "NOSPACE on member 8e9e05c52164694d"; no `alarms` key when none."""
    out = []
    for alarm in alarm_list.get("alarms") or []:
        kind = alarm.get("alarm")
        name = ALARM_NAMES.get(kind, str(kind)) if isinstance(kind, int) else str(kind)
        out.append(f"{name} on member {_hex(alarm.get('memberID'))}")
    return out


def member_health(
    endpoint: str,
    status: Mapping[str, Any] | None,
    metrics: MemberMetrics | None,
    error: str = "",
    window: Mapping[float, float] | None = None,
) -> MemberHealth:
    """One endpoint: its `endpoint status -w json` entry's `Status` and its metrics."""
    if status is None:
        return MemberHealth(endpoint=endpoint, answered=False, error=error)
    header = status.get("header") or {}
    db = status.get("dbSize")
    health = MemberHealth(
        endpoint=endpoint,
        answered=True,
        member_id=_hex(header.get("member_id")),
        leader=_hex(status.get("leader")),
        version=str(status.get("version") or ""),
        db_bytes=int(db) if db is not None else None,
    )
    if metrics is not None:
        if metrics.quota_bytes:
            health.quota_bytes = int(metrics.quota_bytes)
            size = health.db_bytes if health.db_bytes is not None else metrics.db_bytes
            if size is not None:
                health.db_ratio = size / metrics.quota_bytes
        if metrics.leader_changes is not None:
            health.leader_changes = int(metrics.leader_changes)
        p99 = histogram_quantile(0.99, window if window is not None else metrics.fsync_buckets)
        health.fsync_p99_ms = None if p99 is None else round(p99 * 1000, 3)
    return health


def judge(
    member_count: int,
    per_member: Sequence[MemberHealth],
    alarms: Sequence[str],
    *,
    expected_members: int | None,
    max_db_ratio: float,
    max_fsync_p99_ms: float,
    max_leader_changes: int | None,
) -> EtcdHealth:
    answered = [m for m in per_member if m.answered]
    quorum = member_count // 2 + 1
    problems: list[str] = []
    if expected_members is not None and member_count != expected_members:
        problems.append(f"{member_count} member(s), expected {expected_members}")
    if len(answered) < quorum:
        silent = ", ".join(
            f"{m.endpoint} ({m.error})" if m.error else m.endpoint for m in per_member if not m.answered
        )
        problems.append(
            f"{len(answered)} of {member_count} member(s) answered, quorum needs {quorum}"
            + (f": {silent}" if silent else "")
        )
    if len(answered) >= quorum:
        # Quorum holds, but one more loss may end it: an upgrade restarts members one by one.
        silent_now = [m for m in per_member if not m.answered]
        problems += [f"{m.endpoint} did not answer: {m.error or 'no status'}" for m in silent_now]
    leaders = {m.leader for m in answered if m.leader and m.leader != "0"}
    if answered and not leaders:
        problems.append("no member knows a leader")
    elif len(leaders) > 1:
        problems.append(f"members name different leaders: {', '.join(sorted(leaders))}")
    problems += [f"alarm {a}" for a in alarms]
    for m in answered:
        if m.db_ratio is not None and m.db_ratio > max_db_ratio:
            problems.append(
                f"{m.endpoint}: database {m.db_bytes} bytes is {m.db_ratio:.0%} of its quota "
                f"{m.quota_bytes} (at most {max_db_ratio:.0%}: defragment or raise --quota-backend-bytes)"
            )
        if m.fsync_p99_ms is not None and m.fsync_p99_ms > max_fsync_p99_ms:
            problems.append(
                f"{m.endpoint}: WAL fsync p99 {m.fsync_p99_ms:g} ms (at most {max_fsync_p99_ms:g} ms: "
                "the disk is too slow for etcd)"
            )
        if (
            max_leader_changes is not None
            and m.leader_changes is not None
            and m.leader_changes > max_leader_changes
        ):
            problems.append(
                f"{m.endpoint}: {m.leader_changes} leader changes seen (at most {max_leader_changes})"
            )
    return EtcdHealth(
        members=member_count,
        answered=len(answered),
        quorum=quorum,
        leader=next(iter(leaders)) if len(leaders) == 1 else "",
        alarms=list(alarms),
        per_member=list(per_member),
        problems=problems,
    )
