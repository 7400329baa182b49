"""Prometheus text exposition format 0.0.4: what every exporter the simulator imitates writes.

https://prometheus.io/docs/instrumenting/exposition_formats/ — `# HELP` and `# TYPE` once
per family, then one line per sample; label values escape backslash, double quote and
newline; HELP text escapes backslash and newline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

MetricType = Literal["counter", "gauge", "histogram", "untyped"]
Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    """One metric family; samples keep the label order they were added with (as exporters do)."""

    name: str
    type: MetricType
    help: str
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)

    def add(self, labels: Labels, value: float, suffix: str = "") -> None:
        self.samples.append((self.name + suffix, labels, value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 2**63:
        return str(int(value))
    return repr(value)


def render(families: list[Family]) -> str:
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for name, labels, value in family.samples:
            body = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
            lines.append(
                f"{name}{{{body}}} {format_value(value)}" if body else f"{name} {format_value(value)}"
            )
    return "\n".join(lines) + "\n"
