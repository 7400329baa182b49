"""Parsers for what the hosts answer (pure functions, no I/O)."""

from __future__ import annotations

import csv
import io
import re

from pydantic import BaseModel

_NOT_AVAILABLE = {"", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]"}


class GPU(BaseModel):
    """One row of `nvidia-smi --query-gpu=index,name,driver_version,vbios_version,memory.total`."""

    index: int
    name: str
    driver_version: str | None = None
    vbios_version: str | None = None
    memory_total_mib: int | None = None


def _value(raw: str) -> str | None:
    text = raw.strip()
    return None if text.lower() in _NOT_AVAILABLE else text


def _mib(raw: str) -> int | None:
    text = _value(raw)
    if text is None:
        return None
    match = re.fullmatch(r"(\d+)\s*(MiB|GiB)?", text)
    if match is None:
        return None
    return int(match.group(1)) * (1024 if match.group(2) == "GiB" else 1)


def parse_nvidia_smi(text: str) -> list[GPU]:
    """Rows like `0, NVIDIA H100 80GB HBM3, 550.54.15, 96.00.89.00.01, 81559 MiB`.

    Lines that are not GPU rows (warnings nvidia-smi prints on some drivers) are ignored.
    """
    gpus: list[GPU] = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if len(row) != 5 or not row[0].strip().isdigit():
            continue
        gpus.append(
            GPU(
                index=int(row[0]),
                name=row[1].strip(),
                driver_version=_value(row[2]),
                vbios_version=_value(row[3]),
                memory_total_mib=_mib(row[4]),
            )
        )
    return sorted(gpus, key=lambda g: g.index)


def parse_os_release(text: str) -> dict[str, str]:
    """`/etc/os-release` as a dict (`ID`, `VERSION_ID`, `PRETTY_NAME`, ...), quotes removed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def parse_sha256sum(text: str) -> str | None:
    """The digest from `sha256sum FILE` output (`<64 hex>  FILE`)."""
    match = re.match(r"^\\?([0-9a-fA-F]{64})\b", text.strip())
    return match.group(1).lower() if match else None


def parse_marker(text: str) -> dict[str, str]:
    """A pitstop marker line: `key=value` pairs separated by spaces."""
    fields: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value
    return fields


def first_line(text: str) -> str | None:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return None
