"""Alerts as Prometheus and Alertmanager list them, filtered by labels, named for people.

Prometheus `GET /api/v1/alerts` (docs/querying/api.md, "Alerts"): `data.alerts[]` with
`labels`, `annotations`, `state` (`firing` | `pending`), `activeAt` (RFC 3339) and `value` (a
string, as sample values are). Alertmanager `GET /api/v2/alerts` (its OpenAPI spec,
api/v2/openapi.yaml `gettableAlerts`): a JSON array of alerts with `labels`, `annotations`,
`startsAt`, `endsAt`, `updatedAt`, `fingerprint`, `receivers` and `status: {state: active |
suppressed | unprocessed, silencedBy, inhibitedBy}`; the server filters by the `active`,
`silenced` and `inhibited` query parameters.

Label matchers work as PromQL's: `match` is `=`, `match_re` is `=~` (RE2, anchored at both ends:
`Gpu.*` matches `GpuXidError`, not `NoGpuXid`), and a label an alert lacks is the empty string.
"""

from __future__ import annotations

from typing import Any, Literal

import re2  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict

from pitstop.prom.response import PromApiError, envelope

Api = Literal["prometheus", "alertmanager"]


class Alert(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str]
    state: str  # firing | pending (Prometheus); active | suppressed | unprocessed (Alertmanager)
    active_at: str | None = None  # Prometheus activeAt, Alertmanager startsAt
    value: str | None = None
    summary: str | None = None
    silenced_by: tuple[str, ...] = ()
    inhibited_by: tuple[str, ...] = ()

    def describe(self) -> str:
        """`GpuXidError{gpu="0", node="n1", severity="critical"} firing since <t> (value 79): summary`."""
        rest = ", ".join(f'{k}="{v}"' for k, v in sorted(self.labels.items()) if k != "alertname")
        text = f"{self.name}{{{rest}}} {self.state}"
        if self.active_at:
            text += f" since {self.active_at}"
        if self.value is not None:
            text += f" (value {self.value})"
        if self.summary:
            text += f": {self.summary}"
        return text


def compile_matcher(pattern: str) -> Any:
    """An RE2 pattern anchored as Prometheus anchors label regexes; ValueError when it is not RE2."""
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(f"^(?:{pattern})$", options)
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"{pattern!r} is not an RE2 regular expression: {detail}") from None


def _strings(mapping: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (mapping or {}).items()}


def parse_prometheus_alerts(status_code: int, body: bytes) -> list[Alert]:
    data = envelope(status_code, body).get("data") or {}
    alerts: list[Alert] = []
    for item in data.get("alerts") or []:
        labels = _strings(item.get("labels"))
        alerts.append(
            Alert(
                name=labels.get("alertname", ""),
                labels=labels,
                state=str(item.get("state") or ""),
                active_at=item.get("activeAt"),
                value=None if item.get("value") is None else str(item["value"]),
                summary=_strings(item.get("annotations")).get("summary"),
            )
        )
    return alerts


def parse_alertmanager_alerts(status_code: int, body: bytes) -> list[Alert]:
    import json

    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if status_code >= 400 or not isinstance(doc, list):
        # Alertmanager's errors are a JSON string or {code, message}; anything else is not its API.
        message = doc.get("message") if isinstance(doc, dict) else doc
        text = str(message) if message else body[:200].decode("utf-8", "replace").strip()
        kind = "bad_data" if status_code == 400 else "not_api" if status_code < 500 else "unavailable"
        raise PromApiError(kind, f"HTTP {status_code}: {text or '(empty body)'}", status_code)
    alerts: list[Alert] = []
    for item in doc:
        labels = _strings(item.get("labels"))
        status = item.get("status") or {}
        alerts.append(
            Alert(
                name=labels.get("alertname", ""),
                labels=labels,
                state=str(status.get("state") or ""),
                active_at=item.get("startsAt"),
                summary=_strings(item.get("annotations")).get("summary"),
                silenced_by=tuple(str(s) for s in status.get("silencedBy") or ()),
                inhibited_by=tuple(str(s) for s in status.get("inhibitedBy") or ()),
            )
        )
    return alerts


def matching(alerts: list[Alert], match: dict[str, str], match_re: dict[str, str]) -> list[Alert]:
    """The alerts whose labels meet every matcher, in a stable order (name, then labels)."""
    compiled = {label: compile_matcher(pattern) for label, pattern in match_re.items()}
    found = [
        a
        for a in alerts
        if all(a.labels.get(k, "") == v for k, v in match.items())
        and all(p.fullmatch(a.labels.get(k, "")) for k, p in compiled.items())
    ]
    return sorted(found, key=lambda a: (a.name, sorted(a.labels.items())))
