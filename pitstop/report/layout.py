"""What the report needs of a run's plan and not in its RunReport: each host's failure domain,
each stage's per-domain limit and its waves. Pure."""

from __future__ import annotations

from pydantic import BaseModel, Field

from pitstop.contracts import Plan


class StageLayout(BaseModel):
    name: str
    hosts: list[str] = Field(default_factory=list)
    # Host -> failure domain, as the plan resolved `rolling.domain` (empty: no domains).
    domains: dict[str, str] = Field(default_factory=dict)
    max_unavailable_per_domain: int | None = None
    waves: list[str] = Field(default_factory=list)
    wave_of: dict[str, str] = Field(default_factory=dict)


class RunLayout(BaseModel):
    """Kept beside a report (its data file) so that a report can be redrawn without Temporal."""

    stages: list[StageLayout] = Field(default_factory=list)

    def stage(self, name: str) -> StageLayout | None:
        return next((s for s in self.stages if s.name == name), None)

    def domain_of(self, host: str) -> str | None:
        return next((s.domains[host] for s in self.stages if host in s.domains), None)


def layout_from_plan(plan: Plan) -> RunLayout:
    rules = {stage.name: stage for stage in plan.runbook.stages}
    stages: list[StageLayout] = []
    for planned in plan.stages:
        rule = rules.get(planned.name)
        rolling = rule.rolling if rule is not None else None
        stages.append(
            StageLayout(
                name=planned.name,
                hosts=list(planned.hosts),
                domains=dict(planned.domains),
                max_unavailable_per_domain=rolling.max_unavailable_per_domain if rolling else None,
                waves=list(planned.waves),
                wave_of=dict(planned.wave_of),
            )
        )
    return RunLayout(stages=stages)
