"""`nvidia-smi -q` (or `-q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT`): each GPU's ECC mode, its
volatile and aggregate ECC error counters, its retired pages and its remapped rows, in the layouts
drivers print (real outputs in tests/fixtures/real/nvidia_smi/, docs/tool-outputs.md):

- Volta and older GPUs (on every driver, R580 included): `ECC Errors > Volatile > Single Bit /
  Double Bit > Device Memory ... Total` (the title `Ecc Mode` up to R525, `ECC Mode` from R530);
- Turing and later on R510-R530: `SRAM Correctable`, `SRAM Uncorrectable`, `DRAM Correctable`,
  `DRAM Uncorrectable`;
- R550 and later: `SRAM Uncorrectable Parity` and `SRAM Uncorrectable SEC-DED` instead of one
  SRAM counter, `SRAM Threshold Exceeded` and the `Aggregate Uncorrectable SRAM Sources`.

`Retired Pages` (page retirement, before Ampere) and `Remapped Rows` (row remapping, Ampere and
later) are `N/A` where the GPU has the other mechanism. A counter that reads anything but a
number or `N/A` (`[Unknown Error]`, `GPU requires reset`) is unreadable, never 0.

Every line is `<indent><key><padding>: <value>` with the colon at column 42, or a section title
without a colon; sections nest by indentation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_LINE = re.compile(r"^(?P<indent> *)(?P<key>[^:]*?)\s*(?::\s?(?P<value>.*))?$")
_NOT_AVAILABLE = {"n/a", "[n/a]", ""}


class SmiParseError(ValueError):
    """The text is not the output of `nvidia-smi -q` with its ECC sections."""


@dataclass
class _Node:
    key: str
    value: str | None
    indent: int
    children: list[_Node] = field(default_factory=list)

    def child(self, *names: str) -> _Node | None:
        wanted = {_norm(n) for n in names}
        return next((c for c in self.children if _norm(c.key) in wanted), None)


def _norm(key: str) -> str:
    return " ".join(key.lower().split())


class GpuMemoryErrors(BaseModel):
    """One GPU's memory error reporting, as printed."""

    bus_id: str
    product: str | None = None
    ecc_mode: str | None = Field(default=None, description="ECC Mode > Current; None when not printed.")
    # Counter name as printed (`DRAM Uncorrectable`, `Double Bit Total`) -> value; N/A left out.
    volatile_uncorrectable: dict[str, int] = Field(default_factory=dict)
    volatile_correctable: dict[str, int] = Field(default_factory=dict)
    aggregate_uncorrectable: dict[str, int] = Field(default_factory=dict)
    aggregate_correctable: dict[str, int] = Field(default_factory=dict)
    sram_threshold_exceeded: bool | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    unreadable: list[str] = Field(default_factory=list, description="`<counter> reads '<value>'`.")

    @property
    def name(self) -> str:
        return f"GPU {self.bus_id}"

    def problems(self) -> list[str]:
        """Why this GPU fails: uncorrectable errors since the driver loaded, memory the driver
        could not repair or that waits for a reset, counters that cannot be read."""
        out = [f"volatile {name} {count}" for name, count in self.volatile_uncorrectable.items() if count]
        if self.remap_pending:
            out.append("a row remap is pending (Remapped Rows Pending: Yes; the GPU needs a reset)")
        if self.remap_failure:
            out.append("Remapping Failure Occurred: Yes")
        if self.retired_pending:
            out.append("a page is pending retirement (Retired Pages Pending: Yes; the GPU needs a reset)")
        if self.sram_threshold_exceeded:
            out.append("SRAM Threshold Exceeded: Yes")
        out += self.unreadable
        return out

    def history(self) -> list[str]:
        """What is recorded but does not fail the GPU: lifetime uncorrectable errors whose memory
        was remapped or retired, retired and remapped counts."""
        out = [f"aggregate {name} {count}" for name, count in self.aggregate_uncorrectable.items() if count]
        if self.remapped_uncorrectable:
            out.append(f"{self.remapped_uncorrectable} rows remapped for uncorrectable errors")
        if self.retired_dbe:
            out.append(f"{self.retired_dbe} pages retired for double bit errors")
        return out


class SmiReport(BaseModel):
    driver_version: str | None = None
    attached_gpus: int | None = None
    gpus: list[GpuMemoryErrors]

    def problems(self) -> list[str]:
        return [f"{gpu.name}: {problem}" for gpu in self.gpus for problem in gpu.problems()]

    def ecc_off(self) -> list[str]:
        """GPUs whose ECC is off: their counters are N/A, nothing about them is known."""
        return [gpu.name for gpu in self.gpus if (gpu.ecc_mode or "").lower() == "disabled"]


def _tree(lines: list[str]) -> _Node:
    root = _Node("", None, -1)
    stack = [root]
    for raw in lines:
        if not raw.strip():
            continue
        line = raw.rstrip("\r")
        match = _LINE.match(line)
        if match is None:  # pragma: no cover - the pattern matches any line
            continue
        indent = len(match["indent"])
        node = _Node(
            match["key"].strip(), match["value"].strip() if match["value"] is not None else None, indent
        )
        while stack[-1].indent >= indent:
            stack.pop()
        stack[-1].children.append(node)
        stack.append(node)
    return root


class _Reader:
    """Reads one GPU's values, collecting those that are neither a number nor N/A."""

    def __init__(self, gpu: GpuMemoryErrors) -> None:
        self.gpu = gpu

    def count(self, node: _Node | None, label: str) -> int | None:
        if node is None or node.value is None:
            return None
        value = node.value.strip()
        if value.lower() in _NOT_AVAILABLE:
            return None
        if value.isdigit():
            return int(value)
        self.gpu.unreadable.append(f"{label} reads {value!r}")
        return None

    def flag(self, node: _Node | None, label: str) -> bool | None:
        if node is None or node.value is None:
            return None
        value = node.value.strip().lower()
        if value in _NOT_AVAILABLE:
            return None
        if value in ("yes", "no"):
            return value == "yes"
        self.gpu.unreadable.append(f"{label} reads {node.value.strip()!r}")
        return None


def _bits_total(read: _Reader, node: _Node, scope: str) -> int | None:
    """`Single Bit` / `Double Bit` blocks: their `Total`, else the sum of what they list."""
    total = node.child("Total")
    if total is not None:
        return read.count(total, f"{scope} {node.key} Total")
    values = [read.count(c, f"{scope} {node.key} {c.key}") for c in node.children]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _scope(read: _Reader, errors: _Node, scope: str) -> None:
    node = errors.child(scope)
    if node is None or (node.value or "").lower() in ("n/a", "[n/a]"):
        return
    gpu = read.gpu
    uncorrectable = gpu.volatile_uncorrectable if scope == "Volatile" else gpu.aggregate_uncorrectable
    correctable = gpu.volatile_correctable if scope == "Volatile" else gpu.aggregate_correctable
    for child in node.children:
        key = _norm(child.key)
        if key in ("single bit", "double bit"):
            total = _bits_total(read, child, scope.lower())
            if total is not None:
                (correctable if key == "single bit" else uncorrectable)[f"{child.key} Total"] = total
        elif key == "sram threshold exceeded":
            gpu.sram_threshold_exceeded = read.flag(child, f"{scope} {child.key}")
        elif "uncorrectable" in key:
            value = read.count(child, f"{scope.lower()} {child.key}")
            if value is not None:
                uncorrectable[child.key] = value
        elif "correctable" in key:
            value = read.count(child, f"{scope.lower()} {child.key}")
            if value is not None:
                correctable[child.key] = value


def _gpu(bus_id: str, node: _Node) -> GpuMemoryErrors:
    gpu = GpuMemoryErrors(bus_id=bus_id)
    read = _Reader(gpu)
    product = node.child("Product Name")
    gpu.product = product.value if product is not None else None
    mode = node.child("ECC Mode")
    current = mode.child("Current") if mode is not None else None
    gpu.ecc_mode = current.value if current is not None else None
    errors = node.child("ECC Errors")
    retired = node.child("Retired Pages")
    remapped = node.child("Remapped Rows")
    if errors is None and retired is None and remapped is None:
        raise SmiParseError(
            f"GPU {bus_id} has no ECC Errors, Retired Pages or Remapped Rows section "
            "(nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT prints them)"
        )
    if errors is not None:
        _scope(read, errors, "Volatile")
        _scope(read, errors, "Aggregate")
    if retired is not None:
        gpu.retired_sbe = read.count(retired.child("Single Bit ECC"), "Retired Pages Single Bit ECC")
        gpu.retired_dbe = read.count(retired.child("Double Bit ECC"), "Retired Pages Double Bit ECC")
        pending = next((c for c in retired.children if _norm(c.key).startswith("pending")), None)
        gpu.retired_pending = read.flag(pending, f"Retired Pages {pending.key}" if pending else "")
    if remapped is not None:
        gpu.remapped_correctable = read.count(
            remapped.child("Correctable Error"), "Remapped Rows Correctable Error"
        )
        gpu.remapped_uncorrectable = read.count(
            remapped.child("Uncorrectable Error"), "Remapped Rows Uncorrectable Error"
        )
        gpu.remap_pending = read.flag(remapped.child("Pending"), "Remapped Rows Pending")
        gpu.remap_failure = read.flag(
            remapped.child("Remapping Failure Occurred"), "Remapped Rows Remapping Failure Occurred"
        )
    return gpu


def _said(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " ".join(lines[:3])[:300]


def parse_nvidia_smi_q(text: str) -> SmiReport:
    """Parse `nvidia-smi -q [-d ...]` text: one entry per `GPU <bus id>` section."""
    lines = text.splitlines()
    # What nvidia-smi (or the shell) says when it cannot read any GPU, in its own words.
    if "NVIDIA-SMI has failed" in text or "Failed to initialize NVML" in text:
        raise SmiParseError(f"nvidia-smi could not talk to the driver: {_said(text)}")
    if re.search(r"^No devices were found\s*$", text, re.MULTILINE):
        raise SmiParseError("nvidia-smi sees no GPU in the container: No devices were found")
    if re.search(r"nvidia-smi: (\d+: )?(command )?not found|executable file not found", text):
        raise SmiParseError(f"nvidia-smi is not in the container (it comes with the GPUs): {_said(text)}")
    header: dict[str, str] = {}
    sections: list[tuple[str, list[str]]] = []
    for line in lines:
        found = GPU_HEADER.match(line)
        if found:
            sections.append((found[1], []))
        elif sections and (line.startswith(" ") or not line.strip()):
            sections[-1][1].append(line)
        else:
            match = _LINE.match(line)
            if match and match["value"] is not None:
                header[_norm(match["key"])] = match["value"].strip()
    if not sections:
        start = _said(text) or "nothing"
        raise SmiParseError(
            f"no 'GPU <PCI bus id>' section in the nvidia-smi output; it starts with: {start!r}"
        )
    attached = header.get("attached gpus", "")
    gpus = [_gpu(bus_id, _tree(body)) for bus_id, body in sections]
    return SmiReport(
        driver_version=header.get("driver version"),
        attached_gpus=int(attached) if attached.isdigit() else None,
        gpus=gpus,
    )


NVIDIA_SMI_ECC_COMMAND = ["nvidia-smi", "-q", "-d", "ECC,ROW_REMAPPER,PAGE_RETIREMENT"]


def nvidia_smi_ecc_command() -> list[str]:
    """How a probe Job reads the ECC sections: through `sh` so that a container without the
    driver's tools (no GPU given to it) says so in its log instead of failing to start."""
    return ["sh", "-c", " ".join(NVIDIA_SMI_ECC_COMMAND)]
