"""The shipped acceptance probes (runbooks/manifests/probes): the runbook's bench Jobs name only
images, commands and ConfigMap keys the directory ships and documents, and every vLLM release the
upgrade rolls out has its documented image; the training script runs (on a CPU, where torch is
installed); the inference script starts a server, waits for it and prints its log, the engine's
version and `vllm bench serve`'s output, with a stand-in `vllm` of 0.8 on PATH (the fallback to
pitstop's own client on older engines: tests/integration/probes)."""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from pitstop.acceptance.bench import read_bench
from pitstop.module_args.acceptance import AcceptanceArgs
from pitstop.module_args.gpu import NCCL_TESTS_BINARY, NCCL_TESTS_IMAGE, NcclTestArgs
from pitstop.runbook.templating import render
from pitstop_sim import bench_logs
from pitstop_sim.validation_logs import probe_of

REPO = Path(__file__).resolve().parents[2]
PROBES = REPO / "runbooks" / "manifests" / "probes"
RUNBOOK = REPO / "runbooks" / "platform-upgrade.yaml"
FIXTURE = (
    REPO
    / "tests"
    / "fixtures"
    / "real"
    / "vllm"
    / ("bench_serving_0.8.x_benchmark_serving_llama3.3-70b_k8s_qps01_idx17544354110_CUT.txt")
)


def _yaml(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text())


def config_map() -> dict[str, Any]:
    found: dict[str, Any] = _yaml(PROBES / "probe-scripts.yaml")
    return found


def readme_table() -> dict[str, str]:
    """image -> command, from the README's table of probes."""
    rows: dict[str, str] = {}
    for line in (PROBES / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`") and cells[2].startswith("`"):
            rows[cells[1].strip("`")] = cells[2].strip("`")
    return rows


def test_the_runbook_bench_jobs_use_only_the_shipped_images_commands_and_scripts() -> None:
    runbook = _yaml(RUNBOOK)
    variables = runbook["vars"]
    cm = config_map()
    assert cm["kind"] == "ConfigMap" and "namespace" not in cm["metadata"]  # applied to probe_namespace
    documented = readme_table()
    bench = variables["acceptance_bench"]
    AcceptanceArgs.model_validate({"bench": bench})  # the module takes them as they are
    assert set(bench) == {"training", "inference"}
    for kind, job in bench.items():
        assert job["image"] in documented, (kind, job["image"])
        assert " ".join(job["command"]) == documented[job["image"]], kind
        interpreter, script = job["command"]
        (mount,) = job["config_maps"]
        assert mount["name"] == cm["metadata"]["name"]
        assert script.startswith(mount["mount_path"] + "/")
        key = script.removeprefix(mount["mount_path"] + "/")
        assert key in cm["data"], (kind, key)
        assert (
            probe_of(cm["data"][key])
            == {"training": bench_logs.TRAIN_PROBE, "inference": bench_logs.VLLM_PROBE}[kind]
        )
        assert interpreter == ("python" if key.endswith(".py") else "sh")
    # The inference script's own client beside it: standard library only (nothing is installed
    # in the vLLM image), and marked as a probe.
    client = cm["data"]["serve_bench.py"]
    assert probe_of(client) == "serve-bench/1"
    imported = set(re.findall(r"^(?:from|import) ([\w]+)", client, re.MULTILINE)) - {"__future__"}
    assert imported and imported <= sys.stdlib_module_names, imported - set(sys.stdlib_module_names)
    # The runbook applies that very file, by a path relative to itself.
    assert (RUNBOOK.parent / variables["probe_scripts"]).resolve() == (
        PROBES / "probe-scripts.yaml"
    ).resolve()
    text = RUNBOOK.read_text()
    assert text.count('kube.apply: {src: "{{ probe_scripts }}", namespace: "{{ probe_namespace }}"}') == 2
    assert text.count('namespace: "{{ probe_namespace }}"\n') == 2  # both acceptance.check calls


def test_every_vllm_release_the_upgrade_rolls_out_has_its_documented_probe_image() -> None:
    # The inference probe runs the engine under test (the release before the upgrade for the
    # baseline, the target after it): vLLM's image of each release in manifests/platform/vllm.
    documented = readme_table()
    inference = _yaml(RUNBOOK)["vars"]["acceptance_bench"]["inference"]
    releases = sorted(p.name for p in (RUNBOOK.parent / "manifests" / "platform" / "vllm").iterdir())
    assert _yaml(RUNBOOK)["vars"]["targets"]["vllm"] in releases
    for release in releases:
        image = f"vllm/vllm-openai:{release}"
        assert documented.get(image) == " ".join(inference["command"]), image


def test_the_nccl_default_is_the_documented_image_and_binary() -> None:
    documented = readme_table()
    assert documented[NCCL_TESTS_IMAGE].startswith(NCCL_TESTS_BINARY + " ")
    assert NcclTestArgs().image == NCCL_TESTS_IMAGE and NcclTestArgs().binary == NCCL_TESTS_BINARY
    assert (
        AcceptanceArgs().nccl.image == NCCL_TESTS_IMAGE and AcceptanceArgs().nccl.binary == NCCL_TESTS_BINARY
    )
    # Pinned: a tag, never `latest`, in every documented image.
    for image in documented:
        assert re.fullmatch(r"[a-z0-9./-]+:[A-Za-z0-9._-]+", image) and not image.endswith(":latest"), image


# --- the training script ---------------------------------------------------------------------------


def _script(tmp_path: Path, key: str) -> Path:
    path = tmp_path / key
    path.write_text(config_map()["data"][key])
    return path


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed in this environment (it is not a pitstop dependency): the training "
    "probe runs in nvcr.io/nvidia/pytorch; install torch to run it here on the CPU",
)
def test_the_training_script_runs_on_a_cpu_and_reports_its_metric_lines(tmp_path: Path) -> None:
    script = _script(tmp_path, "train_step.py")
    done = subprocess.run(
        [sys.executable, str(script), "--device", "cpu", "--steps", "120", "--batch-size", "64",
         "--width", "64", "--checkpoint-dir", str(tmp_path / "ckpt")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("train-step: cpu; 120 steps of batch 64, width 64\n")
    metrics = read_bench(done.stdout).metrics
    assert set(metrics) >= {
        "samples_per_second", "loss_first", "loss_last", "checkpoint_save_seconds",
        "checkpoint_restore_seconds",
    }  # fmt: skip
    assert metrics["samples_per_second"] > 0 and metrics["loss_last"] < metrics["loss_first"]
    assert (tmp_path / "ckpt" / "train-step.pt").is_file()


def test_the_simulated_training_output_is_the_scripts_shape() -> None:
    # The simulator prints what the script prints: its header, loss lines, the same METRIC names.
    script = config_map()["data"]["train_step.py"]
    printed = set(re.findall(r'print\(f"METRIC (\w+)=', script))
    log = bench_logs.train_step(
        gpus=8, device="NVIDIA H100 80GB HBM3", steps=300, batch_size=512, width=1024, samples_per_second=2400
    )
    assert set(re.findall(r"^METRIC (\w+)=", log, re.MULTILINE)) == printed
    assert (
        'f"train-step: {where}; {args.steps} steps of batch {args.batch_size}, width {args.width}"' in script
    )
    assert log.startswith(
        "train-step: 8 x NVIDIA H100 80GB HBM3; 300 steps of batch 512, width 1024\nstep 0 loss "
    )
    assert 'print(f"step {step} loss {value:.4f}", flush=True)' in script


# --- the inference script ---------------------------------------------------------------------------

FAKE_VLLM = '''\
#!{python}
"""A stand-in for vllm 0.8: `serve` logs and answers /health and /version, `bench serve` exists
(its --help succeeds) and prints a real table."""
import http.server, os, sys, time
if sys.argv[1:] == ["bench", "serve", "--help"]:
    print("usage: vllm bench serve [options]")
elif sys.argv[1] == "serve":
    if os.environ.get("FAKE_SERVE_FAILS"):
        print("RuntimeError: CUDA error: unspecified launch failure", flush=True)
        sys.exit(1)
    port = int(sys.argv[sys.argv.index("--port") + 1])
    print("INFO 05-01 12:00:54 [gpu_model_runner.py:1186] Model loading took 0.9276 GB and 38.500000 seconds",
          flush=True)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"version":"0.8.5.post1"}' if self.path == "/version" else b""
            self.send_response(200 if self.path in ("/health", "/version") else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
elif sys.argv[1:3] == ["bench", "serve"]:
    print(" ".join(sys.argv[3:]), flush=True)
    sys.stdout.write(open(os.environ["FAKE_TABLE"]).read())
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_serve_bench(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "vllm"
    fake.write_text(textwrap.dedent(FAKE_VLLM).replace("{python}", sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (bindir / "python3").symlink_to(sys.executable)
    script = _script(tmp_path, "vllm_serve_bench.sh")
    _script(tmp_path, "serve_bench.py")  # beside it, as the ConfigMap mounts both
    environment = {
        **os.environ,
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "PITSTOP_PORT": str(_free_port()),
        "PITSTOP_READY_TIMEOUT_SECONDS": "60",
        "FAKE_TABLE": str(FIXTURE),
        **env,
    }
    return subprocess.run(
        ["sh", str(script)], capture_output=True, text=True, timeout=120, env=environment, check=False
    )


def test_the_inference_script_prints_the_server_log_then_the_benchmark_and_stops_the_server(
    tmp_path: Path,
) -> None:
    done = _run_serve_bench(tmp_path, PITSTOP_MODEL="Qwen/Qwen2.5-0.5B-Instruct", PITSTOP_NUM_PROMPTS="50")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.index("Model loading took") < out.index("Serving Benchmark Result")
    # vllm bench serve is given the pod's own server, the model and the benchmark's shape.
    assert "--base-url http://127.0.0.1:" in out
    assert "--model Qwen/Qwen2.5-0.5B-Instruct --dataset-name random --random-input-len 512" in out
    assert "--num-prompts 50 --max-concurrency 8" in out
    # The engine measured, from its /version, before vLLM's own benchmark.
    assert out.index("ENGINE vllm 0.8.5.post1 (GET /version") < out.index("Serving Benchmark Result")
    assert "own serving client" not in out
    report = read_bench(out)
    metrics = report.metrics
    assert metrics["ttft_ms_p50"] == 97.49 and metrics["model_load_seconds"] == 38.5
    assert report.engine == "vllm 0.8.5.post1" and "server_ready_seconds" in metrics
    # The server was stopped: its port is free again.
    port = int(re.search(r"--base-url http://127.0.0.1:(\d+)", out).group(1))  # type: ignore[union-attr]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_the_inference_script_says_when_the_server_died_before_answering(tmp_path: Path) -> None:
    done = _run_serve_bench(tmp_path, FAKE_SERVE_FAILS="1")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[-2] == "RuntimeError: CUDA error: unspecified launch failure"
    assert re.fullmatch(r"vllm-serve-bench: vllm serve exited before it answered on port \d+", lines[-1])
    assert "Serving Benchmark Result" not in done.stdout


def test_the_acceptance_calls_run_the_engine_under_test() -> None:
    variables = _yaml(RUNBOOK)["vars"]
    releases = {p.name for p in (RUNBOOK.parent / "manifests" / "platform" / "vllm").iterdir()}
    assert releases <= set(variables["probe_vllm_min_driver"])
    calls = re.findall(r'bench: ("\{\{ acceptance_bench \| combine.*\}\}")', RUNBOOK.read_text())
    assert len(calls) == 2  # the preflight's baseline, then the acceptance stage
    current = {"current": {"vllm": "v0.6.3"}}
    scope = {
        **variables,
        "inventory": current,
        "hostvars": {"localhost": {"preflight": {"inventory": current}}},
    }
    before, after = (render(YAML(typ="safe").load(call), scope) for call in calls)
    assert before["inference"]["image"] == "vllm/vllm-openai:v0.6.3"
    assert after["inference"]["image"] == "vllm/vllm-openai:" + variables["targets"]["vllm"]
    documented = readme_table()
    for bench in (before, after):
        AcceptanceArgs.model_validate({"bench": bench})
        assert documented[bench["inference"]["image"]] == " ".join(bench["inference"]["command"])
        assert bench["training"] == variables["acceptance_bench"]["training"]


def test_a_cluster_without_vllm_runs_the_probe_as_given() -> None:
    variables = _yaml(RUNBOOK)["vars"]
    calls = re.findall(r'bench: ("\{\{ acceptance_bench \| combine.*\}\}")', RUNBOOK.read_text())
    none: dict[str, Any] = {"current": {}}
    scope = {**variables, "inventory": none, "hostvars": {"localhost": {"preflight": {"inventory": none}}}}
    for call in calls:
        bench = render(YAML(typ="safe").load(call), scope)
        assert bench["inference"]["image"] == variables["acceptance_bench"]["inference"]["image"]
