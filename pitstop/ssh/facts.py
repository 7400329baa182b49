"""Facts about a node, from a handful of read-only probes sent at once on one connection."""

from __future__ import annotations

from typing import Any

from pitstop.ssh import protocol
from pitstop.ssh.connect import Connection
from pitstop.ssh.execute import CommandResult, run_many
from pitstop.ssh.parsers import first_line, parse_nvidia_smi, parse_os_release

FACTS_DEADLINE_S = 60.0


def _line(result: CommandResult) -> str | None:
    return first_line(result.stdout) if result.rc == 0 else None


def gather_facts(conn: Connection, updater: str = protocol.UPDATER) -> dict[str, Any]:
    """OS, kernel, boot id, GPUs and driver (nvidia-smi), firmware (the updater).

    A node without nvidia-smi or without the firmware updater is not an error: `gpus` is
    empty and `firmware` is None, with the reason in `nvidia_smi_error` / `firmware_error`.
    """
    results = run_many(
        conn,
        {
            "boot_id": protocol.BOOT_ID,
            "kernel": protocol.KERNEL,
            "os_release": protocol.OS_RELEASE,
            "hostname": protocol.HOSTNAME,
            "nvidia_smi": protocol.NVIDIA_SMI,
            "firmware": protocol.fw_current(updater),
            "firmware_pending": protocol.fw_pending(updater),
        },
        deadline_s=FACTS_DEADLINE_S,
    )
    os_release = parse_os_release(results["os_release"].stdout) if results["os_release"].rc == 0 else {}
    smi = results["nvidia_smi"]
    gpus = parse_nvidia_smi(smi.stdout) if smi.rc == 0 else []
    fw = results["firmware"]
    return {
        "hostname": _line(results["hostname"]),
        "os": {
            "id": os_release.get("ID"),
            "version_id": os_release.get("VERSION_ID"),
            "pretty_name": os_release.get("PRETTY_NAME"),
        },
        "kernel": _line(results["kernel"]),
        "boot_id": _line(results["boot_id"]),
        "gpus": [g.model_dump() for g in gpus],
        "gpu_count": len(gpus),
        "gpu_driver": next((g.driver_version for g in gpus if g.driver_version), None),
        "nvidia_smi_error": None
        if smi.rc == 0
        else (smi.stderr.strip() or f"nvidia-smi exited {smi.rc}")[:500],
        "firmware": _line(fw),
        "firmware_pending": _line(results["firmware_pending"]),
        "firmware_error": None if fw.rc == 0 else (fw.stderr.strip() or f"{updater} exited {fw.rc}")[:500],
    }
