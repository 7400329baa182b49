"""Outcomes and logs of validation pods (label `pitstop.dev/validation=<kind>`).

A producer turns (kind, node profile, pod) into a `ValidationOutcome`: whether the container
succeeds, its log, and how long it runs. `dcgm` and `nccl` producers write output shaped
like `dcgmi diag -r 3` and nccl-tests' `all_reduce_perf`, driven by the node's health profile;
other kinds get a generic pass/fail log. Register more with `register_log_producer`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pitstop.sim.models import NodeProfile

Obj = dict[str, Any]


@dataclass(frozen=True)
class ValidationOutcome:
    succeeded: bool
    log: str
    seconds: float | None = None  # None: use the scenario's timing.validation_seconds


LogProducer = Callable[[str, NodeProfile, Obj], ValidationOutcome]
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


def _failing(profile: NodeProfile, test: str) -> bool:
    wanted = {t.lower() for t in profile.health.dcgm_failures}
    short = test.lower().replace("gpu ", "")
    return test.lower() in wanted or short in wanted


def dcgm(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    width = 47
    lines = [
        "Successfully ran diagnostic for group.",
        "+---------------------------+------------------------------------------------+",
        "| Diagnostic                | Result                                         |",
        "+===========================+================================================+",
        "|-----  Metadata  ----------+------------------------------------------------|",
        f"| DCGM Version              | {'3.3.7':<{width}}|",
        f"| Driver Version Detected   | {profile.driver_version:<{width}}|",
        f"| GPU Device IDs Detected   | {','.join(['2330'] * profile.gpus):<{width}}|"[:80],
    ]
    failed = False
    for section, tests in DCGM_TESTS:
        lines.append(f"|-----  {section + ' ':-<19}+------------------------------------------------|")
        for test in tests:
            if _failing(profile, test) or profile.health.fails(kind):
                failed = failed or _failing(profile, test)
                result = "Fail"
            else:
                result = "Pass"
            lines.append(f"| {test:<26}| {result:<{width}}|")
            if result == "Fail":
                lines.append(f"| Warning                   | {'GPU 0: ' + test + ' check failed':<{width}}|")
    lines.append("+---------------------------+------------------------------------------------+")
    failed = failed or profile.health.fails(kind)
    return ValidationOutcome(succeeded=not failed, log="\n".join(lines) + "\n")


def nccl(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    busbw = 0.0 if profile.health.fails(kind) else profile.health.nccl_busbw_gbps
    lines = [
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20",
        "#",
        "# Using devices",
    ]
    lines += [
        f"#  Rank {i:2d} Group  0 Pid   {1000 + i} on {profile.name:>12} device  {i} [0x{i:02x}] "
        f"{profile.gpu_product}"
        for i in range(max(1, profile.gpus))
    ]
    lines += [
        "#",
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)",
    ]
    size = 1 << 20
    while size <= 8 << 30:
        ramp = min(1.0, size / float(512 << 20))
        bw = busbw * (0.15 + 0.85 * ramp)
        alg = bw * max(1, profile.gpus) / (2 * max(1, profile.gpus - 1)) if profile.gpus > 1 else bw
        time_us = size / max(alg, 0.001) / 1000
        lines.append(
            f"{size:12d} {size // 4:13d}     float     sum      -1 {time_us:8.1f} {alg:7.2f} {bw:7.2f}      0"
            f" {time_us:8.1f} {alg:7.2f} {bw:7.2f}      0"
        )
        size <<= 2
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {busbw:.2f} ", "#"]
    if profile.health.fails(kind):
        lines.append(f"{profile.name}: Test NCCL failure common.cu:1005 'unhandled system error'")
    return ValidationOutcome(succeeded=not profile.health.fails(kind), log="\n".join(lines) + "\n")


def _generic(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    ok = not profile.health.fails(kind)
    verdict = "PASS" if ok else "FAIL"
    log = f"validation {kind} on {profile.name} ({profile.gpu_product} x{profile.gpus}): {verdict}\n"
    if profile.health.xid_errors:
        log += "".join(
            f"NVRM: Xid (PCI:0000:{i:02x}:00): {xid}\n" for i, xid in enumerate(profile.health.xid_errors)
        )
    return ValidationOutcome(succeeded=ok, log=log)


register_log_producer("dcgm", dcgm)
register_log_producer("nccl", nccl)
