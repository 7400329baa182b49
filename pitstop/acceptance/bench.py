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

A benchmark table of a run whose requests failed says so in `problems`: with no successful
request vLLM prints 0 ms for every latency, which is no measurement.
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
    # Figures read from vLLM's benchmark table (what `problems` is about).
    from_table: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


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


def read_bench(log: str) -> BenchReport:
    """Every figure the log reports (the last table and METRIC value of a name win)."""
    report = BenchReport()
    lines = log.splitlines()
    tables = _tables(lines)
    if tables:
        table = tables[-1]
        succeeded, failed = table.get("requests_succeeded"), table.get("requests_failed", 0.0)
        if succeeded == 0:
            report.problems.append(
                "vLLM's benchmark completed no request (Successful requests: 0): its latencies are "
                "no measurement"
            )
            table = {k: v for k, v in table.items() if k in ("requests_succeeded", "requests_failed")}
        elif failed:
            total = int(failed + (succeeded or 0))
            report.problems.append(f"{int(failed)} of {total} requests of vLLM's benchmark failed")
        report.metrics.update(table)
        report.from_table = set(table)
    loads = [float(m.group(2)) for line in lines if (m := _MODEL_LOAD.search(line))]
    if loads:
        report.metrics["model_load_seconds"] = max(loads)
    downloads = [float(m.group(1)) for line in lines if (m := _DOWNLOAD.search(line))]
    if downloads:
        report.metrics["model_download_seconds"] = max(downloads)
    weights = [float(m.group(1)) for line in lines if (m := _WEIGHTS.search(line))]
    if weights:
        report.metrics["weights_load_seconds"] = max(weights)
    for line in lines:
        match = _METRIC.match(line)
        if match:
            report.metrics[match.group(1)] = float(match.group(2))
            report.from_table.discard(match.group(1))
    return report


def parse_metrics(log: str) -> dict[str, float]:
    """Every figure of the log by name (see `read_bench`)."""
    return read_bench(log).metrics
