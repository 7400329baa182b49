"""The inference benchmark's reader on real vLLM outputs nobody here wrote
(tests/fixtures/real/vllm/, sources in its README and each file's `.expected.yaml`; the expected
values below are the `.expected.yaml` figures, read from the files by a person), and the
simulator's vLLM output compared with them, layout by layout."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pitstop.acceptance.bench import parse_metrics, read_bench
from pitstop_sim import bench_logs

VLLM = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "vllm"
EARLY = "bench_serving_0.8.x_benchmark_serving_llama3.3-70b_k8s_qps01_idx17544354110_CUT.txt"
PEAK = "bench_serve_0.10.2-0.11.0_peak_rows_qwen3-30b-a3b-fp8_offload_idx30088773704_CUT.txt"
NEWEST = "bench_serve_latest-2026_failed_row_qwen3-235b_tp4_rtxpro6000_idx57976227484_CUT.txt"
SERVE_082 = "serve_log_0.8.2_v1_llama3.1-8b_k8s_se7en_idx29487628864_CUT.txt"
SERVE_018 = "serve_log_0.18.1rc1_enginecore_gib_memory_glm-ocr_failed_start_idx53021881054_CUT.txt"


def real(name: str) -> str:
    return (VLLM / name).read_text()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            EARLY,
            {"requests_succeeded": 200, "benchmark_seconds": 216.15, "requests_per_second": 0.93,
             "output_tokens_per_second": 197.90, "total_tokens_per_second": 395.26,
             "ttft_ms_mean": 109.87, "ttft_ms_p50": 97.49, "ttft_ms_p99": 220.93,
             "tpot_ms_mean": 43.89, "tpot_ms_p50": 43.69, "tpot_ms_p99": 51.17,
             "itl_ms_mean": 43.82, "itl_ms_p50": 42.41, "itl_ms_p99": 88.38},
        ),
        (
            PEAK,
            {"requests_succeeded": 100, "requests_per_second": 0.86, "peak_concurrent_requests": 100.0,
             "peak_output_tokens_per_second": 504.0, "total_tokens_per_second": 391.14,
             "ttft_ms_mean": 8387.80, "ttft_ms_p50": 9066.78, "ttft_ms_p99": 14937.16,
             "tpot_ms_mean": 324.13, "tpot_ms_p50": 215.65, "tpot_ms_p99": 1288.01,
             "itl_ms_p50": 180.39},
        ),
        (
            NEWEST,
            {"requests_succeeded": 12, "requests_failed": 0, "max_concurrency": 1,
             "requests_per_second": 0.22, "total_tokens_per_second": 277.34,
             "ttft_ms_mean": 255.31, "ttft_ms_p50": 251.60, "ttft_ms_p99": 272.03,
             "tpot_ms_mean": 17.10, "tpot_ms_p50": 17.14, "tpot_ms_p99": 17.16,
             "itl_ms_p50": 17.13, "itl_ms_p99": 17.79},
        ),
    ],
)  # fmt: skip
def test_the_serving_benchmark_table_of_each_vllm_layout_is_read(
    name: str, expected: dict[str, float]
) -> None:
    report = read_bench(real(name))
    assert report.problems == []
    for key, value in expected.items():
        assert report.metrics[key] == pytest.approx(value), key
    # No server log in these outputs: nothing else is made up.
    assert "model_load_seconds" not in report.metrics


def test_the_model_load_and_download_times_are_read_from_vllm_0_8_server_log() -> None:
    metrics = parse_metrics(real(SERVE_082))
    assert metrics == {
        "model_download_seconds": 55.301468,
        "weights_load_seconds": 3.27,
        "model_load_seconds": 59.268527,
    }


def test_a_later_engine_log_with_its_process_prefix_and_gib_memory_is_read_too() -> None:
    # 0.18: "(EngineCore pid=589) ... Model loading took 2.2 GiB memory and 53.838931 seconds";
    # no download line (nothing was downloaded), and the engine then failed to start.
    metrics = parse_metrics(real(SERVE_018))
    assert metrics == {"model_load_seconds": 53.838931, "weights_load_seconds": 50.30}


def test_a_run_whose_requests_failed_is_no_measurement() -> None:
    text = real(NEWEST)
    some = text.replace(
        "Failed requests:                         0 ", "Failed requests:                         3 "
    )
    assert read_bench(some).problems == ["3 of 15 requests of vLLM's benchmark failed"]
    none = text.replace(
        "Successful requests:                     12", "Successful requests:                     0 "
    )
    report = read_bench(none)
    assert report.problems[0].startswith("vLLM's benchmark completed no request (Successful requests: 0)")
    assert "ttft_ms_p50" not in report.metrics  # vLLM prints 0.00 ms: no latency was measured


def test_metric_lines_stay_accepted_and_win_over_a_table_figure_of_the_same_name() -> None:
    log = real(EARLY) + "METRIC ttft_ms_p50=120 ms\nMETRIC model_load_seconds=40.5 s\n"
    report = read_bench(log)
    assert report.metrics["ttft_ms_p50"] == 120 and report.metrics["model_load_seconds"] == 40.5
    assert "ttft_ms_p50" not in report.from_table and "tpot_ms_p50" in report.from_table


def test_the_last_of_several_tables_counts() -> None:
    assert read_bench(real(EARLY) + real(PEAK)).metrics["ttft_ms_p50"] == 9066.78


# --- the simulator against the real layouts --------------------------------------------------------

_ROW = re.compile(r"^([A-Za-z][^:]*:)\s")


def _labels(text: str) -> list[str]:
    table = text[text.index("= Serving Benchmark Result =") :]
    return [m.group(1) for line in table.splitlines() if (m := _ROW.match(line))]


RUN = bench_logs.Serving(ttft_ms=180, tpot_ms=22, num_prompts=200, max_concurrency=8)


@pytest.mark.parametrize(
    ("version", "fixture", "extra"),
    [
        # The shipped image's layout: benchmark_serving.py's rows of April 2025.
        ("v0.8.5.post1", EARLY, []),
        # 0.10.2: the peak rows; the real run set no concurrency limit, the simulated one does.
        ("v0.10.2", PEAK, ["Maximum request concurrency:"]),
        ("v0.11.1", NEWEST, []),
    ],
)
def test_the_simulated_table_has_the_rows_of_the_real_one(
    version: str, fixture: str, extra: list[str]
) -> None:
    simulated = _labels(bench_logs.vllm_bench_serve(version, RUN))
    wanted = _labels(real(fixture))
    if extra:
        wanted.insert(1, *extra)
    # The newest capture writes "Total token throughput" (lower-case t) where 0.11.1 wrote
    # "Total Token throughput" (vllm-project/vllm#26478's own output); the reader takes both.
    assert [label.lower() for label in simulated] == [label.lower() for label in wanted]


def test_the_simulated_rows_are_padded_as_vllm_pads_them() -> None:
    # `{:<40} {:<10}`: every row of a real output with trailing spaces is 51 characters.
    real_rows = [line for line in real(PEAK).splitlines() if _ROW.match(line) and ":  " in line]
    simulated = [
        line for line in bench_logs.vllm_bench_serve("v0.10.2", RUN).splitlines() if _ROW.match(line)
    ]
    assert {len(line) for line in real_rows} == {51}
    assert {len(line) for line in simulated if ":  " in line} == {51}


def test_the_simulated_output_reads_back_as_the_node_health_says() -> None:
    started = datetime(2025, 5, 1, 12, tzinfo=UTC)
    for version in ("v0.8.5.post1", "v0.10.2", "latest"):
        log = bench_logs.vllm_server_log(
            version, model="Qwen/Qwen2.5-0.5B-Instruct", port=8000, load_seconds=38.5, download_seconds=24.6,
            started=started,
        ) + bench_logs.vllm_bench_serve(version, RUN)  # fmt: skip
        report = read_bench(log)
        assert report.problems == []
        assert report.metrics["ttft_ms_p50"] == 180 and report.metrics["tpot_ms_p50"] == 22
        assert report.metrics["model_load_seconds"] == 38.5
        assert report.metrics["model_download_seconds"] == 24.6


def test_the_simulated_0_8_server_log_has_the_real_lines_shape() -> None:
    log = bench_logs.vllm_server_log(
        "v0.8.5.post1", model="m", port=8000, load_seconds=38.5, download_seconds=24.6,
        started=datetime(2025, 5, 1, 12, tzinfo=UTC),
    )  # fmt: skip
    stamp = r"INFO \d\d-\d\d \d\d:\d\d:\d\d \[[a-z_]+\.py:\d+\] "
    shape = {re.sub(stamp, "", line).split(" ")[0] for line in log.splitlines()}
    real_shape = {re.sub(stamp, "", line).split(" ")[0] for line in real(SERVE_082).splitlines()}
    assert shape <= real_shape
    assert (
        "INFO 05-01 12:00:54 [gpu_model_runner.py:1186] Model loading took 0.9276 GB and 38.500000 seconds"
        in log
    )
