"""Facts about a node, from a handful of read-only probes sent at once on one connection."""

from __future__ import annotations

import re
from typing import Any

from pitstop.ssh import protocol
from pitstop.ssh.connect import Connection
from pitstop.ssh.execute import CommandResult, run_many
from pitstop.ssh.parsers import first_line, parse_nvidia_smi, parse_os_release

FACTS_DEADLINE_S = 60.0

_VERSION = re.compile(r"v?\d+(?:\.\d+)+(?:[-+~][0-9A-Za-z.+~-]*)?")


def _line(result: CommandResult) -> str | None:
    return first_line(result.stdout) if result.rc == 0 else None


def _error(result: CommandResult, tool: str) -> str | None:
    """Why a probe gave nothing (None when it answered): its stderr, or its exit status."""
    if result.rc == 0:
        return None
    return (result.stderr.strip() or f"{tool} exited {result.rc}")[:500]


def parse_kubelet_version(text: str) -> str | None:
    """`Kubernetes v1.30.6` -> `v1.30.6`."""
    match = re.search(r"\bv\d+\.\d+\.\d+\S*", text)
    return match.group(0) if match else None


def parse_containerd_version(text: str) -> str | None:
    """`containerd containerd.io 1.7.20 8fc6bcff...` or `containerd github.com/containerd/containerd
    v1.7.20 8fc6...` -> `1.7.20` (as the node's containerRuntimeVersion writes it)."""
    for token in text.split()[1:]:
        if _VERSION.fullmatch(token):
            return token.removeprefix("v")
    return None


def parse_ofed_version(text: str) -> str | None:
    """`MLNX_OFED_LINUX-24.07-0.6.1.0:` (or `OFED-internal-24.10-1.1.4.0:`) -> `24.07-0.6.1.0`."""
    line = (first_line(text) or "").rstrip(":")
    match = re.search(r"(?:^|-)(\d+\.\d+[0-9A-Za-z.\-]*)$", line)
    return match.group(1) if match else None


def _versions(conn: Connection) -> dict[str, Any]:
    """The installed versions of the platform's node components. A second batch of channels:
    OpenSSH allows 10 sessions per connection (MaxSessions), the first batch opens 7."""
    probes = {
        "kubelet": protocol.KUBELET_VERSION,
        "containerd": protocol.CONTAINERD_VERSION,
        "kubeadm": protocol.KUBEADM_VERSION,
        "ofed": protocol.OFED_INFO,
        **{f"package:{p}": protocol.package_version(p) for p in protocol.FACT_PACKAGES},
    }
    results = run_many(conn, probes, deadline_s=FACTS_DEADLINE_S)
    kubelet, containerd, kubeadm, ofed = (results[k] for k in ("kubelet", "containerd", "kubeadm", "ofed"))
    packages = {p: results[f"package:{p}"] for p in protocol.FACT_PACKAGES}
    return {
        "kubelet_version": parse_kubelet_version(kubelet.stdout) if kubelet.rc == 0 else None,
        "kubelet_version_error": _error(kubelet, "kubelet"),
        "containerd_version": parse_containerd_version(containerd.stdout) if containerd.rc == 0 else None,
        "containerd_version_error": _error(containerd, "containerd"),
        "kubeadm_version": _line(kubeadm),
        "kubeadm_version_error": _error(kubeadm, "kubeadm"),
        "nic_driver": parse_ofed_version(ofed.stdout) if ofed.rc == 0 else None,
        "nic_driver_error": _error(ofed, "ofed_info"),
        "packages": {p: _line(r) for p, r in packages.items()},
        "packages_error": {p: _error(r, "dpkg-query") for p, r in packages.items() if r.rc != 0},
    }


def gather_facts(conn: Connection, updater: str = protocol.UPDATER) -> dict[str, Any]:
    """OS, kernel, boot id, GPUs and driver (nvidia-smi), firmware (the updater), and the
    versions of kubelet, containerd, kubeadm, the NIC driver (`ofed_info -s`) and the
    kubeadm/kubelet/kubectl packages (dpkg).

    A node without nvidia-smi or without the firmware updater is not an error: `gpus` is
    empty and `firmware` is None, with the reason in `nvidia_smi_error` / `firmware_error`.
    Likewise a missing tool's version is None with the reason in `<key>_error`
    (`packages_error` per package).
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
        **_versions(conn),
    }
