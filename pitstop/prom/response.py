"""Prometheus's query API answer as typed values.

The envelope (Prometheus docs/querying/api.md, "Format overview"; web/api/v1/api.go `Response`):
`{"status": "success"|"error", "data": ..., "errorType": ..., "error": ..., "warnings": [...]}`.
`data` is `{"resultType": "vector"|"matrix"|"scalar"|"string", "result": ...}`. Sample values
are JSON strings, because JSON has no NaN or infinities: "1", "1e+06", "NaN", "+Inf", "-Inf"
(Go's strconv.FormatFloat(v, 'f', -1, 64), which writes NaN, +Inf and -Inf so). Python's float()
reads every one of them; the string is kept as Prometheus wrote it.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

ResultType = Literal["vector", "matrix", "scalar", "string"]
# errorType values of web/api/v1/api.go: what the server says went wrong.
QUERY_ERRORS = ("bad_data", "execution")  # the query is wrong: no retry helps
SERVER_ERRORS = ("timeout", "canceled", "internal", "unavailable", "not_found", "too_many_requests")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class PromApiError(Exception):
    """Prometheus answered `status: error` (or not with its API at all)."""

    def __init__(self, error_type: str, error: str, status_code: int | None) -> None:
        super().__init__(f"{error_type}: {error}")
        self.error_type = error_type
        self.error = error
        self.status_code = status_code

    @property
    def query_is_wrong(self) -> bool:
        return self.error_type in QUERY_ERRORS


class Sample(_Frozen):
    at: float  # unix seconds, as Prometheus writes timestamps
    raw: str  # the value as Prometheus wrote it

    @property
    def number(self) -> float:
        return float(self.raw)


class Series(_Frozen):
    labels: dict[str, str]
    samples: tuple[Sample, ...]

    @property
    def last(self) -> Sample:
        return self.samples[-1]


class QueryResult(_Frozen):
    result_type: ResultType
    series: tuple[Series, ...] = ()
    text: str | None = None  # a `string` result
    warnings: tuple[str, ...] = ()


def _sample(pair: Any) -> Sample:
    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str)):
        raise PromApiError("bad_response", f'a sample is not [<unix_time>, "<value>"]: {pair!r:.200}', None)
    try:
        float(pair[1])
    except ValueError:
        raise PromApiError(
            "bad_response", f"a sample value is not a number: {pair[1]!r:.100}", None
        ) from None
    return Sample(at=float(pair[0]), raw=pair[1])


def _labels(item: dict[str, Any]) -> dict[str, str]:
    metric = item.get("metric") or {}
    return {str(k): str(v) for k, v in metric.items()}


def envelope(status_code: int, body: bytes) -> Any:
    """The `data` of a success envelope; PromApiError for an error envelope or a non-API answer."""
    try:
        doc = json.loads(body)
    except ValueError:
        snippet = body[:200].decode("utf-8", "replace").strip()
        raise PromApiError(
            "not_api",
            f"HTTP {status_code}, not a Prometheus API answer: {snippet or '(empty body)'}",
            status_code,
        ) from None
    if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
        raise PromApiError("not_api", f"HTTP {status_code}, not a Prometheus API envelope", status_code)
    if doc["status"] == "error":
        raise PromApiError(str(doc.get("errorType") or "unknown"), str(doc.get("error") or ""), status_code)
    return doc


def parse_query(status_code: int, body: bytes) -> QueryResult:
    """A `/api/v1/query` or `/api/v1/query_range` answer as a QueryResult (PromApiError if not)."""
    doc = envelope(status_code, body)
    data = doc.get("data") or {}
    kind = data.get("resultType")
    result = data.get("result")
    warnings = tuple(str(w) for w in doc.get("warnings") or ())
    if kind == "vector":
        series = tuple(Series(labels=_labels(i), samples=(_sample(i.get("value")),)) for i in result or [])
        return QueryResult(result_type="vector", series=series, warnings=warnings)
    if kind == "matrix":
        series = tuple(
            Series(labels=_labels(i), samples=tuple(_sample(p) for p in i.get("values") or []))
            for i in result or []
        )
        # A series with only native-histogram samples has no float `values`: nothing to judge.
        return QueryResult(
            result_type="matrix", series=tuple(s for s in series if s.samples), warnings=warnings
        )
    if kind == "scalar":
        return QueryResult(
            result_type="scalar", series=(Series(labels={}, samples=(_sample(result),)),), warnings=warnings
        )
    if kind == "string":
        text = result[1] if isinstance(result, list) and len(result) == 2 else str(result)
        return QueryResult(result_type="string", text=str(text), warnings=warnings)
    raise PromApiError("bad_response", f"unknown resultType {kind!r}", status_code)


def series_name(labels: dict[str, str]) -> str:
    """`name{a="1", b="2"}` as PromQL prints a series (labels sorted, `__name__` in front)."""
    name = labels.get("__name__", "")
    rest = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}" if rest or not name else name


def finite_or_none(value: float) -> float | None:
    """A number for history: JSON (and Temporal's payloads) have no NaN or infinities."""
    return value if math.isfinite(value) else None
