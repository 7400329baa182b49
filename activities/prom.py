"""`prom.query` and `prom.alerts`: Prometheus and Alertmanager as a runbook's eyes.

Before any request: the URL's endpoint must be in the worker policy's `prometheus.endpoints`
(`pitstop.policy.prometheus`) and a `token` secret must be granted as `prometheus_token` for that
endpoint; the token goes in the Authorization header and nowhere else (the worker scrubs it
from errors and logs). Answers map onto pitstop's errors: a query Prometheus refuses
(`bad_data`, `execution`) is InvalidArgs, a refused token Unauthorized (neither retried); no
answer, a timeout or a server error is PrometheusUnavailable, retried.
"""

from __future__ import annotations

import time
from typing import Any, NoReturn

from activities.module_activity import module_activity
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.module_args.prom import ALERTS, QUERY, PromAlertsArgs, PromEndpointArgs, PromQueryArgs
from pitstop.policy.prometheus import check_prometheus
from pitstop.prom import http
from pitstop.prom.alerts import matching, parse_alertmanager_alerts, parse_prometheus_alerts
from pitstop.prom.durations import parse_duration
from pitstop.prom.response import PromApiError, QueryResult, finite_or_none, parse_query, series_name
from pitstop.prom.thresholds import judge
from pitstop.secrets import SecretNotFound, resolve_secret


def _token(module: str, args: PromEndpointArgs, endpoint: str) -> str | None:
    if args.token is None:
        return None
    try:
        return resolve_secret(args.token, "prometheus_token", what=f"{module}: token", endpoints=[endpoint])
    except SecretNotFound as exc:
        fail(ErrorType.INVALID_ARGS, f"{module}: token: {exc}")


def _send(module: str, args: PromEndpointArgs, path: str, params: dict[str, str]) -> http.Answer:
    endpoint = check_prometheus(args.url, module)
    token = _token(module, args, endpoint)
    url = args.url.rstrip("/") + path
    try:
        answer = http.get(
            url, params, token=token, timeout=args.request_timeout_seconds, verify=args.verify_tls
        )
    except http.PromUnreachable as exc:
        fail(ErrorType.PROMETHEUS_UNAVAILABLE, f"{module}: {url}: {exc}", non_retryable=False)
    except http.BodyTooLarge as exc:
        fail(ErrorType.INVALID_ARGS, f"{module}: {url}: {exc}; narrow the query")
    if 300 <= answer.status_code < 400:
        fail(
            ErrorType.INVALID_ARGS,
            f"{module}: {url} answered {answer.status_code}, a redirect to {answer.location or '?'}, "
            "which is not followed; give the URL it names (and allow its endpoint)",
        )
    if answer.status_code in (401, 403):
        fail(
            ErrorType.UNAUTHORIZED,
            f"{module}: {url} answered {answer.status_code}: the token was refused or is missing "
            "(token: {secret: NAME}, granted as prometheus_token)",
        )
    return answer


def _api_error(module: str, url: str, exc: PromApiError) -> NoReturn:
    text = f"{module}: {url} answered {exc.error_type}: {exc.error}"
    if exc.query_is_wrong:
        fail(ErrorType.INVALID_ARGS, text)
    if exc.error_type == "not_api" and exc.status_code is not None and exc.status_code < 500:
        fail(ErrorType.INVALID_ARGS, f"{text}; is the URL (and its path prefix) the server's?")
    fail(ErrorType.PROMETHEUS_UNAVAILABLE, text, non_retryable=False)


def _series_data(result: QueryResult, keep: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for series in result.series[:keep]:
        numbers = [s.number for s in series.samples]
        finite = [n for n in numbers if finite_or_none(n) is not None]
        rows.append(
            {
                "name": series_name(series.labels),
                "labels": series.labels,
                "value": finite_or_none(series.last.number),
                "raw": series.last.raw,
                "at": series.last.at,
                "samples": len(series.samples),
                "min": min(finite) if finite else None,
                "max": max(finite) if finite else None,
            }
        )
    return rows


@module_activity(QUERY)
def query(call: ModuleCall, args: PromQueryArgs) -> ModuleResult:
    params: dict[str, str] = {"query": args.query}
    if args.timeout:
        params["timeout"] = args.timeout
    if args.range is not None:
        end = time.time()
        params.update(start=f"{end - parse_duration(args.range):.3f}", end=f"{end:.3f}", step=args.step)
        path = "/api/v1/query_range"
    else:
        if args.time:
            params["time"] = args.time
        path = "/api/v1/query"
    answer = _send(call.module, args, path, params)
    try:
        result = parse_query(answer.status_code, answer.body)
    except PromApiError as exc:
        _api_error(call.module, args.url.rstrip("/") + path, exc)
    conditions = args.conditions()
    if result.result_type == "string" and conditions:
        fail(ErrorType.INVALID_ARGS, f"{call.module}: the query returns a string; a threshold needs numbers")
    verdict = judge(result, conditions, samples=args.samples, mode=args.mode, on_empty=args.on_empty)
    data: dict[str, Any] = {
        "query": args.query,
        "result_type": result.result_type,
        "count": len(result.series),
        "series": _series_data(result, args.max_series_reported),
        "truncated": max(0, len(result.series) - args.max_series_reported),
        "ok": verdict.ok,
        "failing": list(verdict.failing),
        "warnings": list(result.warnings),
    }
    if result.text is not None:
        data["text"] = result.text
    msg = f"{args.query}: {verdict.msg}"
    if result.warnings:
        msg += f" (Prometheus warns: {'; '.join(result.warnings)})"
    return ModuleResult(failed=not verdict.ok, msg=msg, data=data)


@module_activity(ALERTS)
def alerts(call: ModuleCall, args: PromAlertsArgs) -> ModuleResult:
    if args.api == "alertmanager":
        path = "/api/v2/alerts"
        params = {
            "active": str(args.active).lower(),
            "silenced": str(args.silenced).lower(),
            "inhibited": str(args.inhibited).lower(),
        }
        answer = _send(call.module, args, path, params)
        parse = parse_alertmanager_alerts
    else:
        path = "/api/v1/alerts"
        answer = _send(call.module, args, path, {})
        parse = parse_prometheus_alerts
    try:
        every = parse(answer.status_code, answer.body)
    except PromApiError as exc:
        _api_error(call.module, args.url.rstrip("/") + path, exc)
    if args.api == "prometheus" and not args.include_pending:
        every = [a for a in every if a.state == "firing"]
    found = matching(every, args.match, args.match_re)
    data = {
        "alerts": [a.model_dump(mode="json") for a in found],
        "count": len(found),
        "seen": len(every),
    }
    filters = ", ".join(
        [f'{k}="{v}"' for k, v in sorted(args.match.items())]
        + [f'{k}=~"{v}"' for k, v in sorted(args.match_re.items())]
    )
    where = f" matching {{{filters}}}" if filters else ""
    if not found:
        return ModuleResult(msg=f"no alert{where} ({len(every)} seen)", data=data)
    named = "; ".join(a.describe() for a in found[:10])
    more = f" (and {len(found) - 10} more)" if len(found) > 10 else ""
    return ModuleResult(
        failed=args.on_match == "fail", msg=f"{len(found)} alert(s){where}: {named}{more}", data=data
    )


PROM_ACTIVITIES = [query, alerts]
