"""Outcomes and logs of validation pods (label `pitstop.dev/validation=<kind>`).

A producer turns (kind, node profile, pod) into a `ValidationOutcome`: whether the container
succeeds, its log, and how long it runs. `dcgm` and `nccl` producers write output shaped
like `dcgmi diag -r 3` and nccl-tests' `all_reduce_perf`, driven by the node's health profile;
`xid` answers `dcgmi dmon` (DCGM's Xid and ECC fields) or `dmesg`, `ecc` answers `nvidia-smi -q`
as the container the probe got would (with or without GPUs);
`bench` runs a representative training or inference workload: the shipped probe scripts
(runbooks/manifests/probes, mounted from their ConfigMap) print what they print on a real node
(`pitstop_sim.bench_logs`: the training script's METRIC lines, vLLM's server log and benchmark
table), a script the image or its mounts do not have fails as python or sh says so, and any
other image is taken to print `METRIC name=value unit` lines (users' own benchmarks);
other kinds get a generic pass/fail log. Register more with `register_log_producer`.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pitstop.gpu import emit
from pitstop.kube.objects import annotations_of, meta
from pitstop_sim import bench_logs
from pitstop_sim.models import GpuEcc, NodeProfile

Obj = dict[str, Any]


@dataclass(frozen=True)
class ValidationOutcome:
    succeeded: bool
    log: str
    seconds: float | None = None  # None: use the scenario's timing.validation_seconds


LogProducer = Callable[[str, NodeProfile, Obj], ValidationOutcome]
# Set by the kubelet on a probe pod's copy when the `--host` its dcgmi names is a Service that
# exists in the cluster (the producers see only the pod).
HOSTENGINE_REACHABLE = "sim.pitstop.dev/hostengine-reachable"
# Set by the kubelet on a pod's copy: the files its ConfigMap volumes put in the container (JSON
# path -> the probe a shipped script says it is, `# pitstop-probe: <id>`, or "").
MOUNTED_FILES = "sim.pitstop.dev/mounted-files"
_PROBE_MARK = re.compile(r"^#\s*pitstop-probe:\s*(\S+)", re.MULTILINE)
# Public images whose contents the simulator knows: nothing of theirs is under /opt/pitstop.
_KNOWN_IMAGES = ("nvcr.io/nvidia/pytorch:", "vllm/vllm-openai:", "docker.io/vllm/vllm-openai:")
# nccl-tests in CoreWeave's images, by the commit their tag ends in (Dockerfile.ubuntu22's
# NCCL_TESTS_COMMITISH at that commit): 2cbb968 is v2.13.6 and one commit.
_COREWEAVE_NCCL_TESTS = {"0120901": "2.13.6"}
_PRODUCERS: dict[str, LogProducer] = {}

DCGM_TESTS = (
    (
        "Deployment",
        (
            "Denylist",
            "NVML Library",
            "CUDA Main Library",
            "Permissions and OS Blocks",
            "Persistence Mode",
            "Environment Variables",
            "Page Retirement/Row Remap",
            "Graphics Processes",
            "Inforom",
        ),
    ),
    ("Integration", ("PCIe",)),
    ("Hardware", ("GPU Memory", "Diagnostic")),
    ("Stress", ("Targeted Stress", "Targeted Power", "Memory Bandwidth")),
)


def register_log_producer(kind: str, producer: LogProducer) -> None:
    _PRODUCERS[kind] = producer


def produce(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    producer = _PRODUCERS.get(kind, _generic)
    return producer(kind, profile, pod)


def _command(pod: Obj) -> list[str]:
    """The container's command and arguments; a `sh -c "<script>"` is split into its words."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    words = [str(a) for a in (containers[0].get("command") or []) + (containers[0].get("args") or [])]
    if len(words) >= 3 and words[0] in ("sh", "/bin/sh", "bash", "/bin/bash") and words[1] == "-c":
        try:
            return words[:2] + shlex.split(words[2])
        except ValueError:
            return words
    return words


def hostengine_of(pod: Obj) -> str | None:
    """Where the probe's dcgmi finds nv-hostengine: "embedded" when the container starts one,
    the `--host` value when it names one, None when there is none (a bare `dcgmi diag`)."""
    command = _command(pod)
    if "nv-hostengine" in command:
        return "embedded"
    if "--host" in command and command.index("--host") + 1 < len(command):
        return command[command.index("--host") + 1]
    return None


def _image_tag(pod: Obj) -> str:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    image = str(containers[0].get("image") or "").split("@", 1)[0]
    _, sep, tag = image.rpartition(":")
    return tag if sep and "/" not in tag else ""


def _tool_version(pod: Obj, default: str) -> str:
    """The tool's version from the image the Job runs, as on a real node: the output of
    `dcgm:4.2.3-1-ubuntu22.04` is DCGM 4's, of `nccl-tests:2.11.0` the old table's."""
    tag = _image_tag(pod).lstrip("v")
    return tag if tag[:1].isdigit() else default


def _level(pod: Obj) -> int:
    command = _command(pod)
    for flag in ("-r", "--run"):
        if flag in command and command.index(flag) + 1 < len(command):
            value = command[command.index(flag) + 1]
            if value.isdigit():
                return int(value)
    return 3


def dcgm(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    """`dcgmi diag -r N -j`: JSON, the tests of that level, failures with their DCGM_FR_* reason
    — when there is a hostengine to talk to (started in the container, or a `--host` the
    kubelet found reachable: `sim.pitstop.dev/hostengine-reachable`). Without one, dcgmi's own
    connection failure (dcgmi/Command.cpp, dcgm_errors.c) and a non-zero exit."""
    engine, reachable = _hostengine_reachable(pod)
    if not reachable:
        return _no_hostengine(engine)
    failing = list(profile.health.dcgm_failures)
    if profile.health.fails(kind):
        failing.append("Diagnostic")
    text = emit.dcgm_diag_json(_level(pod), profile.gpus, failing, version=_tool_version(pod, "3.3.7"))
    failed = any('"status": "Fail"' in line for line in text.splitlines())
    return ValidationOutcome(succeeded=not failed, log=text)


def _nccl_versions(pod: Obj) -> tuple[str, str]:
    """(nccl-tests, NCCL) versions of the Job's image: a tag that is a version names nccl-tests'
    (`nccl-tests:2.11.0`); CoreWeave's name NCCL's and the commit that fixes nccl-tests'."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    image = str(containers[0].get("image") or "")
    built = re.search(r"-nccl(\d+\.\d+\.\d+)-\d+-([0-9a-f]{7})$", _image_tag(pod))
    if image.startswith("ghcr.io/coreweave/nccl-tests:") and built:
        return _COREWEAVE_NCCL_TESTS.get(built.group(2), "2.13.10"), built.group(1)
    return _tool_version(pod, "2.13.10"), "2.21.5"


def nccl(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    busbw = 0.0 if profile.health.fails(kind) else profile.health.nccl_busbw_gbps
    version, library = _nccl_versions(pod)
    name = emit.device_name(profile.gpu_product)
    log = emit.nccl_all_reduce(profile.name, name, profile.gpus, busbw, version=version, nccl=library)
    if profile.health.fails(kind):
        log += f"{profile.name}: Test NCCL failure common.cu:1005 'unhandled system error'\n"
    return ValidationOutcome(succeeded=not profile.health.fails(kind), log=log)


def cuda(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    visible = 0 if profile.health.fails(kind) else profile.gpus
    log = emit.device_query(emit.device_name(profile.gpu_product), visible)
    return ValidationOutcome(succeeded=visible > 0, log=log)


def p2p(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    # NVLink peer bandwidth follows the node's NCCL figure: a degraded fabric shows in both.
    peer = profile.health.nccl_busbw_gbps
    log = emit.p2p_bandwidth(profile.gpus, peer, product=emit.device_name(profile.gpu_product))
    return ValidationOutcome(succeeded=not profile.health.fails(kind), log=log)


def _env(pod: Obj, name: str) -> str | None:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    for entry in containers[0].get("env") or []:
        if entry.get("name") == name:
            return str(entry.get("value", ""))
    return None


def probe_of(text: str) -> str:
    """The probe a shipped script says it is (`# pitstop-probe: <id>` near its top), or ""."""
    found = _PROBE_MARK.search(text[:400])
    return found.group(1) if found else ""


def mounted_files(pod: Obj) -> dict[str, str]:
    """path -> probe id of the files the pod's ConfigMap volumes put in its container."""
    raw = annotations_of(pod).get(MOUNTED_FILES)
    if not raw:
        return {}
    try:
        files = json.loads(raw)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def _script(words: list[str]) -> tuple[str, str] | None:
    """(interpreter, script path) of `python X`, `python3 -u X`, `sh X`, `bash X`."""
    if not words:
        return None
    program = posixpath.basename(words[0])
    if program in ("sh", "bash", "dash") and len(words) > 2 and words[1] == "-c":
        return _script(words[2:])
    if re.fullmatch(r"python(3(\.\d+)?)?", program):
        for word in words[1:]:
            if word == "-m" or word == "-c":
                return None
            if not word.startswith("-"):
                return words[0], word
        return None
    if program in ("sh", "bash", "dash") and len(words) > 1 and not words[1].startswith("-"):
        return program, words[1]
    return None


def _no_such_script(interpreter: str, path: str) -> ValidationOutcome:
    """What the interpreter says of a script that is not there (CPython, dash, bash), exit 2/127."""
    program = posixpath.basename(interpreter)
    if program.startswith("python"):
        log = f"{interpreter}: can't open file '{path}': [Errno 2] No such file or directory\n"
    elif program == "bash":
        log = f"bash: {path}: No such file or directory\n"
    else:
        log = f"sh: 0: cannot open {path}: No such file\n"
    return ValidationOutcome(succeeded=False, log=log)


def _int_env(pod: Obj, name: str, default: int) -> int:
    value = (_env(pod, name) or "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else default


def _started(pod: Obj) -> datetime:
    stamp = str(meta(pod).get("creationTimestamp") or "")
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return datetime.now(UTC)


def _train_step(profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    """train_step.py in the probe's container: on the GPUs it was given, or on the CPU."""
    gpus = len(visible_gpus(profile, pod) or [])
    throughput = profile.health.train_samples_per_s if gpus else profile.health.train_samples_per_s / 50
    steps = _int_env(pod, "PITSTOP_TRAIN_STEPS", 300)
    if steps < 20:
        return ValidationOutcome(
            succeeded=False,
            log="usage: train_step.py [-h] [--steps STEPS] [--batch-size BATCH_SIZE] [--width WIDTH]\n"
            "                     [--checkpoint-dir CHECKPOINT_DIR] [--device {auto,cuda,cpu}]\n"
            "                     [--seed SEED]\n"
            "train_step.py: error: --steps must be at least 20\n",
        )
    log = bench_logs.train_step(
        gpus=gpus,
        device=emit.device_name(profile.gpu_product),
        steps=steps,
        batch_size=_int_env(pod, "PITSTOP_TRAIN_BATCH_SIZE", 512),
        width=_int_env(pod, "PITSTOP_TRAIN_WIDTH", 1024),
        samples_per_second=throughput,
    )
    return ValidationOutcome(succeeded=True, log=log)


def _vllm_serve_bench(profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    """vllm_serve_bench.sh in a vLLM image: the server's startup log, then `vllm bench serve`."""
    version = _image_tag(pod) or "latest"
    model = _env(pod, "PITSTOP_MODEL") or "Qwen/Qwen2.5-0.5B-Instruct"
    port = _int_env(pod, "PITSTOP_PORT", 8000)
    started = _started(pod)
    health = profile.health
    if not visible_gpus(profile, pod):
        failure = "RuntimeError: Failed to infer device type"
    elif health.fails("bench"):
        failure = "RuntimeError: CUDA error: unspecified launch failure"
    else:
        failure = None
    server = bench_logs.vllm_server_log(
        version,
        model=model,
        port=port,
        load_seconds=38.5,
        download_seconds=24.6,
        started=started,
        failure=failure,
    )
    if failure is not None:
        said = f"vllm-serve-bench: vllm serve exited before it answered on port {port}\n"
        return ValidationOutcome(succeeded=False, log=server + said)
    run = bench_logs.Serving(
        ttft_ms=health.inference_ttft_ms,
        tpot_ms=health.inference_tpot_ms,
        num_prompts=_int_env(pod, "PITSTOP_NUM_PROMPTS", 200),
        max_concurrency=_int_env(pod, "PITSTOP_MAX_CONCURRENCY", 8),
        input_len=_int_env(pod, "PITSTOP_INPUT_LEN", 512),
        output_len=_int_env(pod, "PITSTOP_OUTPUT_LEN", 128),
    )
    log = server + f"METRIC server_ready_seconds={bench_logs.server_ready_seconds(38.5)} s\n"
    # The script's own client, beside it in the ConfigMap (an older ConfigMap lacks it).
    script = _script(_command(pod))
    client = f"{posixpath.dirname(script[1]) if script else '/opt/pitstop'}/serve_bench.py"
    missing = (
        None
        if mounted_files(pod).get(client) == bench_logs.CLIENT_PROBE
        else f"python3: can't open file '{client}': [Errno 2] No such file or directory\n"
    )
    if bench_logs.has_vllm_bench(version):
        engine = missing or bench_logs.engine_line(version)
        return ValidationOutcome(succeeded=True, log=log + engine + bench_logs.vllm_bench_serve(version, run))
    log += bench_logs.NO_VLLM_BENCH + "\n"
    if missing:
        return ValidationOutcome(succeeded=False, log=log + missing)
    measured = bench_logs.serve_bench_client(version, run, model=model, port=port)
    return ValidationOutcome(succeeded=True, log=log + measured)


_PROBES: dict[str, Callable[[NodeProfile, Obj], ValidationOutcome]] = {
    bench_logs.TRAIN_PROBE: _train_step,
    bench_logs.VLLM_PROBE: _vllm_serve_bench,
}


def bench(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    """Representative workloads. A script the command runs from a mounted ConfigMap that is one
    of the shipped probes prints as on a real node; one that is not there (not in the mounted
    ConfigMap, or under /opt/pitstop of a public image the simulator knows) fails as its
    interpreter says. Otherwise the image is the user's own: a short log ending in `METRIC
    <name>=<value> <unit>` lines (env PITSTOP_BENCH = training | inference), from the node's health."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    image = str(containers[0].get("image") or "")
    script = _script(_command(pod))
    if script is not None:
        interpreter, path = script
        files = mounted_files(pod)
        if path in files:
            probe = _PROBES.get(files[path])
            if probe is not None:
                return probe(profile, pod)
        elif any(path.startswith(m + "/") for m in _mount_paths(pod)) or (
            image.startswith(_KNOWN_IMAGES) and path.startswith("/opt/pitstop/")
        ):
            return _no_such_script(interpreter, path)
    return _metric_lines(kind, profile, pod)


def _mount_paths(pod: Obj) -> list[str]:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return [str(m.get("mountPath") or "").rstrip("/") for m in containers[0].get("volumeMounts") or []]


def _metric_lines(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    """A user's own benchmark image (env PITSTOP_BENCH = training | inference): a short log
    ending in `METRIC <name>=<value> <unit>` lines, from the node's health."""
    health = profile.health
    workload = _env(pod, "PITSTOP_BENCH")
    head = f"bench {workload} on {profile.name} ({profile.gpu_product} x{profile.gpus})\n"
    if workload not in ("training", "inference"):
        return ValidationOutcome(
            succeeded=False,
            log=f"bench: PITSTOP_BENCH must be 'training' or 'inference', got {workload!r}\n",
        )
    if health.fails(kind):
        return ValidationOutcome(
            succeeded=False, log=head + "RuntimeError: CUDA error: unspecified launch failure\n"
        )
    if workload == "training":
        # Loss falls over the run; a slower node still converges, only its throughput drops.
        losses = [round(2.31 * (0.93**step), 4) for step in range(0, 11)]
        metrics = [
            ("samples_per_second", health.train_samples_per_s, "samples/s"),
            ("loss_first", losses[0], "loss"),
            ("loss_last", losses[-1], "loss"),
            ("checkpoint_restore_seconds", 14.2, "s"),
        ]
        body = "".join(f"step {i * 10} loss {loss:.4f}\n" for i, loss in enumerate(losses))
    else:
        metrics = [
            ("model_load_seconds", 38.5, "s"),
            ("ttft_ms_p50", health.inference_ttft_ms, "ms"),
            ("tpot_ms_p50", health.inference_tpot_ms, "ms"),
            # Decode-bound: requests per second scale with the inverse of the time per token.
            ("requests_per_second", round(24.0 * 22.0 / max(health.inference_tpot_ms, 0.1), 2), "req/s"),
        ]
        body = "loaded model in 38.5 s\nserving 512 requests, concurrency 32\n"
    lines = "".join(f"METRIC {name}={value:g} {unit}\n" for name, value, unit in metrics)
    return ValidationOutcome(succeeded=True, log=head + body + lines)


def _generic(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    ok = not profile.health.fails(kind)
    verdict = "PASS" if ok else "FAIL"
    log = f"validation {kind} on {profile.name} ({profile.gpu_product} x{profile.gpus}): {verdict}\n"
    if profile.health.xid_errors:
        log += "".join(
            f"NVRM: Xid (PCI:0000:{i:02x}:00): {xid}\n" for i, xid in enumerate(profile.health.xid_errors)
        )
    return ValidationOutcome(succeeded=ok, log=log)


def _hostengine_reachable(pod: Obj) -> tuple[str | None, bool]:
    engine = hostengine_of(pod)
    reachable = engine == "embedded" or (
        engine is not None and annotations_of(pod).get(HOSTENGINE_REACHABLE) == "true"
    )
    return engine, reachable


def _no_hostengine(engine: str | None) -> ValidationOutcome:
    """dcgmi's own words when it cannot reach nv-hostengine (dcgmi/Command.cpp, dcgm_errors.c)."""
    return ValidationOutcome(
        succeeded=False,
        log=(
            f"Error: unable to establish a connection to the specified host: {engine or 'localhost'}\n"
            "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
        ),
    )


def _gpu_limit(pod: Obj) -> int:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    resources = containers[0].get("resources") or {}
    for part in ("limits", "requests"):
        value = (resources.get(part) or {}).get("nvidia.com/gpu")
        if value is not None:
            try:
                return int(value)
            except (TypeError, ValueError):
                return 0
    return 0


def visible_gpus(profile: NodeProfile, pod: Obj) -> list[int] | None:
    """The GPUs (indices on the node) the NVIDIA Container Toolkit gives the container: those
    the device plugin allocated to its `nvidia.com/gpu` request (here the first ones), else what
    `NVIDIA_VISIBLE_DEVICES` names (`all`, indices; `none`: no GPU but the driver's tools).
    None when it is unset, empty or `void`: the container is a plain runc one, without the
    driver's libraries and tools (nvidia-smi) at all."""
    wanted = _gpu_limit(pod)
    if wanted > 0:
        return list(range(min(wanted, profile.gpus)))
    env = (_env(pod, "NVIDIA_VISIBLE_DEVICES") or "").strip()
    if env in ("", "void"):
        return None
    if env == "none":
        return []
    if env == "all":
        return list(range(profile.gpus))
    picked = [int(part) for part in env.split(",") if part.strip().isdigit() and int(part) < profile.gpus]
    return picked if picked else list(range(profile.gpus))  # UUIDs: the simulator has none; all


def _ecc_states(profile: NodeProfile) -> dict[int, emit.GpuMemoryState]:
    out: dict[int, emit.GpuMemoryState] = {}
    for entry in profile.health.ecc:
        # A scenario regression's override arrives as a plain dict (model_copy does not validate).
        gpu = entry if isinstance(entry, GpuEcc) else GpuEcc.model_validate(entry)
        out[gpu.gpu] = emit.GpuMemoryState(
            volatile_uncorrectable=gpu.volatile_uncorrectable,
            aggregate_uncorrectable=max(gpu.aggregate_uncorrectable, gpu.volatile_uncorrectable),
            volatile_correctable=gpu.volatile_correctable,
            aggregate_correctable=gpu.volatile_correctable,
            remap_pending=gpu.remap_pending,
            remap_failure=gpu.remap_failure,
        )
    return out


def ecc(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    """`nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` in the probe's container (through
    `sh -c`). It is there only when the container was given GPUs (a `nvidia.com/gpu` request or
    `NVIDIA_VISIBLE_DEVICES`): otherwise dash says it is not found (exit 127), with
    `NVIDIA_VISIBLE_DEVICES=none` nvidia-smi finds no device (exit 6). It prints each visible
    GPU's counters from the node's health (`ecc`), in its driver's layout."""
    gpus = visible_gpus(profile, pod)
    if gpus is None:
        return ValidationOutcome(succeeded=False, log="sh: 1: nvidia-smi: not found\n")
    if not gpus:
        return ValidationOutcome(succeeded=False, log="No devices were found\n")
    if profile.health.fails(kind):
        return ValidationOutcome(
            succeeded=False,
            log="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
            "that the latest NVIDIA driver is installed and running.\n\n",
        )
    states = _ecc_states(profile)
    text = emit.nvidia_smi_q_ecc(
        emit.device_name(profile.gpu_product),
        profile.driver_version,
        [(i, states.get(i, emit.GpuMemoryState())) for i in gpus],
    )
    return ValidationOutcome(succeeded=True, log=text)


def _dmon(profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    """`dcgmi dmon -e 230,310,311 -c 1`: with a reachable hostengine, one row per GPU it
    watches. A hostengine that has run on the node (`--host`) saw the node's Xids (field 230:
    the last one per GPU); one started in the container has seen none (`N/A`). The ECC fields
    are NVML's volatile counters, whoever asks."""
    engine, reachable = _hostengine_reachable(pod)
    if not reachable:
        return _no_hostengine(engine)
    command = _command(pod)
    fields = [230, 310, 311]
    if "-e" in command and command.index("-e") + 1 < len(command):
        fields = [int(f) for f in command[command.index("-e") + 1].split(",") if f.strip().isdigit()]
    if engine == "embedded":
        gpus = visible_gpus(profile, pod) or []
        xids: dict[int, int] = {}
    else:
        gpus = list(range(profile.gpus))
        xids = {i % max(profile.gpus, 1): code for i, code in enumerate(profile.health.xid_errors)}
    states = _ecc_states(profile)
    rows: dict[int, dict[int, int | None]] = {}
    for gpu in gpus:
        state = states.get(gpu, emit.GpuMemoryState())
        known = {230: xids.get(gpu), 310: state.volatile_correctable, 311: state.volatile_uncorrectable}
        rows[gpu] = {f: known.get(f) for f in fields}
    return ValidationOutcome(succeeded=True, log=emit.dcgmi_dmon(fields, rows, _tool_version(pod, "3.3.7")))


def xid(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    """The Xid probe: `dcgmi dmon` (DCGM's fields, see `_dmon`) or `dmesg` in the probe's
    container: the node's kernel log (its Xid lines) when the container is privileged; otherwise
    the kernel refuses (dmesg_restrict=1), as busybox's dmesg reports it, and the command fails."""
    command = _command(pod)
    if "dcgmi" in command and "dmon" in command:
        return _dmon(profile, pod)
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    privileged = bool((containers[0].get("securityContext") or {}).get("privileged"))
    if not privileged:
        return ValidationOutcome(succeeded=False, log="dmesg: klogctl: Operation not permitted\n")
    lines = "".join(
        f"[{100 + i}.000000] NVRM: Xid (PCI:0000:{i:02x}:00): {code}, pid=1234, name=python3\n"
        for i, code in enumerate(profile.health.xid_errors)
    )
    return ValidationOutcome(succeeded=True, log=lines)


register_log_producer("dcgm", dcgm)
register_log_producer("xid", xid)
register_log_producer("ecc", ecc)
register_log_producer("nccl", nccl)
register_log_producer("cuda", cuda)
register_log_producer("p2p", p2p)
register_log_producer("bench", bench)
