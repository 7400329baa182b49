"""Resolved secret values never leave an activity in its error, its result or a log line.

`pitstop.secrets.resolve_secret` records each value it hands out in the running activity's
scope (a context variable the worker's activity interceptor sets; sync activities run in a
copy of that context, which shares the same holder). When the activity ends, the interceptor
replaces every occurrence of a recorded value — whole, stripped, escaped as repr/JSON would
print it, and each long line of a multi-line value such as a PEM key — in:

* the error: an exception whose message, details or cause chain holds a value is replaced by
  an ApplicationError of the same type and retry behaviour with the text scrubbed and no
  chain (botocore quoting an access key, paramiko quoting key material);
* the result: every string in the returned model;
* log lines emitted while the activity runs (`ScrubLogFilter` on the worker's handlers).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from temporalio import exceptions as temporal_exceptions
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

MIN_VALUE = 4  # shorter values would mangle unrelated text; real secrets are longer
MIN_LINE = 8


class SecretValues:
    """The secret values one activity resolved, and how to remove them from text."""

    def __init__(self) -> None:
        self._fragments: dict[str, str] = {}

    def __bool__(self) -> bool:
        return bool(self._fragments)

    def add(self, name: str, value: str) -> None:
        if len(value.strip()) < MIN_VALUE:
            return
        marker = f"[redacted secret {name!r}]"
        candidates = {value, value.strip(), repr(value)[1:-1], json.dumps(value)[1:-1]}
        lines = [line.strip() for line in value.splitlines()]
        candidates.update(line for line in lines if len(line) >= MIN_LINE)
        body = "".join(line for line in lines if not line.startswith("-----"))
        if len(body) >= MIN_LINE:
            candidates.add(body)
        for fragment in candidates:
            if len(fragment.strip()) >= MIN_VALUE:
                self._fragments.setdefault(fragment, marker)

    def scrub(self, text: str) -> str:
        for fragment in sorted(self._fragments, key=len, reverse=True):
            if fragment in text:
                text = text.replace(fragment, self._fragments[fragment])
        return text

    def holds(self, text: str) -> bool:
        return any(fragment in text for fragment in self._fragments)

    def scrub_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {self.scrub_value(k): self.scrub_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.scrub_value(v) for v in value)
        return value


_SCOPE: contextvars.ContextVar[SecretValues | None] = contextvars.ContextVar(
    "pitstop_secret_values", default=None
)


def record_secret(name: str, value: str) -> None:
    """Remember a resolved value for scrubbing (a no-op outside an activity scope)."""
    values = _SCOPE.get()
    if values is not None:
        values.add(name, value)


def current_values() -> SecretValues | None:
    return _SCOPE.get()


@contextlib.contextmanager
def secret_scope() -> Iterator[SecretValues]:
    """A fresh scope of recorded values (what the interceptor opens per activity)."""
    values = SecretValues()
    token = _SCOPE.set(values)
    try:
        yield values
    finally:
        _SCOPE.reset(token)


# --- errors and results ------------------------------------------------------------------------


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def _texts(exc: BaseException) -> Iterator[str]:
    for error in _chain(exc):
        yield str(error)
        if isinstance(error, temporal_exceptions.ApplicationError):
            yield from (json.dumps(d, default=str) for d in error.details)


def scrubbed_error(exc: Exception, values: SecretValues) -> Exception:
    """`exc` itself when it holds no recorded value; else an ApplicationError without it."""
    if not values or not any(values.holds(text) for text in _texts(exc)):
        return exc
    if isinstance(exc, temporal_exceptions.ApplicationError):
        return temporal_exceptions.ApplicationError(
            values.scrub(exc.message),
            *(values.scrub_value(d) for d in exc.details),
            type=exc.type,
            non_retryable=exc.non_retryable,
            next_retry_delay=exc.next_retry_delay,
            category=exc.category,
        )
    return temporal_exceptions.ApplicationError(values.scrub(str(exc)), type=type(exc).__name__)


def scrubbed_result(result: Any, values: SecretValues) -> Any:
    if not values:
        return result
    if isinstance(result, BaseModel):
        return type(result).model_validate(values.scrub_value(result.model_dump(mode="python")))
    return values.scrub_value(result)


class _ScrubInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        with secret_scope() as values:
            try:
                result = await self.next.execute_activity(input)
            except Exception as exc:
                cleaned = scrubbed_error(exc, values)
                if cleaned is exc:
                    raise
                raise cleaned from None
            return scrubbed_result(result, values)


class ScrubSecretsInterceptor(Interceptor):
    """Worker interceptor: every activity runs in its own scope of resolved secret values."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ScrubInbound(next)


class ScrubLogFilter(logging.Filter):
    """Scrubs log records emitted inside an activity scope that resolved secrets."""

    def filter(self, record: logging.LogRecord) -> bool:
        values = _SCOPE.get()
        if values:
            message = record.getMessage()
            if values.holds(message):
                record.msg, record.args = values.scrub(message), None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text and values.holds(record.exc_text):
                record.exc_text = values.scrub(record.exc_text)
        return True
