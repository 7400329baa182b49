"""CUDA samples: `deviceQuery` (devices visible, `Result = PASS`) and
`p2pBandwidthLatencyTest` (GPU-to-GPU bandwidth matrices)."""

from __future__ import annotations

import re

from pydantic import BaseModel


class CudaParseError(ValueError):
    """The text is not the expected CUDA sample output."""


class DeviceQuery(BaseModel):
    passed: bool
    device_count: int
    devices: list[str]
    driver_version: str | None = None
    runtime_version: str | None = None
    # Why no device was usable: `cudaGetDeviceCount returned 35: CUDA driver version is
    # insufficient for CUDA runtime version` (the code numbering changed in CUDA 11: 38 -> 100).
    error: str = ""


_COUNT = re.compile(r"Detected (\d+) CUDA Capable device", re.I)
_DEVICE = re.compile(r'^Device \d+: "(.+)"', re.M)
_VERSIONS = re.compile(r"CUDA Driver Version / Runtime Version\s+([0-9.]+)\s*/\s*([0-9.]+)")
_RESULT = re.compile(r"Result = (PASS|FAIL)")
_ERROR = re.compile(r"^(cudaGetDeviceCount returned \d+)\s*\n\s*->\s*(.+?)\s*$", re.M)


def parse_device_query(text: str) -> DeviceQuery:
    result = _RESULT.search(text)
    error = _ERROR.search(text)
    reason = f"{error.group(1)}: {error.group(2)}" if error else ""
    if result is None:
        if "no CUDA-capable device" in text or "cudaGetDeviceCount returned" in text:
            return DeviceQuery(passed=False, device_count=0, devices=[], error=reason)
        raise CudaParseError("no 'Result = PASS|FAIL' line in the deviceQuery output")
    count = _COUNT.search(text)
    versions = _VERSIONS.search(text)
    return DeviceQuery(
        passed=result.group(1) == "PASS",
        device_count=int(count.group(1)) if count else 0,
        devices=_DEVICE.findall(text),
        driver_version=versions.group(1) if versions else None,
        runtime_version=versions.group(2) if versions else None,
        error=reason,
    )


class P2PMatrix(BaseModel):
    title: str
    gpus: int
    values: list[list[float]]

    def min_peer(self) -> float:
        """The slowest GPU pair (off-diagonal): one bad NVLink shows up here."""
        peers = [v for i, row in enumerate(self.values) for j, v in enumerate(row) if i != j]
        return min(peers) if peers else 0.0


_P2P_DEVICE = re.compile(r"^Device: \d+, (.+?), pciBusID", re.M)


def p2p_devices(text: str) -> list[str]:
    """The GPUs p2pBandwidthLatencyTest lists (`Device: 0, NVIDIA A100-SXM4-80GB, pciBusID: 7`)."""
    return _P2P_DEVICE.findall(text)


_MATRIX_TITLE = re.compile(
    r"^(Unidirectional|Bidirectional) P2P=(Enabled|Disabled) Bandwidth.*Matrix.*$", re.M
)


def parse_p2p(text: str) -> list[P2PMatrix]:
    """Every bandwidth matrix in `p2pBandwidthLatencyTest` output."""
    matrices: list[P2PMatrix] = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not _MATRIX_TITLE.match(line.strip()):
            continue
        header = lines[index + 1].split() if index + 1 < len(lines) else []
        if not header or header[0] != "D\\D":
            continue
        n = len(header) - 1
        values: list[list[float]] = []
        for row in lines[index + 2 : index + 2 + n]:
            parts = row.split()
            if len(parts) != n + 1:
                break
            values.append([float(p) for p in parts[1:]])
        if len(values) == n:
            matrices.append(P2PMatrix(title=line.strip(), gpus=n, values=values))
    if not matrices:
        raise CudaParseError("no P2P bandwidth matrix in the p2pBandwidthLatencyTest output")
    return matrices
