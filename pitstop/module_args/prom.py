"""Args of the `prom` family: PromQL queries and firing alerts, read from Prometheus and
Alertmanager (`activities/prom.py`). Both are read-only, so they run in check mode too, and both
fail the task when the answer is not what the runbook expects: a stage's
`observe` check, an `until` loop or an acceptance step can judge nodes by metrics."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from pitstop.errors import ErrorType, non_retryable_types
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults, SecretRef
from pitstop.prom.alerts import Api, compile_matcher
from pitstop.prom.durations import parse_duration
from pitstop.prom.thresholds import Condition, SamplesMode, SeriesMode


class PromEndpointArgs(ModuleArgs):
    url: str = Field(
        description="Base URL of the Prometheus (or Alertmanager) server, e.g. "
        "http://prometheus.monitoring:9090 (a route prefix or proxy path may follow). Its "
        "scheme://host:port must be in the worker policy's prometheus.endpoints."
    )
    token: SecretRef | None = Field(
        default=None,
        description="Bearer token, from a worker secret granted as prometheus_token (never in args or "
        "history).",
    )
    request_timeout_seconds: float = Field(
        default=30, gt=0, le=600, description="HTTP timeout of the request."
    )
    verify_tls: bool = Field(default=True, description="Check the server's TLS certificate (https).")

    @model_validator(mode="after")
    def _token_only_to_a_verified_server(self) -> Self:
        # Whoever answers an unverified handshake would get the granted bearer token.
        if self.token is not None and not self.verify_tls:
            raise ValueError(
                "a `token` goes only to a server whose certificate is verified (verify_tls: true)"
            )
        return self


class PromQueryArgs(PromEndpointArgs):
    """One PromQL query, judged per series; fails the task when the threshold is not met."""

    query: str = Field(min_length=1, description="PromQL expression.")
    range: str | None = Field(
        default=None,
        description="Query the last <range> (a Prometheus duration, e.g. 10m) with /api/v1/query_range; "
        "default: an instant query.",
    )
    step: str = Field(default="30s", description="Resolution of a range query (Prometheus duration).")
    time: str | None = Field(
        default=None,
        description="Evaluation time of an instant query (RFC 3339 or unix seconds; default now).",
    )
    timeout: str | None = Field(default=None, description="Prometheus's own evaluation timeout (duration).")
    expect: Condition | list[Condition] | None = Field(
        default=None, description="Condition(s) every judged sample must meet: {op: '<', value: 5}."
    )
    max: float | None = Field(default=None, description="Shorthand for expect {op: '<=', value: max}.")
    min: float | None = Field(default=None, description="Shorthand for expect {op: '>=', value: min}.")
    samples: SamplesMode = Field(
        default="all", description="Of a range query's samples per series: all, last or any must meet it."
    )
    mode: SeriesMode = Field(
        default="for_all", description="for_all: every series must meet the threshold; any: at least one."
    )
    on_empty: Literal["fail", "ok"] = Field(
        default="fail", description="An empty result fails (default: a typo returns nothing too) or passes."
    )
    max_series_reported: int = Field(
        default=100, ge=1, le=2000, description="Series kept in the result (history); the verdict sees all."
    )

    @field_validator("range", "step", "timeout")
    @classmethod
    def _durations(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value

    @model_validator(mode="after")
    def _range_fits(self) -> Self:
        if self.range is not None and self.time is not None:
            raise ValueError("`time` is for instant queries; a range query ends now")
        if self.range is not None and parse_duration(self.step) <= 0:
            raise ValueError("`step` must be more than 0")
        return self

    def conditions(self) -> list[Condition]:
        given = [] if self.expect is None else self.expect if isinstance(self.expect, list) else [self.expect]
        if self.max is not None:
            given.append(Condition(op="<=", value=self.max))
        if self.min is not None:
            given.append(Condition(op=">=", value=self.min))
        return given


class PromAlertsArgs(PromEndpointArgs):
    """Alerts that match the labels; fails the task when any does (or only reports them)."""

    api: Api = Field(
        default="prometheus",
        description="prometheus: GET /api/v1/alerts of a Prometheus; alertmanager: GET /api/v2/alerts.",
    )
    match: dict[str, str] = Field(
        default_factory=dict,
        description="Labels that must be equal, e.g. {node: '{{ inventory_hostname }}'}.",
    )
    match_re: dict[str, str] = Field(
        default_factory=dict, description="Labels that must match an RE2 regex, anchored (as PromQL's =~)."
    )
    include_pending: bool = Field(
        default=False, description="Prometheus: count pending alerts (their `for` not yet elapsed) too."
    )
    active: bool = Field(default=True, description="Alertmanager: include active alerts.")
    silenced: bool = Field(default=False, description="Alertmanager: include silenced alerts.")
    inhibited: bool = Field(default=False, description="Alertmanager: include inhibited alerts.")
    on_match: Literal["fail", "report"] = Field(
        default="fail", description="fail: the task fails when any alert matches; report: it only lists them."
    )

    @field_validator("match_re")
    @classmethod
    def _regexes(cls, value: dict[str, str]) -> dict[str, str]:
        for pattern in value.values():
            compile_matcher(pattern)
        return value

    @model_validator(mode="after")
    def _flags_fit_api(self) -> Self:
        if self.api == "alertmanager" and self.include_pending:
            raise ValueError("include_pending is Prometheus's; Alertmanager never receives pending alerts")
        return self


_RETRY = RetryDefaults(
    maximum_attempts=3,
    non_retryable_error_types=non_retryable_types(),
)

QUERY: ModuleSpec[PromQueryArgs] = ModuleSpec(
    name="prom.query",
    args_model=PromQueryArgs,
    summary="PromQL (instant or range) against Prometheus, judged per series against a threshold.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=2),
    retry=_RETRY,
)
ALERTS: ModuleSpec[PromAlertsArgs] = ModuleSpec(
    name="prom.alerts",
    args_model=PromAlertsArgs,
    summary="Firing alerts from Prometheus or Alertmanager matching labels; fails when any matches.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=2),
    retry=_RETRY,
)
# Regular activities, not local ones: a query is a network round trip that a Prometheus under
# load may make slow, and a regular activity's heartbeat and timeout are the server's to watch.
# Raised by both when nothing answers: retried (a Prometheus restarting is not a verdict).
UNAVAILABLE = ErrorType.PROMETHEUS_UNAVAILABLE

SPECS: list[ModuleSpec[Any]] = [QUERY, ALERTS]
