"""Output in the real formats of DCGM diag (`-j`) and dmon, nccl-tests, deviceQuery,
p2pBandwidthLatencyTest and `nvidia-smi -q` (ECC sections), made from a node's figures.

The rehearsal cluster's validation pods print these, so the GPU modules parse on the
simulator exactly what they parse on a real node (and tests can round-trip them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
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


def _dcgm_warning(test: str, gpu: int, *, text_key: str = "warning") -> dict[str, Any]:
    reason, template = DCGM_FAILURE.get(test, ("DCGM_FR_INTERNAL", "Internal error on GPU {gpu}"))
    return {
        "error_category": 10,
        "error_id": DCGM_FR_CODES[reason],
        "error_severity": 2,
        text_key: template.format(n=3, gpu=gpu),
    }


def _dcgm_tests(level: int) -> list[tuple[str, str]]:
    return [t for lvl in range(1, max(1, min(level, 4)) + 1) for t in DCGM_LEVEL_TESTS[lvl]]


def dcgm_diag_json(
    level: int, gpus: int, failing: list[str], version: str = "3.3.7", driver: str = "550.90.07"
) -> str:
    """`dcgmi diag -r <level> -j` output of DCGM `version`; tests named in `failing` fail on
    GPU 0. Laid out as that version's dcgmi writes it (NVIDIA/DCGM dcgmi/Diag.cpp; compared
    with real outputs in tests/fixtures/real/dcgm): 2.x `gpu_ids` and a plain-string
    `warnings`, no version; 3.x `gpu_id`, warning objects, the version at the document's root;
    4.x "DCGM Diagnostic", entities, `test_summary`, `entity_groups` and `metadata`. A result
    is Pass, Skip or Fail: dcgmi's JSON never says Warn."""
    major = (_tool_version(version) or (3,))[0]
    n = max(1, gpus)
    categories: dict[str, list[dict[str, Any]]] = {}
    for category, test in _dcgm_tests(level):
        per_gpu = category != "Deployment"
        fails = _matches(test, failing)
        results: list[dict[str, Any]] = []
        for gpu in range(n) if per_gpu else [0]:
            failed = fails and gpu == 0
            if major >= 4:
                result: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu}
                result["status"] = "Fail" if failed else "Pass"
                if failed:
                    result["warnings"] = [_dcgm_warning(test, gpu)]
            elif major == 3:
                result = {"gpu_id": str(gpu)} if per_gpu else {}
                result["status"] = "Fail" if failed else "Pass"
                if failed:
                    # dcgmi 3.x writes a software test's message under "warnings" (Diag.cpp).
                    result["warnings"] = [
                        _dcgm_warning(test, gpu, text_key="warning" if per_gpu else "warnings")
                    ]
            else:  # 2.x: the software tests' results name no GPU (Diag.cpp 2.4.7)
                result = {"gpu_ids": str(gpu)} if per_gpu else {}
                result["status"] = "Fail" if failed else "Pass"
                if failed:
                    result["warnings"] = _dcgm_warning(test, gpu)["warning"]
            results.append(result)
        entry: dict[str, Any] = {"name": test, "results": results}
        if major >= 4:
            entry["test_summary"] = {"status": "Fail" if fails else "Pass"}
        categories.setdefault(category, []).append(entry)
    body = {"test_categories": [{"category": c, "tests": t} for c, t in categories.items()]}
    doc: dict[str, Any]
    if major >= 4:
        doc = {
            "DCGM Diagnostic": body,
            "entity_groups": [
                {
                    "entities": [
                        {"device_id": "2330", "entity_id": g, "serial_num": f"165232{g:07d}"}
                        for g in range(n)
                    ],
                    "entity_group": "GPU",
                    "entity_group_id": 1,
                }
            ],
            "metadata": {"Driver Version Detected": driver, "version": version.split("-")[0]},
        }
    elif major == 3:
        doc = {
            "DCGM GPU Diagnostic": body,
            "Driver Version Detected": driver,
            "GPU Device IDs": ["2330"] * n,
            "GPU Device Serials": {str(g): f"165232{g:07d}" for g in range(n)},
            "version": version.split("-")[0],
        }
    else:
        doc = {"DCGM GPU Diagnostic": body}
    return "Successfully ran diagnostic for group.\n" + json.dumps(doc, indent="\t") + "\n"


# Device names as the driver reports them (nvidia-smi, deviceQuery, nccl-tests, p2p test), for
# GPU Feature Discovery's `nvidia.com/gpu.product` label, which is the name with spaces made
# dashes: the label alone cannot tell which dashes were spaces.
DEVICE_NAMES = {
    name.replace(" ", "-"): name
    for name in (
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100 80GB PCIe",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 PCIe",
        "NVIDIA H200",
        "NVIDIA B200",
        "NVIDIA GH200 120GB",
        "NVIDIA L40S",
        "NVIDIA GeForce RTX 4090",
        "Tesla V100-SXM2-32GB",
    )
}


def device_name(product_label: str) -> str:
    """The driver's name for a GPU from its GFD product label."""
    return DEVICE_NAMES.get(product_label, product_label.replace("-", " "))


def _tool_version(text: str) -> tuple[int, ...]:
    """`2.13.10`, `v2.18.3`, `4.2.3-1-ubuntu22.04` -> (2, 13, 10), (2, 18, 3), (4, 2, 3)."""
    digits = re.match(r"v?(\d+(?:\.\d+)*)", text.strip())
    return tuple(int(part) for part in digits.group(1).split(".")) if digits else ()


# The table header as each layout's printf writes it (NVIDIA/nccl-tests): before 2.10
# all_reduce.cu's print_header with a 6-wide type, 2.10-2.12 with an 8-wide one, 2.13
# common.cu, 2.17 and later util.cu's writeResultHeader (no timestamps). Per layout: the
# line above, the names' and the units' formats.
_OLD_NAMES = (
    "size",
    "count",
    "type",
    "redop",
    "time",
    "algbw",
    "busbw",
    "error",
    "time",
    "algbw",
    "busbw",
    "error",
)
_OLD_UNITS = ("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
_NAMES = (
    "size",
    "count",
    "type",
    "redop",
    "root",
    "time",
    "algbw",
    "busbw",
    "#wrong",
    "time",
    "algbw",
    "busbw",
    "#wrong",
)
_UNITS = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
_ABOVE = "out-of-place                       in-place          "
_NCCL_HEADERS: dict[str, tuple[str, str, str, tuple[str, ...], tuple[str, ...]]] = {
    "2.0": (
        "# %10s  %12s  %6s  %6s            " + _ABOVE,
        "# %10s  %12s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s",
        "# %10s  %12s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s",
        _OLD_NAMES,
        _OLD_UNITS,
    ),
    "2.10": (
        "# %10s  %12s  %8s  %6s            " + _ABOVE,
        "# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s",
        "# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s",
        _OLD_NAMES,
        _OLD_UNITS,
    ),
    "2.13": (
        "# %10s  %12s  %8s  %6s  %6s           " + _ABOVE,
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s",
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s",
        _NAMES,
        _UNITS,
    ),
    "2.17": (
        "# %10s  %12s  %8s  %6s  %6s           " + _ABOVE,
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s ",
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s ",
        _NAMES,
        _UNITS,
    ),
}


def _nccl_header(release: tuple[int, ...]) -> list[str]:
    since = {"2.17": (2, 17), "2.13": (2, 13), "2.10": (2, 10), "2.0": ()}
    layout = next(name for name, first in since.items() if release >= first)
    above, names_format, units_format, names, units = _NCCL_HEADERS[layout]
    return [above % (("",) * above.count("%")), names_format % names, units_format % units]


def nccl_all_reduce(
    node: str, product: str, gpus: int, busbw_gbps: float, version: str = "2.13.10", nccl: str = "2.21.5"
) -> str:
    """`all_reduce_perf -b 64M -e 4G -f 4 -g <gpus>` output averaging `busbw_gbps`, laid out
    as nccl-tests `version` prints it (NVIDIA/nccl-tests src/common.cu, src/util.cu; compared
    with real outputs in tests/fixtures/real/nccl): before 2.13 an `error` column and no
    `root`; from 2.13 `root` and `#wrong`; from 2.17 the version and program lines."""
    n = max(1, gpus)
    release = _tool_version(version)
    newest, old = release >= (2, 17), release < (2, 13)
    params = (
        f"# nThread 1 nGpus {n} minBytes 67108864 maxBytes 4294967296 step: 4(factor) warmup iters: 5 "
        + ("iters: 20 validation: 1" if old else "iters: 20 agg iters: 1 validation: 1 graph: 0")
        + (" unalign: 0" if newest else "")
    )
    lines = (
        [f"# nccl-tests version {version} nccl-headers=22105 nccl-library=22105",
         "# Collective test starting: all_reduce_perf"] if newest else []
    )  # fmt: skip
    lines += [params, "#", "# Using devices"]
    for i in range(n):
        if old:
            lines.append(
                f"#   Rank {i:2d} Pid  {4100:5d} on {node:>10} device {i:2d} [0x{16 + i:02x}] {product}"
            )
        else:
            bus = f"[0000:{16 + i:02x}:00]" if newest else f"[0x{16 + i:02x}]"
            lines.append(
                f"#  Rank {i:2d} Group  0 Pid  {4100 + i:5d} on {node:>12} device {i:2d} {bus} {product}"
            )
    if newest:
        lines.append(f"NCCL version {nccl}+cuda12.4")
    lines.append("#")
    lines += _nccl_header(release)
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
        if old:
            lines.append(
                f"{size:12d} {size // 4:13d}   float     sum {time_us:8.1f} {alg:7.2f} {bw:7.2f}  0e+00"
                f" {time_us:8.1f} {alg:7.2f} {bw:7.2f}  0e+00"
            )
        else:
            wrong = f"{0:7d}" if newest else f"{0:6d}"
            lines.append(
                f"{size:12d} {size // 4:13d}     float     sum      -1"
                f" {time_us:8.1f} {alg:7.2f} {bw:7.2f} {wrong} {time_us:8.1f} {alg:7.2f} {bw:7.2f} {wrong}"
            )
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {busbw_gbps:g} ", "#"]
    if newest:
        lines.append("# Collective test concluded: all_reduce_perf")
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
    gpus: int,
    peer_gbps: float,
    slow_pair: tuple[int, int] | None = None,
    slow_gbps: float = 0.0,
    product: str = "NVIDIA H100 80GB HBM3",
) -> str:
    """`p2pBandwidthLatencyTest` output as cuda-samples prints it (device list, peer access,
    bandwidth matrices); `slow_pair` models one degraded NVLink."""
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
    lines += [
        f"Device: {i}, {product}, pciBusID: {16 + i:x}, pciDeviceID: 0, pciDomainID:0" for i in range(n)
    ]
    lines += [f"Device={i} CAN Access Peer Device={j}" for i in range(n) for j in range(n) if i != j]
    lines += [
        "",
        "***NOTE: In case a device doesn't have P2P access to other one, it falls back to normal memcopy"
        " procedure.",
        "So you can see lesser Bandwidth (GB/s) and unstable Latency (us) in those cases.",
        "",
    ]
    lines += matrix("Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)", 40.0, 1630.0)
    lines += matrix("Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)", peer_gbps, 1630.0)
    lines += matrix("Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)", 50.0, 1650.0)
    lines += matrix("Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)", peer_gbps * 1.89, 1650.0)
    return "\n".join(lines) + "\n"


# --- nvidia-smi -q (ECC sections) and dcgmi dmon -------------------------------------------------

# PCI bus ids of an 8-GPU HGX H100 board (tests/fixtures/real/nvidia_smi/q_565.57.01_8xH100...).
BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
# The CUDA version each driver branch reports (its header line).
_CUDA_OF_DRIVER = {470: "11.4", 510: "11.6", 525: "12.0", 530: "12.1", 535: "12.2", 550: "12.4",
                   555: "12.5", 560: "12.6", 565: "12.7", 570: "12.8", 575: "12.9", 580: "13.0"}  # fmt: skip


@dataclass(frozen=True)
class GpuMemoryState:
    """What a GPU's memory error counters say (the simulator's node health per GPU)."""

    volatile_uncorrectable: int = 0
    aggregate_uncorrectable: int = 0
    volatile_correctable: int = 0
    aggregate_correctable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False


def bus_id(index: int) -> str:
    return f"00000000:{BUS_IDS[index % len(BUS_IDS)] if index < len(BUS_IDS) else f'{index:02X}'}:00.0"


def _kv(indent: int, key: str, value: object) -> str:
    """nvidia-smi's `-q` line: the key padded so that the colon falls in column 42."""
    return (" " * indent + key).ljust(42) + f": {value}"


def _single_double_bit(indent: int, correctable: int, uncorrectable: int) -> list[str]:
    out: list[str] = []
    for title, count in (("Single Bit", correctable), ("Double Bit", uncorrectable)):
        out.append((" " * indent + title).ljust(indent + 22))
        out += [_kv(indent + 4, "Device Memory", count)]
        out += [_kv(indent + 4, k, 0) for k in ("Register File", "L1 Cache", "L2 Cache")]
        out += [_kv(indent + 4, k, "N/A") for k in ("Texture Memory", "Texture Shared")]
        out += [
            _kv(indent + 4, "CBU", "N/A" if title == "Single Bit" else 0),
            _kv(indent + 4, "Total", count),
        ]
    return out


def _sram_dram(indent: int, correctable: int, uncorrectable: int, split: bool) -> list[str]:
    sram = (
        [_kv(indent, "SRAM Uncorrectable Parity", 0), _kv(indent, "SRAM Uncorrectable SEC-DED", 0)]
        if split
        else [_kv(indent, "SRAM Uncorrectable", 0)]
    )
    return [
        _kv(indent, "SRAM Correctable", 0),
        *sram,
        _kv(indent, "DRAM Correctable", correctable),
        _kv(indent, "DRAM Uncorrectable", uncorrectable),
    ]


def nvidia_smi_q_ecc(
    product: str, driver_version: str, gpus: list[tuple[int, GpuMemoryState]], attached: int | None = None
) -> str:
    """`nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` as the driver prints it for these
    GPUs (index on the node, state): Volta and older in Single/Double Bit with retired pages,
    later GPUs in SRAM/DRAM (split into Parity and SEC-DED from R550) with remapped rows."""
    major = _tool_version(driver_version)[:1] or (550,)
    old_gpu = any(word in product for word in ("V100", "P100", "Tesla P", "Tesla K"))
    split = major[0] >= 550
    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        _kv(0, "Timestamp", "Mon Jun  2 10:14:05 2025"),
        _kv(0, "Driver Version", driver_version),
        _kv(0, "CUDA Version", _CUDA_OF_DRIVER.get(major[0], "12.4")),
        "",
        _kv(0, "Attached GPUs", attached if attached is not None else len(gpus)),
    ]
    blocks: list[list[str]] = []
    for index, state in gpus:
        block = [
            f"GPU {bus_id(index)}",
            "    ECC Mode",
            _kv(8, "Current", "Enabled"),
            _kv(8, "Pending", "Enabled"),
        ]
        block += ["    ECC Errors", "        Volatile"]
        if old_gpu:
            block += _single_double_bit(12, state.volatile_correctable, state.volatile_uncorrectable)
            block += ["        Aggregate"]
            block += _single_double_bit(12, state.aggregate_correctable, state.aggregate_uncorrectable)
        else:
            block += _sram_dram(12, state.volatile_correctable, state.volatile_uncorrectable, split)
            block += ["        Aggregate"]
            block += _sram_dram(12, state.aggregate_correctable, state.aggregate_uncorrectable, split)
            if split:
                block += [
                    _kv(12, "SRAM Threshold Exceeded", "No"),
                    "        Aggregate Uncorrectable SRAM Sources",
                ]
                block += [_kv(12, f"SRAM {k}", 0) for k in ("L2", "SM", "Microcontroller", "PCIE", "Other")]
        block.append("    Retired Pages")
        if old_gpu:
            block += [
                _kv(8, "Single Bit ECC", 0),
                _kv(8, "Double Bit ECC", state.aggregate_uncorrectable),
                _kv(8, "Pending Page Blacklist", "Yes" if state.remap_pending else "No"),
                _kv(4, "Remapped Rows", "N/A"),
            ]
        else:
            remapped = state.aggregate_uncorrectable
            banks = 640 if "A100" in product else 2560
            block += [
                _kv(8, k, "N/A") for k in ("Single Bit ECC", "Double Bit ECC", "Pending Page Blacklist")
            ]
            block += [
                "    Remapped Rows",
                _kv(8, "Correctable Error", 0),
                _kv(8, "Uncorrectable Error", remapped),
                _kv(8, "Pending", "Yes" if state.remap_pending else "No"),
                _kv(8, "Remapping Failure Occurred", "Yes" if state.remap_failure else "No"),
                "        Bank Remap Availability Histogram",
                _kv(12, "Max", f"{banks - remapped} bank(s)"),
                _kv(12, "High", f"{remapped} bank(s)"),
                *[_kv(12, k, "0 bank(s)") for k in ("Partial", "Low", "None")],
            ]
        blocks.append(block)
    body = "\n\n".join("\n".join(block) for block in blocks)
    return "\n".join(lines) + "\n" + body + "\n"


def dcgmi_dmon(field_ids: list[int], rows: dict[int, dict[int, int | None]], version: str = "3.3.7") -> str:
    """`dcgmi dmon -e <ids> -c 1` as DCGM's DeviceMonitor.cpp prints it: `#Entity` and the
    fields' short names, a line of units after `ID`, one `GPU <id>` row (None: `N/A`). The
    entity column is 10 wide before 4.0, 11 in 4.0-4.4, 14 plus 2 of padding from 4.5; every
    field column its format width (5 for these fields) plus 6, plus 2 of padding."""
    from pitstop.gpu.dmon import SHORT_NAMES

    release = _tool_version(version) or (3, 3, 7)
    first = 10 if release < (4,) else 11 if release < (4, 5) else 16
    head = "#Entity".ljust(first) + "".join(SHORT_NAMES.get(f, "").ljust(13) for f in field_ids)
    units = "ID".ljust(first) + "".join("".ljust(13) for _ in field_ids)
    lines = [head, units]
    for gpu, values in sorted(rows.items()):
        cells = ["N/A" if values.get(f) is None else str(values[f]) for f in field_ids]
        lines.append(f"GPU {gpu}".ljust(first) + "".join(c.ljust(13) for c in cells))
    return "\n".join(lines) + "\n"
