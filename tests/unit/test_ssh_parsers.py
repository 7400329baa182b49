"""Parsers of what nodes answer: nvidia-smi, os-release, sha256sum, marker lines."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from pitstop.contracts import MAX_FIELD_BYTES
from pitstop.ssh.execute import BoundedOutput
from pitstop.ssh.parsers import parse_marker, parse_nvidia_smi, parse_os_release, parse_sha256sum


def test_nvidia_smi_rows_become_gpus_in_index_order() -> None:
    # Real output of an 8-GPU A100 node (two rows shown, out of order as on some drivers).
    out = (
        "1, NVIDIA A100-SXM4-80GB, 535.104.05, 92.00.45.00.06, 81920 MiB\n"
        "0, NVIDIA A100-SXM4-80GB, 535.104.05, 92.00.45.00.06, 81920 MiB\n"
    )
    gpus = parse_nvidia_smi(out)
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert (gpus[0].driver_version, gpus[0].vbios_version, gpus[0].memory_total_mib) == (
        "535.104.05",
        "92.00.45.00.06",
        81920,
    )


def test_nvidia_smi_unavailable_fields_and_noise_lines() -> None:
    out = (
        "WARNING: infoROM is corrupted at gpu 0000:41:00.0\n0, NVIDIA H100 PCIe, 550.54.15, [N/A], [N/A]\n\n"
    )
    (gpu,) = parse_nvidia_smi(out)
    assert gpu.vbios_version is None and gpu.memory_total_mib is None
    assert gpu.driver_version == "550.54.15"
    assert parse_nvidia_smi("") == []
    assert parse_nvidia_smi("No devices were found\n") == []


def test_os_release_values_are_unquoted() -> None:
    text = 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n# comment\n'
    parsed = parse_os_release(text)
    assert parsed["PRETTY_NAME"] == "Ubuntu 22.04.4 LTS"
    assert (parsed["ID"], parsed["VERSION_ID"]) == ("ubuntu", "22.04")


def test_sha256sum_output_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "file name with spaces"
    path.write_bytes(b"payload")
    out = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout
    assert parse_sha256sum(out) == hashlib.sha256(b"payload").hexdigest()
    assert parse_sha256sum("sha256sum: x: No such file or directory") is None


def test_marker_fields() -> None:
    assert parse_marker("pid=42 boot=abc run=r1 task=stage/0\n") == {
        "pid": "42",
        "boot": "abc",
        "run": "r1",
        "task": "stage/0",
    }


def test_bounded_output_keeps_the_head_and_counts_the_rest() -> None:
    out = BoundedOutput()
    for _ in range(100):
        out.feed(b"x" * 1000)
    text = out.text()
    assert len(text.encode()) <= MAX_FIELD_BYTES
    assert text.endswith(f"[{100_000 - out.limit} more bytes not kept by pitstop]")
    small = BoundedOutput()
    small.feed("héllo\n".encode())
    assert small.text() == "héllo\n"
