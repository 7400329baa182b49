"""What the representative benchmark probes print (validation kind `bench`), as the real
commands print it: pitstop's training script (runbooks/manifests/probes, `train_step.py`) and
vLLM's server and serving benchmark (`vllm_serve_bench.sh`: `vllm serve`, then
`vllm bench serve`).

vLLM's layouts by version, from its own source and real outputs (tests/fixtures/real/vllm,
docs/tool-outputs.md): the server log of 0.8 (`Model loading took <m> GB and <s> seconds`, no
process prefix) and of later V1 engines (`(EngineCore_DP0 pid=<n>)` before each line, GiB); the
table with `{:<40} {:<10}` rows, to which 0.10.0 added "Maximum request concurrency" (when set,
vllm-project/vllm#21095), 0.10.2 the peak rows (#23867) and 0.11.1 "Failed requests" (#26478).
A later release's table is printed as 0.11.1 prints it. vLLM before 0.8 has no `vllm bench`:
the script then runs pitstop's own client (`serve_bench.py`, `serve_bench_client` here), and the
server log is the V0 engine's of 0.6 (`Loading model weights took <m> GB`, no time).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

# A tag that is no version (`latest`, `nightly`) prints as the newest layout known here.
NEWEST = (0, 11, 1)
TRAIN_PROBE = "train-step/1"
VLLM_PROBE = "vllm-serve-bench/1"
CLIENT_PROBE = "serve-bench/1"
# The first release whose `vllm` has `bench serve` (vllm-project/vllm#13993).
VLLM_BENCH_CLI = (0, 8)
NO_VLLM_BENCH = (
    "vllm-serve-bench: this image's vllm has no `vllm bench serve` (before vLLM 0.8): "
    "pitstop's own client serve_bench.py measures"
)


def _row(label: str, value: str) -> str:
    return f"{label:<40} {value:<10}"


def _rule(title: str, fill: str) -> str:
    return "{s:{c}^{n}}".format(s=title, n=50, c=fill)


# --- the training script ----------------------------------------------------------------------


def train_step(
    *, gpus: int, device: str, steps: int, batch_size: int, width: int, samples_per_second: float
) -> str:
    """train_step.py's output: its header, a loss line every 50 steps and the last, the METRIC
    lines. The loss falls as an MLP fitting its teacher's targets does."""
    where = f"{gpus} x {device}" if gpus else "cpu"
    lines = [f"train-step: {where}; {steps} steps of batch {batch_size}, width {width}"]

    def loss(step: int) -> float:
        return 0.04 + 0.42 * math.exp(-step / 60)

    for step in range(steps):
        if step % 50 == 0 or step == steps - 1:
            lines.append(f"step {step} loss {loss(step):.4f}")
    first = sum(loss(s) for s in range(10)) / 10
    last = sum(loss(s) for s in range(steps - 10, steps)) / 10
    lines += [
        f"METRIC samples_per_second={samples_per_second:.1f} samples/s",
        f"METRIC loss_first={first:.6g} loss",
        f"METRIC loss_last={last:.6g} loss",
        "METRIC checkpoint_save_seconds=0.0421 s",
        "METRIC checkpoint_restore_seconds=0.0315 s",
    ]
    return "\n".join(lines) + "\n"


# --- vLLM ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Serving:
    """What `vllm bench serve --dataset-name random` measures against the pod's own server."""

    ttft_ms: float
    tpot_ms: float
    num_prompts: int = 200
    max_concurrency: int = 8
    input_len: int = 512
    output_len: int = 128

    @property
    def e2e_ms(self) -> float:
        return self.ttft_ms + self.tpot_ms * (self.output_len - 1)

    @property
    def duration_s(self) -> float:
        return self.num_prompts / max(self.max_concurrency, 1) * self.e2e_ms / 1000.0


def _stamp(when: datetime, seconds: float) -> str:
    moment = datetime.fromtimestamp(when.timestamp() + seconds, tz=UTC)
    return moment.strftime("%m-%d %H:%M:%S")


def vllm_server_log(
    version: str,
    *,
    model: str,
    port: int,
    load_seconds: float,
    download_seconds: float,
    started: datetime,
    failure: str | None = None,
) -> str:
    """`vllm serve`'s startup log up to the first answered /health (what the probe prints before
    the benchmark), or up to `failure` (the engine's last words). Before 0.9, the lines of the
    0.8.2 capture; later, the engine lines as the 0.18 capture prints them (process prefix,
    `GiB memory`), and none of the API server's, whose later wording no capture here shows."""
    if _release(version) >= (0, 9):
        return _v1_engine_log(model, load_seconds, download_seconds, started, failure)
    if () < _release(version) < VLLM_BENCH_CLI:
        return _v0_06_log(version, model, load_seconds, port, started, failure)
    weights = _weights_seconds(load_seconds, download_seconds)

    def line(at: float, where: str, text: str) -> str:
        return f"INFO {_stamp(started, at)} [{where}] {text}"

    lines = [
        line(0, "__init__.py:239", "Automatically detected platform cuda."),
        line(5, "api_server.py:981", f"vLLM API server version {version.lstrip('v')}"),
        line(16, "gpu_model_runner.py:1174", f"Starting to load model {model}..."),
    ]
    if failure is not None:
        return "\n".join([*lines, failure]) + "\n"
    loaded = 16 + load_seconds
    lines += [
        line(16, "weight_utils.py:265", "Using model weights format ['*.safetensors']"),
        line(
            16 + download_seconds,
            "weight_utils.py:281",
            f"Time spent downloading weights for {model}: {download_seconds:.6f} seconds",
        ),
        line(loaded, "loader.py:447", f"Loading weights took {weights:.2f} seconds"),
        line(
            loaded, "gpu_model_runner.py:1186", f"Model loading took 0.9276 GB and {load_seconds:.6f} seconds"
        ),
        line(
            loaded + 40,
            "core.py:151",
            "init engine (profile, create kv cache, warmup model) took 40.00 seconds",
        ),
        line(loaded + 41, "api_server.py:1028", f"Starting vLLM API server on http://127.0.0.1:{port}"),
        "INFO:     Started server process [1]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
        'INFO:     127.0.0.1:41234 - "GET /health HTTP/1.1" 200 OK',
    ]
    return "\n".join(lines) + "\n"


def _v0_06_log(
    version: str, model: str, load_seconds: float, port: int, started: datetime, failure: str | None
) -> str:
    """0.6's V0 engine: `%(levelname)s %(asctime)s %(filename)s:%(lineno)d] ` (vllm/logger.py),
    no load time (worker/model_runner.py: `Loading model weights took %.4f GB`), no download
    time; line numbers of 0.6.6."""

    def line(at: float, where: str, text: str) -> str:
        return f"INFO {_stamp(started, at)} {where}] {text}"

    lines = [
        line(0, "api_server.py:712", f"vLLM API server version {version.lstrip('v')}"),
        line(16, "model_runner.py:1094", f"Starting to load model {model}..."),
    ]
    if failure is not None:
        return "\n".join([*lines, failure]) + "\n"
    loaded = 16 + load_seconds
    lines += [
        line(16, "weight_utils.py:251", "Using model weights format ['*.safetensors']"),
        line(loaded, "model_runner.py:1099", "Loading model weights took 0.9276 GB"),
        line(
            loaded + 40,
            "llm_engine.py:431",
            "init engine (profile, create kv cache, warmup model) took 40.00 seconds",
        ),
        line(loaded + 41, "launcher.py:19", "Available routes are:"),
        "INFO:     Started server process [1]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
        f"INFO:     Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)",
        'INFO:     127.0.0.1:41234 - "GET /health HTTP/1.1" 200 OK',
    ]
    return "\n".join(lines) + "\n"


def server_ready_seconds(load_seconds: float) -> int:
    """The script's whole seconds from `vllm serve` to its first answered /health, for the
    simulated logs above (the server answers 41 s after the model loaded, 16 s after start)."""
    return int(16 + load_seconds + 41)


def engine_line(version: str) -> str:
    """The probe's `ENGINE` line: GET /version of the server (a tag that is no version, as the
    newest release known here)."""
    release = version.lstrip("v") if _release(version) else ".".join(map(str, NEWEST))
    return f"ENGINE vllm {release} (GET /version of the server measured)\n"


def has_vllm_bench(version: str) -> bool:
    return (_release(version) or NEWEST) >= VLLM_BENCH_CLI


def serve_bench_client(version: str, run: Serving, *, model: str, port: int) -> str:
    """pitstop's own client (`serve_bench.py`) as it prints a run without failures: its header,
    the ENGINE line, its METRIC lines (tests/fixtures/probes has a real one)."""
    duration = run.duration_s
    generated = run.num_prompts * run.output_len
    head = (
        "serve-bench: pitstop's own serving client, not vLLM's benchmark: "
        f"{run.num_prompts} prompts of {run.input_len} random token ids, {run.output_len} output "
        f"tokens each (ignore_eos), at most {run.max_concurrency} in flight, to "
        f"http://127.0.0.1:{port}/v1/completions (streamed), model {model}\n"
    )
    lines = [
        f"METRIC requests_succeeded={run.num_prompts} requests",
        "METRIC requests_failed=0 requests",
        f"METRIC max_concurrency={run.max_concurrency} requests",
        f"METRIC benchmark_seconds={duration:.2f} s",
        f"METRIC requests_per_second={run.num_prompts / duration:.2f} req/s",
        f"METRIC output_tokens_per_second={generated / duration:.2f} tok/s",
    ]
    for metric, median in (
        ("ttft", run.ttft_ms),
        ("tpot", run.tpot_ms),
        ("itl", run.tpot_ms * 0.98),
        ("e2el", run.e2e_ms),
    ):
        lines += [
            f"METRIC {metric}_ms_mean={median * 1.04:.2f} ms",
            f"METRIC {metric}_ms_p50={median:.2f} ms",
            f"METRIC {metric}_ms_p99={median * 1.9:.2f} ms",
        ]
    return head + engine_line(version) + "\n".join(lines) + "\n"


def _weights_seconds(load_seconds: float, download_seconds: float) -> float:
    return round(min(3.27, max(load_seconds - download_seconds, 0.0) * 0.5), 2)


def _v1_engine_log(
    model: str, load_seconds: float, download_seconds: float, started: datetime, failure: str | None
) -> str:
    prefix = "(EngineCore pid=243) "

    def line(at: float, where: str, text: str) -> str:
        return f"{prefix}INFO {_stamp(started, at)} [{where}] {text}"

    lines = [line(16, "gpu_model_runner.py:4493", f"Starting to load model {model}...")]
    if failure is not None:
        return "\n".join([*lines, failure]) + "\n"
    loaded = 16 + load_seconds
    lines += [
        line(
            16 + download_seconds,
            "weight_utils.py:581",
            f"Time spent downloading weights for {model}: {download_seconds:.6f} seconds",
        ),
        line(
            loaded,
            "default_loader.py:384",
            f"Loading weights took {_weights_seconds(load_seconds, download_seconds):.2f} seconds",
        ),
        line(
            loaded,
            "gpu_model_runner.py:4578",
            f"Model loading took 0.93 GiB memory and {load_seconds:.6f} seconds",
        ),
    ]
    return "\n".join(lines) + "\n"


def _release(version: str) -> tuple[int, ...]:
    """`v0.8.5.post1` -> (0, 8, 5); () when the tag is no version (`latest`)."""
    digits = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    return tuple(int(part) for part in digits.group(1).split(".")) if digits else ()


def vllm_bench_serve(version: str, run: Serving) -> str:
    """`vllm bench serve`'s console output from the test run to the closing rule, in the layout
    of `version`."""
    release = _release(version) or NEWEST
    peak, failed_row, concurrency_row = release >= (0, 10, 2), release >= (0, 11, 1), release >= (0, 10)
    duration = run.duration_s
    generated = run.num_prompts * run.output_len
    total_input = run.num_prompts * run.input_len
    lines = ["Starting initial single prompt test run..."]
    if peak:
        lines.append("Waiting for endpoint to become up in 600 seconds")
    lines += [
        "Initial test run completed. Starting main benchmark run...",
        "Traffic request rate: inf",
        "Burstiness factor: 1.0 (Poisson process)",
        f"Maximum request concurrency: {run.max_concurrency}",
    ]
    if peak:
        lines.append("tip: install termplotlib and gnuplot to plot the metrics")
    lines += [_rule(" Serving Benchmark Result ", "="), _row("Successful requests:", str(run.num_prompts))]
    if failed_row:
        lines.append(_row("Failed requests:", "0"))
    if concurrency_row:
        lines.append(_row("Maximum request concurrency:", str(run.max_concurrency)))
    lines += [
        _row("Benchmark duration (s):", f"{duration:.2f}"),
        _row("Total input tokens:", str(total_input)),
        _row("Total generated tokens:", str(generated)),
        _row("Request throughput (req/s):", f"{run.num_prompts / duration:.2f}"),
        _row("Output token throughput (tok/s):", f"{generated / duration:.2f}"),
    ]
    if peak:
        per_request = 1000.0 / max(run.tpot_ms, 0.1)
        lines += [
            _row(
                "Peak output token throughput (tok/s):",
                f"{math.floor(per_request * run.max_concurrency):.2f}",
            ),
            _row("Peak concurrent requests:", f"{run.max_concurrency:.2f}"),
        ]
    lines.append(_row("Total Token throughput (tok/s):", f"{(total_input + generated) / duration:.2f}"))
    for metric, header, median in (
        ("TTFT", "Time to First Token", run.ttft_ms),
        ("TPOT", "Time per Output Token (excl. 1st token)", run.tpot_ms),
        ("ITL", "Inter-token Latency", run.tpot_ms * 0.98),
    ):
        lines += [
            _rule(header, "-"),
            _row(f"Mean {metric} (ms):", f"{median * 1.04:.2f}"),
            _row(f"Median {metric} (ms):", f"{median:.2f}"),
            _row(f"P99 {metric} (ms):", f"{median * 1.9:.2f}"),
        ]
    lines.append("=" * 50)
    return "\n".join(lines) + "\n"
