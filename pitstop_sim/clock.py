"""Simulated time: every delay in a scenario is in simulated seconds, divided by the time scale.

With `time_scale: 60` a 3-minute reboot takes 3 real seconds, so a one-hour maintenance run
rehearses in a minute. Object timestamps stay wall-clock (clients compare them with their
own clocks); only the controllers' delays are scaled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime


class SimClock:
    def __init__(self, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError(f"time scale must be positive, got {time_scale}")
        self.time_scale = time_scale
        self._start = time.monotonic()

    def now(self) -> float:
        """Simulated seconds since the cluster started."""
        return (time.monotonic() - self._start) * self.time_scale

    def real_seconds(self, sim_seconds: float) -> float:
        return max(0.0, sim_seconds) / self.time_scale

    async def sleep(self, sim_seconds: float) -> None:
        await asyncio.sleep(self.real_seconds(sim_seconds))

    def call_later(self, sim_seconds: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        """Run `callback` on the running loop after `sim_seconds` of simulated time."""
        return asyncio.get_running_loop().call_later(self.real_seconds(sim_seconds), callback)


# The last second formatted for "now" (seeding a fleet stamps 100,000s of objects a second).
_now_stamp: tuple[int, str] = (-1, "")


def rfc3339(moment: datetime | None = None) -> str:
    """`2024-05-01T10:00:00Z`: the apiserver's timestamp format (second precision)."""
    global _now_stamp
    if moment is None:
        second = int(time.time())
        if _now_stamp[0] != second:
            _now_stamp = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        return _now_stamp[1]
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(moment: datetime | None = None) -> str:
    """MicroTime, used by leases and events (`2024-05-01T10:00:00.123456Z`)."""
    moment = moment or datetime.now(UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def human_age(created: str | None, now: datetime | None = None) -> str:
    """kubectl's AGE column (`5s`, `3m20s`, `4h`, `12d`), as the apiserver's table printer writes it."""
    if not created:
        return "<unknown>"
    now = now or datetime.now(UTC)
    seconds = int((now - parse_rfc3339(created)).total_seconds())
    return human_duration(seconds)


def human_duration(seconds: int) -> str:
    # Same breakpoints as k8s.io/apimachinery/pkg/util/duration.HumanDuration.
    if seconds < 0:
        return "<invalid>"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        rest_min = minutes % 60
        return f"{hours}h{rest_min}m" if rest_min else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest_h = hours % 24
        return f"{hours // 24}d{rest_h}h" if rest_h else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24
        rest_d = days % 365
        return f"{days // 365}y{rest_d}d" if rest_d else f"{days // 365}y"
    return f"{hours // 24 // 365}y"
