"""Tracing is set up only when something receives the spans (`pitstop.telemetry`).

Each case runs in its own interpreter: OpenTelemetry's global provider can be set once per
process, and other tests in this one set it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pitstop.telemetry import TelemetryConfigError, exporter_names

PROBE = """
from opentelemetry import trace
from pitstop.telemetry import setup_tracing
provider = setup_tracing("probe", environ={environ})
span = trace.get_tracer("probe").start_span("s")
print(provider is None, span.is_recording(), span.get_span_context().is_valid)
"""


def probe(environ: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(environ=environ)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_without_an_exporter_no_provider_is_installed_and_spans_record_nothing() -> None:
    # A non-recording span with an invalid context: the tracing interceptor then puts no trace
    # header on the activities and children a workflow starts.
    assert probe({}) == "True False False"
    assert probe({"OTEL_TRACES_EXPORTER": "none"}) == "True False False"


def test_with_an_exporter_spans_are_recorded() -> None:
    assert probe({"OTEL_TRACES_EXPORTER": "console"}) == "False True True"


def test_an_unknown_exporter_is_an_error_that_names_it() -> None:
    with pytest.raises(TelemetryConfigError, match="unknown exporter\\(s\\) zipkin"):
        exporter_names({"OTEL_TRACES_EXPORTER": "otlp,zipkin"})
