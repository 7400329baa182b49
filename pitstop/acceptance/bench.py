"""`METRIC <name>=<value> <unit>` lines: how the representative training and inference
benchmarks (validation kind `bench`) report their figures at the end of their log."""

from __future__ import annotations

import re

_METRIC = re.compile(r"^\s*METRIC\s+([A-Za-z_][\w.]*)\s*=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")


def parse_metrics(log: str) -> dict[str, float]:
    """Every METRIC line of the log; a name reported twice keeps its last value."""
    metrics: dict[str, float] = {}
    for line in log.splitlines():
        match = _METRIC.match(line)
        if match:
            metrics[match.group(1)] = float(match.group(2))
    return metrics
