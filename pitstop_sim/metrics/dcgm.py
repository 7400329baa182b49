"""dcgm-exporter's `/metrics` for the simulated GPU nodes.

The families and their HELP/TYPE are those of `runbooks/monitoring/dcgm-exporter-counters.csv`
(dcgm-exporter's etc/default-counters.csv plus the ECC and clocks-event fields the alert
pack needs; a test checks the two agree). Each sample carries the labels dcgm-exporter's
template writes, in its order: `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`,
`Hostname` (the node name, as the GPU Operator sets NODE_NAME), then the label fields
(`DCGM_FI_DRIVER_VERSION`) and, for a GPU allocated to a pod, the Kubernetes attributes
`container`, `namespace`, `pod`.

Figures follow the node: GPUs held by a running pod are busy (utilization, power, heat,
NVLink traffic at the node's NCCL bandwidth, so a degraded node moves fewer bytes); the
last Xid per GPU and the ECC counts come from the node's health (scenario, regressions,
`POST /_sim/nodes/{node}/xid`); telemetry overrides come last. A node that is not Ready
exports nothing, as its dcgm-exporter pod would not be running.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pitstop_sim.context import SimContext
from pitstop_sim.metrics.exposition import Family, Labels, MetricType
from pitstop_sim.metrics.telemetry import Telemetry
from pitstop_sim.models import GpuEcc, NodeProfile

# (field, type, help) in the order of the counters file.
COUNTERS: tuple[tuple[str, MetricType, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    (
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "counter",
        "Total number of bytes transmitted through PCIe TX (in KB) via NVML.",
    ),
    (
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "counter",
        "Total number of bytes received through PCIe RX (in KB) via NVML.",
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event reasons (bitmask)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Total number of single-bit persistent ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total number of double-bit persistent ECC errors."),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes",
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
)
# Label fields of the counters file: values that become labels of every sample.
LABEL_FIELDS: tuple[tuple[str, str], ...] = (("DCGM_FI_DRIVER_VERSION", "Driver Version"),)

# PCI bus numbers of the eight GPUs of an HGX H100 baseboard, in index order.
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_FB_TOTAL_MIB = 81559  # H100 80GB HBM3, as nvidia-smi reports it
_BASELINE_BUSBW_GBPS = 390.0  # NodeHealth's default: a healthy node
_UUID_NAMESPACE = uuid.UUID("8d3b0c52-3a7e-4cf4-9d55-2f4c8a1e0b61")


@dataclass
class GpuUse:
    """The pod a GPU is allocated to (dcgm-exporter's Kubernetes attributes)."""

    namespace: str
    pod: str
    container: str


def model_name(product: str) -> str:
    """GPU feature discovery's label value (`NVIDIA-H100-80GB-HBM3`) as NVML names the model."""
    return product.replace("-", " ")


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node}/{index}')}"


def pci_bus_id(index: int) -> str:
    bus = _HGX_BUSES[index] if index < len(_HGX_BUSES) else 0x100 + index
    return f"00000000:{bus:02X}:00.0"


def _gpu_requests(container: dict[str, Any]) -> int:
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        raw = (resources.get(section) or {}).get("nvidia.com/gpu")
        if raw is not None:
            try:
                return int(str(raw))
            except ValueError:
                return 0
    return 0


def gpu_allocation(pods: list[dict[str, Any]], gpus: int) -> dict[int, GpuUse]:
    """Which running pod holds which GPU: the device plugin hands out indices in order; pods
    are taken oldest first, so an allocation does not move while its pod runs."""
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    running.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))
    allocation: dict[int, GpuUse] = {}
    next_gpu = 0
    for pod in running:
        for container in pod["spec"].get("containers", []):
            for _ in range(_gpu_requests(container)):
                if next_gpu >= gpus:
                    return allocation
                allocation[next_gpu] = GpuUse(
                    pod["metadata"].get("namespace", "default"), pod["metadata"]["name"], container["name"]
                )
                next_gpu += 1
    return allocation


def node_ready(node: dict[str, Any] | None) -> bool:
    if node is None:
        return False
    for condition in (node.get("status") or {}).get("conditions", []):
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def families(ctx: SimContext, telemetry: Telemetry, nodes: list[str] | None = None) -> list[Family]:
    """Every family for `nodes` (default: every Ready GPU node)."""
    by_name = {name: Family(name, kind, help_text) for name, kind, help_text in COUNTERS}
    now = ctx.clock.now()
    names = sorted(ctx.profiles) if nodes is None else nodes
    for name in names:
        stored = ctx.profiles.get(name)
        if stored is None or stored.role != "gpu" or stored.gpus == 0:
            continue
        if not node_ready(ctx.store.get("nodes", None, name)):
            continue
        profile = ctx.effective_profile(stored)
        allocation = gpu_allocation(ctx.pods_on_node(name), profile.gpus)
        for index in range(profile.gpus):
            _gpu_samples(by_name, profile, index, allocation.get(index), telemetry, now)
    return list(by_name.values())


def _gpu_samples(
    out: dict[str, Family],
    profile: NodeProfile,
    index: int,
    use: GpuUse | None,
    telemetry: Telemetry,
    now: float,
) -> None:
    node = profile.name
    labels: Labels = (
        ("gpu", str(index)),
        ("UUID", gpu_uuid(node, index)),
        ("pci_bus_id", pci_bus_id(index)),
        ("device", f"nvidia{index}"),
        ("modelName", model_name(profile.gpu_product)),
        ("Hostname", node),
        ("DCGM_FI_DRIVER_VERSION", profile.driver_version),
    )
    if use is not None:
        labels += (("container", use.container), ("namespace", use.namespace), ("pod", use.pod))
    override = telemetry.node(node).gpu(index)
    busy = use is not None
    util = override.utilization_pct if override.utilization_pct is not None else (97.0 if busy else 0.0)
    load = util / 100.0
    temperature = override.temperature_c if override.temperature_c is not None else 34.0 + 36.0 * load
    reasons = override.clocks_event_reasons
    if reasons is None:
        reasons = 0x0 if busy else 0x1  # idle GPUs report the idle reason
    throttled = reasons & (0x8 | 0x20 | 0x40 | 0x80)
    power = 72.0 + 600.0 * load * (0.7 if throttled else 1.0)
    health = profile.health
    xids = {i % max(profile.gpus, 1): code for i, code in enumerate(health.xid_errors)}
    ecc = next((e for e in health.ecc if e.gpu == index), GpuEcc(gpu=index))
    bandwidth = health.nccl_busbw_gbps / _BASELINE_BUSBW_GBPS
    key = (node, str(index))
    fb_used = 74000.0 if busy else 0.0
    values: dict[str, float] = {
        "DCGM_FI_DEV_SM_CLOCK": (1410.0 if throttled else 1980.0) if busy else 345.0,
        "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
        "DCGM_FI_DEV_MEMORY_TEMP": temperature + 4.0,
        "DCGM_FI_DEV_GPU_TEMP": temperature,
        "DCGM_FI_DEV_POWER_USAGE": round(power, 3),
        # mJ: watts are joules per second, a thousand millijoules.
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": round(
            telemetry.counter("energy", *key).advance(now, power * 1000.0)
        ),
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": round(
            telemetry.counter("pcie_tx", *key).advance(now, 2.0e6 * load)
        ),
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": round(
            telemetry.counter("pcie_rx", *key).advance(now, 3.0e6 * load)
        ),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0.0,
        "DCGM_FI_DEV_GPU_UTIL": util,
        "DCGM_FI_DEV_MEM_COPY_UTIL": round(util * 0.45),
        "DCGM_FI_DEV_ENC_UTIL": 0.0,
        "DCGM_FI_DEV_DEC_UTIL": 0.0,
        "DCGM_FI_DEV_XID_ERRORS": float(xids.get(index, 0)),
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": float(reasons),
        "DCGM_FI_DEV_FB_FREE": _FB_TOTAL_MIB - fb_used,
        "DCGM_FI_DEV_FB_USED": fb_used,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": float(ecc.volatile_correctable),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": float(ecc.volatile_uncorrectable),
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": float(ecc.volatile_correctable),
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": float(max(ecc.aggregate_uncorrectable, ecc.volatile_uncorrectable)),
        # NVLink bytes at the node's NCCL bandwidth while the GPU works: a degraded node's
        # counter grows slower.
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": round(
            telemetry.counter("nvlink", *key).advance(now, 1.0e9 * load * bandwidth)
        ),
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0.0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": float(
            ecc.aggregate_uncorrectable if not ecc.remap_failure else 0
        ),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0.0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1.0 if ecc.remap_failure else 0.0,
    }
    for name, value in values.items():
        out[name].add(labels, value)
