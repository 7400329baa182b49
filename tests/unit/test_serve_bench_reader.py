"""The inference reader (`pitstop.acceptance.bench`) on the two outputs of the inference probe:
vLLM's own `vllm bench serve` table (a real output nobody here wrote, tests/fixtures/real/vllm)
and pitstop's own client `serve_bench.py` (its real output, made by running the shipped client
against tests/integration/probes/vllm_openai_stub.py: tests/fixtures/probes/README.md). Both
give the same figures under the same names and units, and the engine they measured; the
simulator prints what the probe prints for each engine version."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pitstop.acceptance.bench import read_bench
from pitstop.acceptance.probes import BY_KEY
from pitstop_sim import bench_logs
from pitstop_sim.models import NodeHealth, NodeProfile
from pitstop_sim.validation_logs import MOUNTED_FILES, produce

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL_VLLM = FIXTURES / "real" / "vllm"
VLLM_TABLE = REAL_VLLM / "bench_serving_0.8.x_benchmark_serving_llama3.3-70b_k8s_qps01_idx17544354110_CUT.txt"
SERVE_LOG_082 = REAL_VLLM / "serve_log_0.8.2_v1_llama3.1-8b_k8s_se7en_idx29487628864_CUT.txt"
OUR_CLIENT = FIXTURES / "probes" / "serve_bench_1_stub-vllm-0.6.6_40x512in_32out_c4.txt"
# What the inference checks read, and the unit each check states (pitstop/acceptance/probes.py).
CHECKED = {"ttft_ms_p50": "inference/ttft", "tpot_ms_p50": "inference/tpot"}
ENGINE_08 = "ENGINE vllm 0.8.5.post1 (GET /version of the server measured)\n"


def test_vllms_table_and_our_clients_lines_give_the_same_figures() -> None:
    theirs = read_bench(ENGINE_08 + VLLM_TABLE.read_text())
    ours = read_bench(OUR_CLIENT.read_text())
    # Values as a person reads them in each file.
    assert theirs.metrics["ttft_ms_p50"] == 97.49 and theirs.metrics["tpot_ms_p50"] == 43.69
    assert theirs.metrics["requests_per_second"] == 0.93
    assert ours.metrics["ttft_ms_p50"] == 22.22 and ours.metrics["tpot_ms_p50"] == 2.27
    assert ours.metrics["requests_per_second"] == 42.19 and ours.metrics["requests_succeeded"] == 40
    # The same names for every figure both print, the serving run's figures in both.
    shared = {
        "requests_succeeded", "benchmark_seconds", "requests_per_second", "output_tokens_per_second",
        *(f"{m}_ms_{s}" for m in ("ttft", "tpot", "itl") for s in ("mean", "p50", "p99")),
    }  # fmt: skip
    assert shared <= set(theirs.metrics) and shared <= set(ours.metrics)
    assert shared <= theirs.from_table and shared <= ours.from_table
    assert theirs.problems == [] and ours.problems == []
    # The engine each measured.
    assert theirs.engine == "vllm 0.8.5.post1" and ours.engine == "vllm 0.6.6"
    assert ours.measured_with() == " (vllm 0.6.6)"


def test_our_clients_units_are_the_checks_units() -> None:
    text = OUR_CLIENT.read_text()
    for name, check in CHECKED.items():
        (unit,) = re.findall(rf"^METRIC {name}=[\d.]+ (\S+)$", text, re.MULTILINE)
        assert unit == BY_KEY[check].unit == "ms"
        assert BY_KEY[check].direction == "lower_is_better"
    assert re.search(r"^METRIC requests_per_second=[\d.]+ req/s$", text, re.MULTILINE)
    # It says it is our client, not vLLM's benchmark, and prints no table of vLLM's.
    assert text.startswith("serve-bench: pitstop's own serving client, not vLLM's benchmark: ")
    assert "Serving Benchmark Result" not in text


def _with_counts(succeeded: int, failed: int) -> str:
    text = OUR_CLIENT.read_text()
    text = re.sub(r"requests_succeeded=\d+", f"requests_succeeded={succeeded}", text)
    return re.sub(r"requests_failed=\d+", f"requests_failed={failed}", text)


def test_failed_requests_of_our_client_are_problems_as_vllms_are() -> None:
    report = read_bench(_with_counts(37, 3))
    assert report.problems == ["3 of 40 requests of pitstop's serving client failed"]
    assert "ttft_ms_p50" in report.from_table  # the checks then fail on these figures


def test_a_run_of_our_client_with_no_successful_request_has_no_latency() -> None:
    # The client prints no latency then; figures of such a run are dropped all the same.
    report = read_bench(_with_counts(0, 40))
    assert report.problems == [
        "pitstop's serving client completed no request (requests_succeeded=0): its latencies are "
        "no measurement"
    ]
    assert set(report.metrics) == {"requests_succeeded", "requests_failed"}


def test_other_metric_lines_are_not_the_serving_runs() -> None:
    # server_ready_seconds is the script's, printed before our client starts.
    report = read_bench("METRIC server_ready_seconds=41 s\n" + OUR_CLIENT.read_text())
    assert report.metrics["server_ready_seconds"] == 41 and "server_ready_seconds" not in report.from_table


def test_the_engine_falls_back_to_vllms_own_log_line() -> None:
    # A log without the probe's ENGINE line (a user's own image): the server's version line.
    assert read_bench(SERVE_LOG_082.read_text()).engine == "vllm 0.8.2"
    assert read_bench("METRIC ttft_ms_p50=12 ms\n").engine == ""
    # The probe's line wins over the log's.
    assert read_bench(SERVE_LOG_082.read_text() + ENGINE_08).engine == "vllm 0.8.5.post1"


# --- the simulator prints what the probe prints, by engine version --------------------------------

SHIPPED = {
    "/opt/pitstop/vllm_serve_bench.sh": bench_logs.VLLM_PROBE,
    "/opt/pitstop/serve_bench.py": bench_logs.CLIENT_PROBE,
}


def _profile() -> NodeProfile:
    return NodeProfile(
        name="gpu-node-001", domain="zone-a", gpu_product="NVIDIA-H100-80GB-HBM3", gpus=8,
        driver_version="550.90.07", firmware_version="96.00.89.00.01",
        kernel_version="5.15.0-105-generic", os_image="Ubuntu 22.04.4 LTS", kubelet_version="v1.30.6",
        container_runtime="containerd://1.7.20", health=NodeHealth(),
    )  # fmt: skip


def _probe_pod(image: str, files: dict[str, str]) -> dict[str, object]:
    """The probe Job's pod as the simulator sees it: the ConfigMap's files by path, one GPU."""
    return {
        "metadata": {"annotations": {MOUNTED_FILES: json.dumps(files)}},
        "spec": {
            "containers": [
                {
                    "name": "bench",
                    "image": image,
                    "command": ["sh", "/opt/pitstop/vllm_serve_bench.sh"],
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                    "volumeMounts": [{"name": "config-0", "mountPath": "/opt/pitstop", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "config-0", "configMap": {"name": "pitstop-probe-scripts"}}],
        },
    }


def _metric_names(text: str) -> list[str]:
    return re.findall(r"^METRIC (\w+)=", text, re.MULTILINE)


def test_the_simulated_client_prints_the_real_clients_lines() -> None:
    run = bench_logs.Serving(ttft_ms=180, tpot_ms=22, num_prompts=40, max_concurrency=4, output_len=32)
    simulated = bench_logs.serve_bench_client("v0.6.6", run, model="Qwen/Qwen2.5-0.5B-Instruct", port=8000)
    real = OUR_CLIENT.read_text()
    assert _metric_names(simulated) == _metric_names(real)
    shape = re.compile(r"(?<=:)\d+(?=/)|\d+(?= (?:prompts|random|output|in flight))")
    assert shape.sub("N", simulated.splitlines()[0]) == shape.sub("N", real.splitlines()[0])
    assert (
        simulated.splitlines()[1]
        == real.splitlines()[1]
        == "ENGINE vllm 0.6.6 (GET /version of the server measured)"
    )


def test_the_simulator_runs_our_client_on_an_engine_without_vllm_bench() -> None:
    pod = _probe_pod("vllm/vllm-openai:v0.6.6", SHIPPED)
    served = produce("bench", _profile(), pod)
    assert served.succeeded
    assert "INFO " in served.log and " api_server.py:712] vLLM API server version 0.6.6\n" in served.log
    assert bench_logs.NO_VLLM_BENCH in served.log and "Serving Benchmark Result" not in served.log
    report = read_bench(served.log)
    assert report.engine == "vllm 0.6.6" and report.problems == []
    assert report.metrics["ttft_ms_p50"] == 180 and report.metrics["tpot_ms_p50"] == 22
    assert "model_load_seconds" not in report.metrics  # 0.6 logs no load time
    # An older ConfigMap without the client: python3's own words, and the probe fails.
    old = _probe_pod("vllm/vllm-openai:v0.6.6", {"/opt/pitstop/vllm_serve_bench.sh": bench_logs.VLLM_PROBE})
    failed = produce("bench", _profile(), old)
    assert not failed.succeeded
    assert failed.log.endswith(
        "python3: can't open file '/opt/pitstop/serve_bench.py': [Errno 2] No such file or directory\n"
    )


def test_the_simulator_names_the_engine_before_vllms_own_benchmark() -> None:
    pod = _probe_pod("vllm/vllm-openai:v0.8.5.post1", SHIPPED)
    served = produce("bench", _profile(), pod)
    assert served.succeeded
    assert served.log.index("ENGINE vllm 0.8.5.post1") < served.log.index("Serving Benchmark Result")
    assert read_bench(served.log).engine == "vllm 0.8.5.post1"
