"""The shipped inference probe against a server that streams as vLLM 0.6.6's does
(`vllm_openai_stub`, built from vLLM's own serving_completion.py and protocol.py): pitstop's own
client `serve_bench.py` as the ConfigMap ships it, and `vllm_serve_bench.sh` with a stand-in
`vllm` of 0.6.x on PATH (its `serve` is the stub, and it has no `bench` sub-command, as vLLM
before 0.8 has none), so the script falls back to the client."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from pitstop.acceptance.bench import read_bench
from tests.integration.probes import vllm_openai_stub
from tests.integration.probes.vllm_openai_stub import DECODE_SECONDS, PREFILL_SECONDS, Stub

REPO = Path(__file__).resolve().parents[3]
CONFIG_MAP = REPO / "runbooks" / "manifests" / "probes" / "probe-scripts.yaml"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"

# vLLM 0.6.x's `vllm` (vllm/scripts.py: subparsers serve, complete, chat, required=True): any
# other sub-command is argparse's "invalid choice", exit status 2.
FAKE_VLLM_06 = """\
#!{python}
import os, sys
if sys.argv[1:2] == ["serve"]:
    print("INFO 12-03 09:00:00 api_server.py:712] vLLM API server version 0.6.6", flush=True)
    print("INFO 12-03 09:00:30 model_runner.py:1099] Loading model weights took 0.9276 GB", flush=True)
    port = sys.argv[sys.argv.index("--port") + 1]
    os.execv(sys.executable, [sys.executable, {stub!r}, "--port", port, "--version", "0.6.6"])
sys.stderr.write("usage: vllm [-h] [-v] {{serve,complete,chat}} ...\\n"
                 "vllm: error: argument subparser: invalid choice: %r (choose from 'serve', "
                 "'complete', 'chat')\\n" % sys.argv[1])
sys.exit(2)
"""


def _scripts(tmp_path: Path) -> Path:
    """The ConfigMap's files in one directory, as the Job mounts them at /opt/pitstop."""
    data: dict[str, str] = YAML(typ="safe").load(CONFIG_MAP)["data"]
    mount = tmp_path / "opt-pitstop"
    mount.mkdir()
    for key, text in data.items():
        (mount / key).write_text(text)
    return mount


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub(_free_port(), "0.6.6")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def _client(mount: Path, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(mount / "serve_bench.py"), "--base-url", f"http://127.0.0.1:{port}",
         "--model", MODEL, *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_client_measures_a_server_that_streams_as_vllm_does(tmp_path: Path, stub: Stub) -> None:
    mount = _scripts(tmp_path)
    done = _client(
        mount, stub.server_port, "--num-prompts", "24", "--max-concurrency", "4", "--input-len", "64",
        "--output-len", "16",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("serve-bench: pitstop's own serving client, not vLLM's benchmark: 24 prompts")
    assert lines[1] == "ENGINE vllm 0.6.6 (GET /version of the server measured)"
    assert "Serving Benchmark Result" not in done.stdout  # our lines, not vLLM's table
    report = read_bench(done.stdout)
    metrics = report.metrics
    assert report.engine == "vllm 0.6.6" and report.problems == []
    assert metrics["requests_succeeded"] == 24 and metrics["requests_failed"] == 0
    assert stub.requests == 24
    # The stub waits PREFILL_SECONDS before the first token and DECODE_SECONDS between tokens:
    # what the client reports cannot be less.
    assert metrics["ttft_ms_p50"] >= PREFILL_SECONDS * 1000
    assert metrics["tpot_ms_p50"] >= DECODE_SECONDS * 1000
    assert metrics["e2el_ms_p50"] >= (PREFILL_SECONDS + 15 * DECODE_SECONDS) * 1000
    assert metrics["requests_per_second"] > 0
    # 16 tokens per request from the usage event, over the run's time.
    assert metrics["output_tokens_per_second"] == pytest.approx(16 * metrics["requests_per_second"], rel=0.02)
    assert {"ttft_ms_p50", "tpot_ms_p50", "requests_per_second"} <= report.from_table


def test_failed_requests_are_counted_and_shown_with_the_servers_answer(tmp_path: Path) -> None:
    mount = _scripts(tmp_path)
    server = Stub(_free_port(), "0.6.6", fail_every=4)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        done = _client(mount, server.server_port, "--num-prompts", "12", "--max-concurrency", "2",
                       "--input-len", "8", "--output-len", "4")  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "failed: HTTP 400: " in done.stdout
    assert "This model's maximum context length is 32768 tokens." in done.stdout
    report = read_bench(done.stdout)
    assert report.metrics["requests_failed"] == 3 and report.metrics["requests_succeeded"] == 9
    assert report.problems == ["3 of 12 requests of pitstop's serving client failed"]


def test_the_client_says_when_the_server_does_not_answer(tmp_path: Path) -> None:
    mount = _scripts(tmp_path)
    port = _free_port()
    done = _client(mount, port, "--num-prompts", "2")
    assert done.returncode == 1
    assert done.stdout.startswith(
        f"serve-bench: cannot read the engine's version from http://127.0.0.1:{port}/version: "
    )
    assert "METRIC" not in done.stdout


def _run_script(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], int]:
    mount = _scripts(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "vllm"
    fake.write_text(FAKE_VLLM_06.format(python=sys.executable, stub=vllm_openai_stub.__file__))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (bindir / "python3").symlink_to(sys.executable)
    port = _free_port()
    environment: dict[str, Any] = {
        **os.environ,
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "PITSTOP_PORT": str(port),
        "PITSTOP_READY_TIMEOUT_SECONDS": "60",
        **env,
    }
    done = subprocess.run(
        ["sh", str(mount / "vllm_serve_bench.sh")],
        capture_output=True, text=True, timeout=180, env=environment, check=False,
    )  # fmt: skip
    return done, port


def test_the_probe_falls_back_to_the_client_on_an_engine_without_vllm_bench(tmp_path: Path) -> None:
    done, port = _run_script(
        tmp_path, PITSTOP_MODEL=MODEL, PITSTOP_NUM_PROMPTS="16", PITSTOP_MAX_CONCURRENCY="4",
        PITSTOP_INPUT_LEN="32", PITSTOP_OUTPUT_LEN="8",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # The server's log, the time it took to answer, why our client measures, then its lines.
    assert out.index("vLLM API server version 0.6.6") < out.index("METRIC server_ready_seconds=")
    assert "this image's vllm has no `vllm bench serve` (before vLLM 0.8)" in out
    assert out.index("METRIC server_ready_seconds=") < out.index("serve-bench: pitstop's own serving client")
    assert "16 prompts of 32 random token ids, 8 output tokens each (ignore_eos), at most 4 in flight" in out
    report = read_bench(out)
    assert report.engine == "vllm 0.6.6" and report.problems == []
    assert report.metrics["requests_succeeded"] == 16
    assert report.metrics["ttft_ms_p50"] >= PREFILL_SECONDS * 1000
    assert "server_ready_seconds" in report.metrics and "server_ready_seconds" not in report.from_table
    # vLLM 0.6 logs no load time: no model_load_seconds is made up.
    assert "model_load_seconds" not in report.metrics
    # The server was stopped: its port is free again.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
