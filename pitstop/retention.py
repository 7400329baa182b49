"""Which etcd snapshots to keep, and what they are called: pure functions, no I/O.

Snapshot objects are named `<prefix>/<cluster>/<YYYY>/<MM>/<DD>/<cluster>-<YYYYmmddTHHMMSSZ>.db`
(UTC, the moment the snapshot was taken), so a listing sorts by time and a person can find
"the backup of Tuesday night" without tooling.

Two policies:

* exponential — every snapshot of the last hour; the newest of each UTC hour for the last day;
  the newest of each UTC day for the last week; the newest of each ISO week for the last
  30 days; nothing older.
* keep_last N — the N newest.

Both always keep the newest snapshot and the newest *verified* one (a snapshot a restore
drill proved restorable), whatever their age: retention must never leave a cluster without
its last good backup, even after backups stopped for a month.

Only real snapshots count. A key is a claim anyone with write access to the bucket can make,
so "the newest" is the newest by the store's own upload time (`uploaded_at`, S3's
LastModified), and a snapshot is left out of retention altogether (never counted, never
newest, never deleted, reported in `RetentionPlan.ignored`) when:
* its key's time is in the future, or after the store received it (beyond `CLOCK_SKEW`): a
  snapshot cannot be taken after it was uploaded, and a future-dated key would otherwise be
  "the newest" and make the last real snapshot eligible for deletion;
* the caller found it damaged or foreign (`problem`: no sha256 metadata as `storage.upload`
  writes it, or a size that differs from what upload recorded).

A snapshot's tier comes from its age; inside a tier, buckets are calendar buckets (UTC hour,
UTC day, ISO week), not windows sliding with `now`. So retention is stable: a snapshot kept as
the newest of its bucket is deleted by a later run only once that reason has lapsed — it
aged out of the tier, or a newer snapshot of the same bucket aged into it.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

KEY_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
# How far the worker's, the store's and the snapshot taker's clocks may disagree.
CLOCK_SKEW = timedelta(minutes=15)
SNAPSHOT_SUFFIX = ".db"
_CLUSTER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_KEY_TIME = re.compile(r"-(\d{8}T\d{6}Z)\.db$")

KeepReason = Literal["last_hour", "hourly", "daily", "weekly", "keep_last", "newest", "newest_verified"]


# ------------------------------------------------------------------ naming


def check_cluster_name(cluster: str) -> str:
    if not _CLUSTER.fullmatch(cluster):
        raise ValueError(
            f"cluster name {cluster!r} cannot be used in an object key; use letters, digits, '.', '_' "
            "and '-' (at most 63 characters, starting with a letter or digit)"
        )
    return cluster


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError(f"timestamp {moment.isoformat()} has no time zone; give it in UTC (…Z)")
    return moment.astimezone(UTC)


def cluster_prefix(prefix: str, cluster: str) -> str:
    """`<prefix>/<cluster>/`: everything retention and `storage.latest` look at."""
    head = prefix.strip("/")
    return f"{head}/{check_cluster_name(cluster)}/" if head else f"{check_cluster_name(cluster)}/"


def snapshot_key(prefix: str, cluster: str, taken_at: datetime) -> str:
    """`<prefix>/<cluster>/<YYYY>/<MM>/<DD>/<cluster>-<YYYYmmddTHHMMSSZ>.db`."""
    moment = _utc(taken_at)
    return (
        f"{cluster_prefix(prefix, cluster)}{moment:%Y/%m/%d}/"
        f"{cluster}-{moment.strftime(KEY_TIME_FORMAT)}{SNAPSHOT_SUFFIX}"
    )


def snapshot_time(key: str) -> datetime | None:
    """When the snapshot named `key` was taken, or None if the key is not a snapshot's name."""
    match = _KEY_TIME.search(key)
    if match is None:
        return None
    try:
        return datetime.strptime(match.group(1), KEY_TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def compact_time(moment: datetime) -> str:
    return _utc(moment).strftime(KEY_TIME_FORMAT)


# ------------------------------------------------------------------ policies


class ExponentialPolicy(BaseModel):
    """All of the last hour, hourly for a day, daily for a week, weekly for a month."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["exponential"] = "exponential"
    all_for: timedelta = timedelta(hours=1)
    hourly_for: timedelta = timedelta(days=1)
    daily_for: timedelta = timedelta(days=7)
    weekly_for: timedelta = timedelta(days=30)


class KeepLastPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["keep_last"] = "keep_last"
    keep_last: int = Field(ge=1)


Policy = ExponentialPolicy | KeepLastPolicy


@dataclass(frozen=True)
class Snapshot:
    key: str
    taken_at: datetime
    # A restore drill passed for it.
    verified: bool = False
    # When the store received it (S3 LastModified); None when unknown (then taken_at stands in).
    uploaded_at: datetime | None = None
    # Why the object is not a snapshot as `storage.upload` writes one (None: it is).
    problem: str | None = None

    @property
    def order(self) -> tuple[datetime, str]:
        """Newer sorts later; equal times are ordered by key so "the newest" is always one."""
        return (self.taken_at, self.key)

    @property
    def upload_order(self) -> tuple[datetime, datetime, str]:
        """By the store's upload time (a key's time is only a claim), then as `order`."""
        return (self.uploaded_at or self.taken_at, self.taken_at, self.key)


@dataclass(frozen=True)
class RetentionPlan:
    keep: dict[str, KeepReason]
    delete: list[Snapshot]
    newest: Snapshot | None
    newest_verified: Snapshot | None
    # key -> why retention left it alone (future-dated, damaged): never deleted, never counted.
    ignored: dict[str, str] = field(default_factory=dict)


def why_ignored(snapshot: Snapshot, now: datetime) -> str | None:
    """Why `snapshot` cannot count as a real snapshot (see the module docstring), or None."""
    if snapshot.problem:
        return snapshot.problem
    taken = _utc(snapshot.taken_at)
    if taken > _utc(now) + CLOCK_SKEW:
        return f"its key is dated {taken:%Y-%m-%dT%H:%M:%SZ}, in the future"
    if snapshot.uploaded_at is not None and taken > _utc(snapshot.uploaded_at) + CLOCK_SKEW:
        return (
            f"its key is dated {taken:%Y-%m-%dT%H:%M:%SZ}, after the store received it "
            f"({_utc(snapshot.uploaded_at):%Y-%m-%dT%H:%M:%SZ})"
        )
    return None


Tier = Literal["last_hour", "hourly", "daily", "weekly", "expired"]
_KEPT_AS: dict[Tier, KeepReason] = {
    "last_hour": "last_hour",
    "hourly": "hourly",
    "daily": "daily",
    "weekly": "weekly",
}


def tier_of(snapshot: Snapshot, now: datetime, policy: ExponentialPolicy) -> Tier:
    age = _utc(now) - _utc(snapshot.taken_at)
    if age < policy.all_for:  # includes the few minutes of clock skew `select` tolerates
        return "last_hour"
    if age < policy.hourly_for:
        return "hourly"
    if age < policy.daily_for:
        return "daily"
    if age < policy.weekly_for:
        return "weekly"
    return "expired"


def bucket_of(snapshot: Snapshot, tier: Tier) -> Hashable:
    """The calendar bucket a snapshot competes in within its tier (UTC)."""
    t = _utc(snapshot.taken_at)
    if tier == "hourly":
        return (t.year, t.month, t.day, t.hour)
    if tier == "daily":
        return t.date()
    if tier == "weekly":
        iso = t.isocalendar()
        return (iso.year, iso.week)
    return snapshot.key  # last_hour: every snapshot is its own bucket


def _newest(snapshots: Iterable[Snapshot]) -> Snapshot | None:
    return max(snapshots, key=lambda s: s.upload_order, default=None)


def select(snapshots: Iterable[Snapshot], policy: Policy, now: datetime) -> RetentionPlan:
    """What to keep (with the reason), what to delete (oldest first), and what to leave alone
    because it is not a real snapshot (`why_ignored`)."""
    ignored: dict[str, str] = {}
    items: list[Snapshot] = []
    for snapshot in sorted({s.key: s for s in snapshots}.values(), key=lambda s: s.order):
        reason = why_ignored(snapshot, now)
        if reason is None:
            items.append(snapshot)
        else:
            ignored[snapshot.key] = reason
    keep: dict[str, KeepReason] = {}
    if isinstance(policy, KeepLastPolicy):
        for snapshot in items[-policy.keep_last :]:
            keep[snapshot.key] = "keep_last"
    else:
        best: dict[tuple[Tier, Hashable], Snapshot] = {}
        for snapshot in items:  # oldest first: a later one in the same bucket replaces it
            tier = tier_of(snapshot, now, policy)
            if tier != "expired":
                best[(tier, bucket_of(snapshot, tier))] = snapshot
        for (tier, _), snapshot in best.items():
            keep[snapshot.key] = _KEPT_AS[tier]
    newest = _newest(items)
    newest_verified = _newest(s for s in items if s.verified)
    # Safety nets last, so the reason shown says why the snapshot survived when nothing else would.
    if newest is not None:
        keep.setdefault(newest.key, "newest")
    if newest_verified is not None:
        keep.setdefault(newest_verified.key, "newest_verified")
    delete = [s for s in items if s.key not in keep]
    return RetentionPlan(
        keep=keep, delete=delete, newest=newest, newest_verified=newest_verified, ignored=ignored
    )


__all__ = [
    "CLOCK_SKEW",
    "ExponentialPolicy",
    "KeepLastPolicy",
    "KeepReason",
    "Policy",
    "RetentionPlan",
    "Snapshot",
    "bucket_of",
    "check_cluster_name",
    "cluster_prefix",
    "compact_time",
    "select",
    "snapshot_key",
    "snapshot_time",
    "tier_of",
    "why_ignored",
]
