"""Retention keeps exactly what it promises (pitstop/retention.py), over random timestamps.

The properties restate the promise from the outside: tiers by age, calendar buckets computed
here independently of the implementation, and the two safety nets (newest, newest verified).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pitstop.retention import (
    ExponentialPolicy,
    KeepLastPolicy,
    Snapshot,
    select,
    snapshot_key,
    snapshot_time,
)

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
WEEK = timedelta(days=7)
MONTH = timedelta(days=30)


def _snap(now: datetime, age: timedelta, verified: bool = False, cluster: str = "prod") -> Snapshot:
    taken = now - age
    return Snapshot(key=snapshot_key("backups", cluster, taken), taken_at=taken, verified=verified)


nows = st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC))
# Ages in whole seconds from 10 minutes in the future (clock skew) to 45 days back; keys must be
# unique, as object keys are, so ages are drawn as a set.
ages = st.sets(st.integers(min_value=-600, max_value=45 * 86400), min_size=0, max_size=60)
snapshot_sets = st.tuples(nows, ages).flatmap(
    lambda t: st.tuples(
        st.just(t[0]),
        st.lists(st.booleans(), min_size=len(t[1]), max_size=len(t[1])).map(
            lambda flags, now=t[0], secs=sorted(t[1]): [
                _snap(now, timedelta(seconds=s), v) for s, v in zip(secs, flags, strict=True)
            ]
        ),
    )
)


def _newest(snaps: list[Snapshot], pred: Callable[[Snapshot], bool] = lambda s: True) -> Snapshot | None:
    chosen = [s for s in snaps if pred(s)]
    return max(chosen, key=lambda s: (s.taken_at, s.key)) if chosen else None


def _safety_nets(snaps: list[Snapshot]) -> set[str]:
    nets = {_newest(snaps), _newest(snaps, lambda s: s.verified)}
    return {s.key for s in nets if s is not None}


def _buckets(
    snaps: list[Snapshot],
    now: datetime,
    low: timedelta,
    high: timedelta,
    bucket: Callable[[datetime], Hashable],
) -> dict[Hashable, list[Snapshot]]:
    out: dict[Hashable, list[Snapshot]] = defaultdict(list)
    for s in snaps:
        if low <= now - s.taken_at < high:
            out[bucket(s.taken_at)].append(s)
    return out


@settings(max_examples=300, deadline=None)
@given(snapshot_sets)
def test_exponential_keeps_exactly_what_it_promises(case: tuple[datetime, list[Snapshot]]) -> None:
    now, snaps = case
    plan = select(snaps, ExponentialPolicy(), now)
    kept, deleted = set(plan.keep), {s.key for s in plan.delete}
    nets = _safety_nets(snaps)

    # Every snapshot is either kept or deleted, never both.
    assert kept | deleted == {s.key for s in snaps}
    assert not kept & deleted

    # All of the last hour (and anything from the future) is kept.
    for s in snaps:
        if now - s.taken_at < HOUR:
            assert s.key in kept

    # Hourly for a day, daily for a week, weekly for a month: in each calendar bucket of a tier
    # exactly the newest is kept; another one survives only as a safety net.
    tiers = [
        (HOUR, DAY, lambda t: (t.date(), t.hour)),
        (DAY, WEEK, lambda t: t.date()),
        (WEEK, MONTH, lambda t: tuple(t.isocalendar())[:2]),
    ]
    for low, high, bucket in tiers:
        for members in _buckets(snaps, now, low, high, bucket).values():
            newest = _newest(members)
            assert newest is not None and newest.key in kept
            extra = {s.key for s in members if s.key in kept} - {newest.key}
            assert extra <= nets

    # Nothing older than a month, except the safety nets.
    for s in snaps:
        if now - s.taken_at >= MONTH:
            assert (s.key in kept) == (s.key in nets)

    # The newest snapshot and the newest verified one are never deleted.
    assert nets <= kept


@settings(max_examples=200, deadline=None)
@given(snapshot_sets, st.integers(min_value=1, max_value=10))
def test_keep_last_keeps_the_n_newest_and_the_newest_verified(
    case: tuple[datetime, list[Snapshot]], n: int
) -> None:
    now, snaps = case
    plan = select(snaps, KeepLastPolicy(keep_last=n), now)
    newest_n = {s.key for s in sorted(snaps, key=lambda s: (s.taken_at, s.key))[-n:]}
    verified = _newest(snaps, lambda s: s.verified)
    expected = newest_n | ({verified.key} if verified else set())
    assert set(plan.keep) == expected
    assert {s.key for s in plan.delete} == {s.key for s in snaps} - expected


@settings(max_examples=200, deadline=None)
@given(snapshot_sets)
def test_a_second_pass_at_the_same_moment_deletes_nothing(case: tuple[datetime, list[Snapshot]]) -> None:
    now, snaps = case
    first = select(snaps, ExponentialPolicy(), now)
    survivors = [s for s in snaps if s.key in first.keep]
    assert select(survivors, ExponentialPolicy(), now).delete == []


def _tier(age: timedelta) -> str:
    if age < HOUR:
        return "last_hour"
    if age < DAY:
        return "hourly"
    if age < WEEK:
        return "daily"
    return "weekly" if age < MONTH else "expired"


_BUCKET: dict[str, Callable[[datetime], Hashable]] = {
    "hourly": lambda t: (t.date(), t.hour),
    "daily": lambda t: t.date(),
    "weekly": lambda t: tuple(t.isocalendar())[:2],
}


@settings(max_examples=200, deadline=None)
@given(snapshot_sets, st.integers(min_value=1, max_value=40 * 24))
def test_a_later_pass_deletes_a_kept_snapshot_only_once_its_reason_has_lapsed(
    case: tuple[datetime, list[Snapshot]], hours_later: int
) -> None:
    # Kept as the newest of its calendar hour/day/week, a snapshot goes only when it leaves
    # that tier or a newer snapshot of the same bucket has aged into the tier.
    now, snaps = case
    later = now + timedelta(hours=hours_later)
    first = select(snaps, ExponentialPolicy(), now)
    survivors = [s for s in snaps if s.key in first.keep]
    second = select(survivors, ExponentialPolicy(), later)
    for s in second.delete:
        reason = first.keep[s.key]
        if reason not in _BUCKET or _tier(later - s.taken_at) != reason:
            continue
        bucket = _BUCKET[reason]
        assert any(
            o.order > s.order
            and _tier(later - o.taken_at) == reason
            and bucket(o.taken_at) == bucket(s.taken_at)
            for o in survivors
        ), f"{s.key} deleted though still the newest of its {reason} bucket"


def test_a_worked_example_of_the_exponential_policy() -> None:
    now = datetime(2025, 3, 12, 12, 30, tzinfo=UTC)  # a Wednesday
    at = {
        "fresh-a": now - timedelta(minutes=10),
        "fresh-b": now - timedelta(minutes=50),
        "h-11:05": datetime(2025, 3, 12, 11, 5, tzinfo=UTC),  # 85 min old, hour 11
        "h-11:20": datetime(2025, 3, 12, 11, 20, tzinfo=UTC),  # newest of hour 11 in the hourly tier
        "h-09:00": datetime(2025, 3, 12, 9, 0, tzinfo=UTC),
        "d-10th-1": datetime(2025, 3, 10, 1, 0, tzinfo=UTC),
        "d-10th-2": datetime(2025, 3, 10, 23, 0, tzinfo=UTC),  # newest of the 10th
        "w-10-old": datetime(2025, 3, 3, 6, 0, tzinfo=UTC),  # 9 days: week 10, older
        "w-10-new": datetime(2025, 3, 4, 6, 0, tzinfo=UTC),  # week 10, newest
        "expired-verified": datetime(2025, 1, 2, tzinfo=UTC),
        "expired-plain": datetime(2025, 1, 3, tzinfo=UTC),
    }
    snaps = [Snapshot(key=k, taken_at=t, verified=(k == "expired-verified")) for k, t in at.items()]
    plan = select(snaps, ExponentialPolicy(), now)
    assert plan.keep == {
        "fresh-a": "last_hour",
        "fresh-b": "last_hour",
        "h-11:20": "hourly",
        "h-09:00": "hourly",
        "d-10th-2": "daily",
        "w-10-new": "weekly",
        "expired-verified": "newest_verified",
    }
    # Oldest first.
    assert [s.key for s in plan.delete] == ["expired-plain", "w-10-old", "d-10th-1", "h-11:05"]


def test_when_backups_stopped_long_ago_the_newest_is_still_kept() -> None:
    now = datetime(2025, 6, 1, tzinfo=UTC)
    snaps = [_snap(now, timedelta(days=d)) for d in (40, 41, 60)]
    plan = select(snaps, ExponentialPolicy(), now)
    assert plan.keep == {snaps[0].key: "newest"}


def test_snapshot_key_layout_and_round_trip() -> None:
    taken = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    key = snapshot_key("etcd-backups/", "prod-eu", taken)
    assert key == "etcd-backups/prod-eu/2025/03/04/prod-eu-20250304T050607Z.db"
    assert snapshot_time(key) == taken
    assert snapshot_time(key + ".drill-20250304T060000Z.json") is None


def test_snapshot_key_refuses_a_naive_time_and_a_bad_cluster_name() -> None:
    with pytest.raises(ValueError, match="has no time zone"):
        snapshot_key("p", "prod", datetime(2025, 1, 1))
    with pytest.raises(ValueError, match=r"cluster name 'prod/eu' cannot be used in an object key"):
        snapshot_key("p", "prod/eu", datetime(2025, 1, 1, tzinfo=UTC))


def test_keep_last_must_keep_at_least_one() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        KeepLastPolicy(keep_last=0)
