"""OpenTelemetry tracing set-up, driven by the standard `OTEL_*` variables.

`OTEL_TRACES_EXPORTER` picks the exporters (comma-separated: `otlp`, `console`, `none`).
When it is unset, spans go to OTLP if `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces-specific
endpoint) is set, and nowhere otherwise: a laptop without a collector must not log
connection errors for every span. The OTLP exporter reads the endpoint, headers and
timeouts from the same variables itself.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

_lock = threading.Lock()
_provider: TracerProvider | None = None


class TelemetryConfigError(ValueError):
    """An `OTEL_*` variable names something pitstop cannot export to."""


def exporter_names(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The exporters the environment asks for, in order, without `none`."""
    raw = environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if not raw:
        has_endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        )
        return ["otlp"] if has_endpoint else []
    names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in {"otlp", "console", "none"}]
    if unknown:
        raise TelemetryConfigError(
            f"OTEL_TRACES_EXPORTER={raw!r}: unknown exporter(s) {', '.join(unknown)} "
            "(use otlp, console or none)"
        )
    return [] if "none" in names else names


def _make_exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    # Imported only when asked for: the OTLP exporter pulls in protobuf and requests.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def setup_tracing(
    service_name: str,
    *,
    environ: Mapping[str, str] = os.environ,
    extra_exporters: Sequence[SpanExporter] = (),
) -> TracerProvider | None:
    """Install (once) and return the process-wide tracer provider; None while nothing exports.

    Idempotent: later calls return the provider of the first call that installed one
    (OpenTelemetry allows the global provider to be set only once), adding any
    `extra_exporters` to it, which is how tests attach an `InMemorySpanExporter`.

    With no exporter at all, no SDK provider is installed: OpenTelemetry's default no-op
    tracer makes the tracing interceptor's spans non-recording, so a worker does not build,
    and carry in every activity's and child's headers, spans that nobody would receive.
    """
    global _provider
    with _lock:
        names = exporter_names(environ)
        if _provider is None:
            current = trace.get_tracer_provider()
            if isinstance(current, TracerProvider):
                # Someone (an embedding application) installed an SDK provider already: use it.
                _provider = current
            elif names or extra_exporters:
                _provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
                for name in names:
                    # Console output is for humans watching: show spans as they end.
                    processor = (
                        SimpleSpanProcessor(_make_exporter(name))
                        if name == "console"
                        else BatchSpanProcessor(_make_exporter(name))
                    )
                    _provider.add_span_processor(processor)
                trace.set_tracer_provider(_provider)
            else:
                return None
        for exporter in extra_exporters:
            _provider.add_span_processor(SimpleSpanProcessor(exporter))
        return _provider


def shutdown_tracing() -> None:
    """Flush and stop exporters (call at process exit so batched spans are not lost)."""
    with _lock:
        if _provider is not None:
            _provider.shutdown()
