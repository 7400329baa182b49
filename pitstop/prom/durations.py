"""Prometheus duration strings (`5m`, `1h30m`, `90s`, `250ms`), as its model.ParseDuration reads
them: units in descending order, each at most once; y = 365d, w = 7d."""

from __future__ import annotations

import re

_UNITS = {"y": 365 * 86400.0, "w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_FORMAT = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus duration; ValueError saying what a duration looks like."""
    found = _FORMAT.match(text.strip())
    if not text.strip() or found is None or not any(found.groups()):
        raise ValueError(f"{text!r} is not a Prometheus duration (e.g. 30s, 5m, 1h30m)")
    return sum(float(n) * unit for n, unit in zip(found.groups(), _UNITS.values(), strict=True) if n)
