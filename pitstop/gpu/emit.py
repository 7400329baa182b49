"""Output in the real formats of DCGM diag (`-j`), nccl-tests, deviceQuery and
p2pBandwidthLatencyTest, made from a node's figures.

The rehearsal cluster's validation pods print these, so the GPU modules parse on the
simulator exactly what they parse on a real node (and tests can round-trip them).
"""

from __future__ import annotations

import json
from typing import Any

from pitstop.gpu.dcgm import DCGM_FR_CODES

# Tests `dcgmi diag -r N` runs, by the level that adds them.
DCGM_LEVEL_TESTS: dict[int, list[tuple[str, str]]] = {
    1: [
        ("Deployment", "Denylist"),
        ("Deployment", "NVML Library"),
        ("Deployment", "CUDA Main Library"),
        ("Deployment", "Permissions and OS Blocks"),
        ("Deployment", "Persistence Mode"),
        ("Deployment", "Environment Variables"),
        ("Deployment", "Page Retirement/Row Remap"),
        ("Deployment", "Graphics Processes"),
        ("Deployment", "Inforom"),
    ],
    2: [("Integration", "PCIe"), ("Hardware", "GPU Memory")],
    3: [
        ("Hardware", "Diagnostic"),
        ("Stress", "Targeted Stress"),
        ("Stress", "Targeted Power"),
        ("Stress", "Memory Bandwidth"),
    ],
    4: [("Hardware", "Memtest"), ("Hardware", "Pulse Test")],
}

# The reason DCGM reports when each test fails, and the shape of its message.
DCGM_FAILURE: dict[str, tuple[str, str]] = {
    "GPU Memory": ("DCGM_FR_FAULTY_MEMORY", "Found {n} faulty memory elements on GPU {gpu}"),
    "Memtest": ("DCGM_FR_FAULTY_MEMORY", "Found {n} faulty memory elements on GPU {gpu}"),
    "PCIe": ("DCGM_FR_PCIE_REPLAY_VIOLATION", "GPU {gpu} PCIe replay count violation: {n} replays"),
    "Memory Bandwidth": (
        "DCGM_FR_MEMORY_BANDWIDTH",
        "GPU {gpu} only achieved a memory bandwidth of {n} GB/s",
    ),
    "Targeted Power": (
        "DCGM_FR_TARGET_POWER",
        "Max power of {n} did not reach desired power minimum on GPU {gpu}",
    ),
    "Targeted Stress": (
        "DCGM_FR_STRESS_LEVEL",
        "Max stress level of {n} did not reach desired minimum on GPU {gpu}",
    ),
    "Diagnostic": ("DCGM_FR_CUDA_API", "Error using CUDA API cuLaunchKernel on GPU {gpu}"),
    "Pulse Test": ("DCGM_FR_TARGET_POWER", "Pulse test could not reach power level {n} on GPU {gpu}"),
}


def _matches(test: str, failing: list[str]) -> bool:
    names = {f.lower() for f in failing}
    return test.lower() in names or test.lower().replace("gpu ", "") in names


def dcgm_diag_json(level: int, gpus: int, failing: list[str], version: str = "3.3.7") -> str:
    """`dcgmi diag -r <level> -j` output; tests named in `failing` fail on GPU 0."""
    categories: dict[str, list[dict[str, Any]]] = {}
    for lvl in range(1, max(1, min(level, 4)) + 1):
        for category, test in DCGM_LEVEL_TESTS[lvl]:
            per_gpu = category != "Deployment"
            results: list[dict[str, Any]] = []
            for gpu in range(max(1, gpus)) if per_gpu else [None]:
                result: dict[str, Any] = {"status": "Pass"}
                if gpu is not None:
                    result = {"gpu_id": str(gpu), "status": "Pass"}
                if _matches(test, failing) and gpu in (0, None):
                    reason, template = DCGM_FAILURE.get(
                        test, ("DCGM_FR_INTERNAL", "Internal error on GPU {gpu}")
                    )
                    result["status"] = "Fail"
                    result["warnings"] = [
                        {
                            "error_category": 10,
                            "error_id": DCGM_FR_CODES[reason],
                            "error_severity": 2,
                            "warning": template.format(n=3, gpu=gpu or 0),
                        }
                    ]
                results.append(result)
            categories.setdefault(category, []).append({"name": test, "results": results})
    doc = {
        "DCGM GPU Diagnostic": {
            "test_categories": [{"category": c, "tests": t} for c, t in categories.items()],
            "version": version,
        }
    }
    return "Successfully ran diagnostic for group.\n" + json.dumps(doc, indent="\t") + "\n"


def nccl_all_reduce(node: str, product: str, gpus: int, busbw_gbps: float) -> str:
    """`all_reduce_perf -b 64M -e 4G -f 4 -g <gpus>` output averaging `busbw_gbps`."""
    n = max(1, gpus)
    lines = [
        f"# nThread 1 nGpus {n} minBytes 67108864 maxBytes 4294967296 step: 4(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        *(
            f"#  Rank {i:2d} Group  0 Pid  {4100 + i:5d} on {node:>12} device {i:2d} "
            f"[0x{16 + i:02x}] {product}"
            for i in range(n)
        ),
        "#",
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)       ",
    ]
    factor = 2 * (n - 1) / n if n > 1 else 1.0
    # Message sizes 64 MiB .. 4 GiB; bandwidth ramps up with size. Rows are scaled so that
    # the reported average is exactly `busbw_gbps`: the figure a node profile states is the
    # `# Avg bus bandwidth` line, which is what pitstop compares with minimums and baselines.
    sizes = [64 << 20, 256 << 20, 1 << 30, 4 << 30]
    shape = [0.85 + 0.15 * min(1.0, size / float(1 << 30)) for size in sizes]
    scale = busbw_gbps / (sum(shape) / len(shape))
    for size, weight in zip(sizes, shape, strict=True):
        bw = weight * scale
        alg = bw / factor
        time_us = size / max(alg, 1e-3) / 1e3
        lines.append(
            f"{size:12d} {size // 4:13d}     float     sum      -1 {time_us:8.1f} {alg:7.2f} {bw:7.2f}      0"
            f" {time_us:8.1f} {alg:7.2f} {bw:7.2f}      0"
        )
    avg = busbw_gbps
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:.4f} ", "#"]
    return "\n".join(lines) + "\n"


def device_query(product: str, gpus: int, driver: str = "12.4", runtime: str = "12.4") -> str:
    lines = [
        "./deviceQuery Starting...",
        "",
        " CUDA Device Query (Runtime API) version (CUDART static linking)",
        "",
    ]
    if gpus == 0:
        lines += ["cudaGetDeviceCount returned 100", "-> no CUDA-capable device is detected", "Result = FAIL"]
        return "\n".join(lines) + "\n"
    lines.append(f"Detected {gpus} CUDA Capable device(s)")
    for i in range(gpus):
        lines += [
            "",
            f'Device {i}: "{product}"',
            f"  CUDA Driver Version / Runtime Version          {driver} / {runtime}",
            "  CUDA Capability Major/Minor version number:    9.0",
        ]
    lines += [
        "",
        f"deviceQuery, CUDA Driver = CUDART, CUDA Driver Version = {driver}, "
        f"CUDA Runtime Version = {runtime}, NumDevs = {gpus}",
        "Result = PASS",
    ]
    return "\n".join(lines) + "\n"


def p2p_bandwidth(
    gpus: int, peer_gbps: float, slow_pair: tuple[int, int] | None = None, slow_gbps: float = 0.0
) -> str:
    """`p2pBandwidthLatencyTest` matrices; `slow_pair` models one degraded NVLink."""
    n = max(1, gpus)

    def matrix(title: str, peer: float, local: float) -> list[str]:
        out = [title, "   D\\D" + "".join(f"{j:7d}" for j in range(n)) + " "]
        for i in range(n):
            row = []
            for j in range(n):
                value = local if i == j else peer
                if slow_pair and {i, j} == set(slow_pair):
                    value = slow_gbps
                row.append(f" {value:7.2f}")
            out.append(f"{i:6d}" + "".join(row) + " ")
        return out

    lines = ["[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"]
    lines += matrix("Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)", 40.0, 1630.0)
    lines += matrix("Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)", peer_gbps, 1630.0)
    lines += matrix("Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)", peer_gbps * 1.89, 1650.0)
    return "\n".join(lines) + "\n"
