"""Upgrade acceptance (docs/upgrade-process.md "Acceptance by layer"): the catalogue of checks
per layer (`probes`), the benchmark log format (`bench`) and the pure judgement against the
pre-upgrade baseline (`judge`). The probes themselves run in `activities/acceptance.py`."""

from pitstop.acceptance.judge import CheckResult, Deviation, LayerResult, Measurement, Policy, Verdict, judge
from pitstop.acceptance.probes import CATALOGUE, LAYERS, CheckSpec, select

__all__ = [
    "CATALOGUE",
    "LAYERS",
    "CheckResult",
    "CheckSpec",
    "Deviation",
    "LayerResult",
    "Measurement",
    "Policy",
    "Verdict",
    "judge",
    "select",
]
