"""What the representative training and inference benchmarks (validation kind `bench`) report,
read in the formats the tools print (docs/tool-outputs.md "vLLM"):

- vLLM's serving benchmark (`vllm bench serve`, and `benchmarks/benchmark_serving.py` before
  it): the "Serving Benchmark Result" table, `<label>:` padded to 40 columns and the value;
  every layout seen, from the one with "Total Token throughput" only to the one with "Failed
  requests", "Maximum request concurrency" and the peak rows. The median TTFT is `ttft_ms_p50`,
  the median TPOT `tpot_ms_p50`, "Request throughput (req/s)" `requests_per_second`.
- vLLM's server log: `Model loading took <m> GB and <s> seconds` (`GiB`, `GiB memory` in later
  versions; one line per worker, the slowest counts) is `model_load_seconds`, and `Time spent
  downloading weights for <model>: <s> seconds` (printed only when weights were downloaded)
  `model_download_seconds`.
- `METRIC <name>=<value> <unit>` lines: pitstop's own training probe
  (runbooks/manifests/probes) and users' own images. A METRIC line wins over a figure read from
  vLLM's output of the same name.
- pitstop's own serving client (`serve_bench.py` of runbooks/manifests/probes, for vLLM images
  without `vllm bench serve`): a `serve-bench: pitstop's own serving client` line, then METRIC
  lines under the names above (`ttft_ms_p50`, `tpot_ms_p50`, `requests_per_second`, ...,
  `requests_succeeded`, `requests_failed`), which count as that run's serving figures.
- `ENGINE <engine> <version>` (the probe's GET /version of the server it measured; else vLLM's
  `vLLM API server version <v>` log line): `BenchReport.engine`, the engine the figures are of.

A serving run whose requests failed says so in `problems`, whichever client measured: with no
successful request vLLM prints 0 ms for every latency, which is no measurement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_METRIC = re.compile(r"^\s*METRIC\s+([A-Za-z_][\w.]*)\s*=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"

# The table: a centred title in `=`, rows `{:<40} {:<10}`, sections in `-`, a closing rule.
_TABLE_START = re.compile(r"^\s*=+ Serving Benchmark Result =+\s*$")
_TABLE_END = re.compile(r"^\s*={20,}\s*$")
_ROW = re.compile(r"^\s*([A-Za-z][^:]*?):\s+" + _NUMBER + r"\s*$")
_LATENCY = re.compile(r"^(Mean|Median|P(\d+(?:\.\d+)?)) (TTFT|TPOT|ITL|E2EL) \(ms\)$")
_ROWS = {
    "Successful requests": "requests_succeeded",
    "Failed requests": "requests_failed",
    "Maximum request concurrency": "max_concurrency",
    "Benchmark duration (s)": "benchmark_seconds",
    "Total input tokens": "input_tokens",
    "Total generated tokens": "generated_tokens",
    "Request throughput (req/s)": "requests_per_second",
    "Request goodput (req/s)": "requests_goodput_per_second",
    "Output token throughput (tok/s)": "output_tokens_per_second",
    "Total Token throughput (tok/s)": "total_tokens_per_second",
    "Total token throughput (tok/s)": "total_tokens_per_second",
    "Peak output token throughput (tok/s)": "peak_output_tokens_per_second",
    "Peak concurrent requests": "peak_concurrent_requests",
}

# The server log (vllm/v1/worker/gpu_model_runner.py, vllm/worker/model_runner.py,
# vllm/model_executor/model_loader/weight_utils.py).
_MODEL_LOAD = re.compile(
    r"Model loading took " + _NUMBER + r" (?:GB|GiB)(?: memory)? and " + _NUMBER + r" seconds"
)
_DOWNLOAD = re.compile(r"Time spent downloading weights for .+: " + _NUMBER + r" seconds")
_WEIGHTS = re.compile(r"\] Loading weights took " + _NUMBER + r" seconds")
_SERVER_VERSION = re.compile(r"vLLM API server version (\S+)")  # vllm/entrypoints/openai/api_server.py

# The probe's own lines (runbooks/manifests/probes: serve_bench.py, vllm_serve_bench.sh).
_ENGINE = re.compile(r"^\s*ENGINE\s+([A-Za-z][\w.-]*)\s+(\S+)")
_CLIENT_START = re.compile(r"^\s*serve-bench: pitstop's own serving client")
VLLM_BENCHMARK = "vLLM's benchmark"
OUR_CLIENT = "pitstop's serving client"

# Where each figure comes from, for the reason of a check that found none.
SOURCES = {
    "ttft_ms_p50": 'vLLM\'s "Median TTFT (ms)"',
    "tpot_ms_p50": 'vLLM\'s "Median TPOT (ms)"',
    "requests_per_second": 'vLLM\'s "Request throughput (req/s)"',
    "model_load_seconds": 'vLLM\'s "Model loading took ... seconds"',
    "model_download_seconds": 'vLLM\'s "Time spent downloading weights"',
}


@dataclass
class BenchReport:
    metrics: dict[str, float] = field(default_factory=dict)
    # Figures of a serving run, vLLM's benchmark table or pitstop's client (what `problems` is
    # about).
    from_table: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    # The engine the figures are of, `<engine> <version>` (e.g. "vllm 0.6.6"); "" when the log
    # does not say.
    engine: str = ""

    def measured_with(self) -> str:
        """` (vllm 0.6.6)`, for a check's detail; "" when the engine is not known."""
        return f" ({self.engine})" if self.engine else ""


def _table_key(label: str) -> str | None:
    if label in _ROWS:
        return _ROWS[label]
    latency = _LATENCY.match(label)
    if latency is None:
        return None
    stat, percentile, metric = latency.groups()
    which = "mean" if stat == "Mean" else "p50" if stat == "Median" else "p" + percentile.replace(".", "_")
    return f"{metric.lower()}_ms_{which}"


def _tables(lines: list[str]) -> list[dict[str, float]]:
    tables: list[dict[str, float]] = []
    current: dict[str, float] | None = None
    for line in lines:
        if _TABLE_START.match(line):
            current = {}
            tables.append(current)
            continue
        if current is None:
            continue
        if _TABLE_END.match(line):
            current = None
            continue
        row = _ROW.match(line)
        if row is None:
            continue
        label = row.group(1).strip()
        key = _table_key(label)
        if key is not None and not (key.endswith("_p50") and label.startswith("P50") and key in current):
            current[key] = float(row.group(2))
    return tables


def _serving(report: BenchReport, figures: dict[str, float], who: str) -> None:
    """One serving run's figures into the report, with what its request counts say of them."""
    succeeded, failed = figures.get("requests_succeeded"), figures.get("requests_failed", 0.0)
    if succeeded == 0:
        said = "Successful requests: 0" if who == VLLM_BENCHMARK else "requests_succeeded=0"
        report.problems.append(f"{who} completed no request ({said}): its latencies are no measurement")
        kept = {k: v for k, v in figures.items() if k in ("requests_succeeded", "requests_failed")}
        for name in set(figures) - set(kept):
            report.metrics.pop(name, None)
        figures = kept
    elif failed:
        total = int(failed + (succeeded or 0))
        report.problems.append(f"{int(failed)} of {total} requests of {who} failed")
    report.metrics.update(figures)
    report.from_table |= set(figures)


def _engine(lines: list[str]) -> str:
    engines = [f"{m.group(1)} {m.group(2)}" for line in lines if (m := _ENGINE.match(line))]
    if engines:
        return engines[-1]
    versions = [m.group(1) for line in lines if (m := _SERVER_VERSION.search(line))]
    return f"vllm {versions[-1]}" if versions else ""


def read_bench(log: str) -> BenchReport:
    """Every figure the log reports (the last table and METRIC value of a name win)."""
    report = BenchReport()
    lines = log.splitlines()
    tables = _tables(lines)
    if tables:
        _serving(report, tables[-1], VLLM_BENCHMARK)
    loads = [float(m.group(2)) for line in lines if (m := _MODEL_LOAD.search(line))]
    if loads:
        report.metrics["model_load_seconds"] = max(loads)
    downloads = [float(m.group(1)) for line in lines if (m := _DOWNLOAD.search(line))]
    if downloads:
        report.metrics["model_download_seconds"] = max(downloads)
    weights = [float(m.group(1)) for line in lines if (m := _WEIGHTS.search(line))]
    if weights:
        report.metrics["weights_load_seconds"] = max(weights)
    client: dict[str, float] | None = None
    for line in lines:
        if _CLIENT_START.match(line):
            client = {}  # the METRIC lines from here on are that client's run
            continue
        match = _METRIC.match(line)
        if match:
            report.metrics[match.group(1)] = float(match.group(2))
            report.from_table.discard(match.group(1))
            if client is not None:
                client[match.group(1)] = float(match.group(2))
    if client is not None:
        _serving(report, client, OUR_CLIENT)
    report.engine = _engine(lines)
    return report


def parse_metrics(log: str) -> dict[str, float]:
    """Every figure of the log by name (see `read_bench`)."""
    return read_bench(log).metrics
