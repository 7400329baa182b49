"""Node components over SSH: packages (apt-get, apt-mark, dpkg-query), kubelet and containerd
restarts changing what the Node reports, and a driver upgrade that only takes effect at the
reboot, bringing the scenario's regression with it (and taking it away on rollback)."""

from __future__ import annotations

import uuid

from pitstop.gpu.nccl import parse_nccl
from tests.integration.sim_platform.conftest import Platform

CANARY = "gpu-node-001"
DRIVER_LABEL = "pitstop.dev/driver-version"


def node_info(platform: Platform, node: str) -> dict[str, str]:
    return dict(platform.node(node)["status"]["nodeInfo"])


def ready(platform: Platform, node: str) -> bool:
    conditions = platform.node(node)["status"]["conditions"]
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def reboot_and_wait(platform: Platform, node: str) -> None:
    boot = node_info(platform, node)["bootID"]
    assert platform.ssh(node, "sudo -n systemctl reboot").rc == 0
    platform.wait(
        lambda: node_info(platform, node)["bootID"] != boot and ready(platform, node), f"{node} back", 30
    )


def nccl_busbw(platform: Platform, node: str) -> float:
    """Run an NCCL validation pod on `node` and read its result from the pod log."""
    name = f"nccl-{uuid.uuid4().hex[:6]}"
    platform.sim.create(
        "pods",
        {
            "metadata": {"name": name, "namespace": "default", "labels": {"pitstop.dev/validation": "nccl"}},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "containers": [{"name": "nccl", "image": "nvcr.io/nvidia/pytorch:24.09-py3"}],
            },
        },
        "default",
    )
    platform.wait(
        lambda: (
            (platform.sim.get("pods", name, "default") or {}).get("status", {}).get("phase") == "Succeeded"
        ),
        f"validation pod {name}",
    )
    return parse_nccl(platform.kubectl("logs", "-n", "default", name).stdout).avg_busbw_gbps


def test_kubelet_restart_makes_the_node_report_the_installed_version(platform: Platform) -> None:
    node = "gpu-node-002"
    assert platform.ssh(node, "dpkg-query -W -f='${Version}' kubelet").stdout == "1.30.6-1.1"
    installed = platform.ssh(node, "sudo -n apt-get install -y kubelet=1.31.2-1.1 kubectl=1.31.2-1.1")
    assert installed.rc == 0, installed.stderr
    assert platform.ssh(node, "kubelet --version").stdout == "Kubernetes v1.31.2\n"
    assert node_info(platform, node)["kubeletVersion"] == "v1.30.6"  # still the running kubelet

    assert platform.ssh(node, "sudo -n systemctl daemon-reload && sudo -n systemctl restart kubelet").rc == 0
    info = node_info(platform, node)
    assert (info["kubeletVersion"], info["kubeProxyVersion"]) == ("v1.31.2", "v1.31.2")
    assert ready(platform, node)
    row = next(
        line.split() for line in platform.kubectl("get", "nodes").stdout.splitlines() if line.startswith(node)
    )
    assert row[1] == "Ready" and row[-1] == "v1.31.2"

    assert platform.ssh(node, "sudo -n apt-get install -y containerd.io=1.7.22-1").rc == 0
    assert platform.ssh(node, "containerd --version").stdout.split()[:3] == [
        "containerd",
        "containerd.io",
        "1.7.22",
    ]
    assert node_info(platform, node)["containerRuntimeVersion"] == "containerd://1.7.20"
    assert platform.ssh(node, "sudo -n systemctl restart containerd.service").rc == 0
    assert node_info(platform, node)["containerRuntimeVersion"] == "containerd://1.7.22"


def test_apt_refuses_held_packages_downgrades_and_non_root_like_apt(platform: Platform) -> None:
    node = "gpu-node-004"
    assert platform.ssh(node, "sudo -n apt-mark hold kubeadm kubelet").stdout == (
        "kubeadm set on hold.\nkubelet set on hold.\n"
    )
    assert platform.ssh(node, "apt-mark showhold").stdout == "kubeadm\nkubelet\n"
    held = platform.ssh(node, "sudo -n apt-get install -y kubeadm=1.31.2-1.1")
    assert held.rc == 100
    assert (
        "E: Held packages were changed and -y was used without --allow-change-held-packages." in held.stderr
    )
    forced = platform.ssh(
        node,
        "DEBIAN_FRONTEND=noninteractive sudo -n apt-get install -y --allow-change-held-packages "
        "kubeadm=1.31.2-1.1",
    )
    assert forced.rc == 0, forced.stderr
    assert platform.ssh(node, "kubeadm version -o short").stdout == "v1.31.2\n"

    down = platform.ssh(node, "sudo -n apt-get install -y --allow-change-held-packages kubeadm=1.30.6-1.1")
    assert down.rc == 100 and "--allow-downgrades" in down.stderr
    assert (
        platform.ssh(
            node,
            "sudo -n apt-get install -y --allow-downgrades --allow-change-held-packages kubeadm=1.30.6-1.1",
        ).rc
        == 0
    )
    assert platform.ssh(node, "dpkg-query -W -f='${Version}' kubeadm").stdout == "1.30.6-1.1"

    typo = platform.ssh(node, "sudo -n apt-get install -y kubeadn=1.31.2-1.1")
    assert typo.rc == 100 and "E: Unable to locate package kubeadn" in typo.stderr
    not_root = platform.ssh(node, "apt-get install -y kubectl=1.31.2-1.1")
    assert not_root.rc == 100 and "are you root?" in not_root.stderr
    missing = platform.ssh(node, "dpkg-query -W -f='${Version}' nvidia-driver-570")
    assert missing.rc == 1 and "no packages found matching nvidia-driver-570" in missing.stderr
    assert platform.ssh(node, "ofed_info -s").stdout == "MLNX_OFED_LINUX-24.07-0.6.1.0:\n"


def test_driver_upgrade_takes_effect_at_reboot_with_its_regression_and_rollback_removes_it(
    platform: Platform,
) -> None:
    assert platform.sim.node_health(CANARY).nccl_busbw_gbps == 392
    upgraded = platform.ssh(CANARY, "sudo -n apt-get install -y nvidia-driver-570=570.86.15-0ubuntu1")
    assert upgraded.rc == 0, upgraded.stderr
    assert "nvidia-driver-550" in upgraded.stdout  # replaced
    # Installed, not yet loaded: the node still runs 550 and performs as before.
    assert (
        platform.ssh(CANARY, "dpkg-query -W -f='${Version}' nvidia-driver-570").stdout == "570.86.15-0ubuntu1"
    )
    assert (
        "550.90.07"
        in platform.ssh(CANARY, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout
    )
    assert platform.node(CANARY)["metadata"]["labels"][DRIVER_LABEL] == "550.90.07"
    assert platform.sim.node_health(CANARY).nccl_busbw_gbps == 392

    reboot_and_wait(platform, CANARY)
    assert platform.node(CANARY)["metadata"]["labels"][DRIVER_LABEL] == "570.86.15"
    assert (
        "570.86.15"
        in platform.ssh(CANARY, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout
    )
    assert nccl_busbw(platform, CANARY) == 205  # the scenario's regression for 570.86.15
    assert platform.sim.node_health("gpu-node-002").nccl_busbw_gbps == 392  # only the canary

    rolled_back = platform.ssh(CANARY, "sudo -n apt-get install -y nvidia-driver-550=550.90.07-0ubuntu1")
    assert rolled_back.rc == 0, rolled_back.stderr
    reboot_and_wait(platform, CANARY)
    assert platform.node(CANARY)["metadata"]["labels"][DRIVER_LABEL] == "550.90.07"
    assert nccl_busbw(platform, CANARY) == 392


def test_kernel_package_takes_effect_at_reboot(platform: Platform) -> None:
    node = "gpu-node-003"
    assert (
        platform.ssh(node, "sudo -n apt-get install -y linux-image-5.15.0-119-generic=5.15.0-119.129").rc == 0
    )
    assert platform.ssh(node, "uname -r").stdout == "5.15.0-105-generic\n"
    reboot_and_wait(platform, node)
    assert platform.ssh(node, "uname -r").stdout == "5.15.0-119-generic\n"
    assert node_info(platform, node)["kernelVersion"] == "5.15.0-119-generic"
