"""Outcomes and logs of validation pods (label `pitstop.dev/validation=<kind>`).

A producer turns (kind, node profile, pod) into a `ValidationOutcome`: whether the container
succeeds, its log, and how long it runs. `dcgm` and `nccl` producers write output shaped
like `dcgmi diag -r 3` and nccl-tests' `all_reduce_perf`, driven by the node's health profile;
`xid` answers `dcgmi dmon` (DCGM's Xid and ECC fields) or `dmesg`, `ecc` answers `nvidia-smi -q`
as the container the probe got would (with or without GPUs);
`bench` runs a representative training or inference workload (`METRIC name=value unit` lines);
other kinds get a generic pass/fail log. Register more with `register_log_producer`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pitstop.gpu import emit
from pitstop.kube.objects import annotations_of
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


def nccl(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    busbw = 0.0 if profile.health.fails(kind) else profile.health.nccl_busbw_gbps
    version = _tool_version(pod, "2.13.10")
    name = emit.device_name(profile.gpu_product)
    log = emit.nccl_all_reduce(profile.name, name, profile.gpus, busbw, version=version)
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


def bench(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    """Representative workloads (env PITSTOP_BENCH = training | inference): a short log ending
    in `METRIC <name>=<value> <unit>` lines, from the node's health."""
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
