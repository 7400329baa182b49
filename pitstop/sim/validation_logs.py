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

from pitstop.gpu import emit
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


def _command(pod: Obj) -> list[str]:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return [str(a) for a in (containers[0].get("command") or []) + (containers[0].get("args") or [])]


def _level(pod: Obj) -> int:
    command = _command(pod)
    for flag in ("-r", "--run"):
        if flag in command and command.index(flag) + 1 < len(command):
            value = command[command.index(flag) + 1]
            if value.isdigit():
                return int(value)
    return 3


def dcgm(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    """`dcgmi diag -r N -j`: JSON, the tests of that level, failures with their DCGM_FR_* reason."""
    failing = list(profile.health.dcgm_failures)
    if profile.health.fails(kind):
        failing.append("Diagnostic")
    text = emit.dcgm_diag_json(_level(pod), profile.gpus, failing)
    failed = any('"status": "Fail"' in line for line in text.splitlines())
    return ValidationOutcome(succeeded=not failed, log=text)


def nccl(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    busbw = 0.0 if profile.health.fails(kind) else profile.health.nccl_busbw_gbps
    log = emit.nccl_all_reduce(profile.name, profile.gpu_product, profile.gpus, busbw)
    if profile.health.fails(kind):
        log += f"{profile.name}: Test NCCL failure common.cu:1005 'unhandled system error'\n"
    return ValidationOutcome(succeeded=not profile.health.fails(kind), log=log)


def cuda(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    visible = 0 if profile.health.fails(kind) else profile.gpus
    log = emit.device_query(profile.gpu_product, visible)
    return ValidationOutcome(succeeded=visible > 0, log=log)


def p2p(kind: str, profile: NodeProfile, pod: Obj) -> ValidationOutcome:
    # NVLink peer bandwidth follows the node's NCCL figure: a degraded fabric shows in both.
    peer = profile.health.nccl_busbw_gbps
    log = emit.p2p_bandwidth(profile.gpus, peer)
    return ValidationOutcome(succeeded=not profile.health.fails(kind), log=log)


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
register_log_producer("cuda", cuda)
register_log_producer("p2p", p2p)
