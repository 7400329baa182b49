"""Outcomes and logs of validation pods (label `pitstop.dev/validation=<kind>`).

A producer turns (kind, node profile, pod) into a `ValidationOutcome`: whether the container
succeeds, its log, and how long it runs. `dcgm` and `nccl` producers write output shaped
like `dcgmi diag -r 3` and nccl-tests' `all_reduce_perf`, driven by the node's health profile;
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
from pitstop_sim.models import NodeProfile

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
    engine = hostengine_of(pod)
    reachable = engine == "embedded" or (
        engine is not None and annotations_of(pod).get(HOSTENGINE_REACHABLE) == "true"
    )
    if not reachable:
        host = engine or "localhost"
        return ValidationOutcome(
            succeeded=False,
            log=(
                f"Error: unable to establish a connection to the specified host: {host}\n"
                "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
            ),
        )
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


def xid(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    """`dmesg` in the probe's container: the node's kernel log (its Xid lines) when the
    container is privileged; otherwise the kernel refuses (dmesg_restrict=1), as busybox's dmesg
    reports it, and the command fails."""
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
register_log_producer("nccl", nccl)
register_log_producer("cuda", cuda)
register_log_producer("p2p", p2p)
register_log_producer("bench", bench)
