"""A stage's `waves` as planned: each host's wave, the order the waves run in, and canary coverage.

Decided once, when the run is planned, and recorded with the plan: the workflow only walks the
waves in this order. A host with no wave, or a value of a `waves.canary.cover` expression (a GPU
product, a pool) that no host of the canary stage has, refuses the plan: a rollout by failure
domain that guessed a host's domain, or a widen whose canary never ran on a product it is about
to change, is the mistake waves exist to prevent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pitstop.contracts import CanaryCover, PlannedStage
from pitstop.runbook import TemplateError
from pitstop.runbook.models import Stage

# (expression, host, stage, -e vars) -> the expression rendered with that host's variables.
HostRenderer = Callable[[str, str, Stage, dict[str, Any]], str]

# Hosts named in a refusal; the rest are counted.
NAMED_HOSTS = 3


def plan_waves(
    planned: PlannedStage,
    stage: Stage,
    earlier: list[PlannedStage],
    render_host: HostRenderer,
    extra_vars: dict[str, Any],
    observe_seconds: float | None,
    *,
    limited: bool = False,
) -> PlannedStage:
    waves = stage.waves
    assert waves is not None
    wave_of = _wave_of(planned, stage, render_host, extra_vars)
    keys = list(dict.fromkeys(wave_of[h] for h in planned.hosts))
    first = [k for k in waves.order if k in keys]
    order = [*dict.fromkeys(first), *(k for k in keys if k not in first)]
    warnings = list(planned.warnings)
    absent = [k for k in waves.order if k not in keys]
    if absent and not limited:
        # A typo would quietly run the domain meant to go first in inventory order.
        raise ValueError(
            f"stage {stage.name!r}: waves.order names {', '.join(repr(k) for k in absent)}, which no host "
            f"of the stage is in (its waves: {', '.join(repr(k) for k in keys)})"
        )
    if absent:
        warnings.append(
            f"stage '{stage.name}': waves.order names {', '.join(repr(k) for k in absent)}, "
            "which no host of this run (--limit) is in"
        )
    coverage = _coverage(planned, stage, earlier, render_host, extra_vars) if waves.canary else []
    return planned.model_copy(
        update={
            "waves": order,
            "wave_of": wave_of,
            "wave_observe_seconds": observe_seconds,
            "coverage": coverage,
            "warnings": warnings,
        }
    )


def _wave_of(
    planned: PlannedStage, stage: Stage, render_host: HostRenderer, extra_vars: dict[str, Any]
) -> dict[str, str]:
    assert stage.waves is not None
    expression = stage.waves.by
    wave_of: dict[str, str] = {}
    for host in planned.hosts:
        if expression is None:
            # The stage's failure domain (its `rolling.domain`, or the host's failure_domain).
            value = planned.domains.get(host, "")
        else:
            try:
                value = render_host(expression, host, stage, extra_vars)
            except TemplateError as exc:
                raise ValueError(f"waves.by of stage {stage.name!r} for host {host}: {exc}") from None
        if any(c == "@" or c.isspace() or not c.isprintable() for c in value.strip()):
            # A wave names its gate (`<stage>:wave-<wave>`) and its children; `@` is how a
            # host's gate is named, and spaces cannot be typed as one argument.
            raise ValueError(
                f"stage {stage.name!r}: host {host} is in wave {value.strip()!r}; a wave name may not "
                "contain '@', spaces or control characters"
            )
        if not value.strip():
            said = expression or "its failure domain (rolling.domain, or the host's failure_domain)"
            raise ValueError(
                f"stage {stage.name!r} runs in waves by {said}, which is empty for host {host}: "
                "give every host of the stage its wave (a host with no domain could land in any wave)"
            )
        wave_of[host] = value.strip()
    return wave_of


def _coverage(
    planned: PlannedStage,
    stage: Stage,
    earlier: list[PlannedStage],
    render_host: HostRenderer,
    extra_vars: dict[str, Any],
) -> list[CanaryCover]:
    assert stage.waves is not None and stage.waves.canary is not None
    canary = stage.waves.canary
    canary_stage = next((s for s in earlier if s.name == canary.stage), None)
    if canary_stage is None:  # the loader refuses a canary stage that is not an earlier stage
        raise ValueError(f"stage {stage.name!r}: waves.canary.stage {canary.stage!r} is not an earlier stage")
    covers: list[CanaryCover] = []
    missing: list[str] = []
    for expression in canary.cover:
        targets = _by_value(expression, planned.hosts, stage, render_host, extra_vars)
        canaries = _by_value(expression, canary_stage.hosts, stage, render_host, extra_vars)
        lacking: list[str] = []
        for value, hosts in targets.items():
            found = canaries.get(value, [])
            covers.append(
                CanaryCover(cover=expression, value=value, hosts=len(hosts), example=hosts[0], canaries=found)
            )
            if not found:
                lacking.append(f"{expression} = {value!r} on {_some(hosts)}")
        if lacking:
            have = ", ".join(repr(v) for v in canaries) or "nothing: it has no hosts"
            missing.append(f"{'; '.join(lacking)} (the canaries give {have})")
    if missing:
        raise ValueError(
            f"stage {stage.name!r} would change hosts that no canary in stage {canary.stage!r} "
            f"stands for (waves.canary.cover): {'; '.join(missing)}. Add a host with each of these "
            f"values to stage {canary.stage!r}, or leave those hosts out of this run"
        )
    return covers


def _by_value(
    expression: str, hosts: list[str], stage: Stage, render_host: HostRenderer, extra_vars: dict[str, Any]
) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for host in hosts:
        try:
            value = render_host(expression, host, stage, extra_vars).strip()
        except TemplateError as exc:
            raise ValueError(f"waves.canary.cover of stage {stage.name!r} for host {host}: {exc}") from None
        out.setdefault(value, []).append(host)
    return out


def _some(hosts: list[str]) -> str:
    named = ", ".join(hosts[:NAMED_HOSTS])
    more = f" and {len(hosts) - NAMED_HOSTS} more" if len(hosts) > NAMED_HOSTS else ""
    return f"{len(hosts)} host{'s' if len(hosts) != 1 else ''} ({named}{more})"
