"""The simulated node stack speaks the real tools' words (tests/fixtures/real/node_stack/, each
with its source): nvidia-smi without a loaded driver, `nv-fabricmanager --version`, and Fabric
Manager's refusal of a driver of another version. The expected lines are the fixtures, copied
from public sources, never from the simulator."""

from __future__ import annotations

import re
from pathlib import Path

from pitstop_sim.models import NodeProfile
from pitstop_sim.node_stack import fabric_manager_problem
from pitstop_sim.ssh.nodetools import FM_VERSION_LINE, NO_DRIVER

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "node_stack"


def real(name: str) -> str:
    return (REAL / name).read_text()


def profile(driver: str, fm: str) -> NodeProfile:
    return NodeProfile(
        name="gpu-node-001",
        domain="zone-a",
        gpu_product="NVIDIA-H100-80GB-HBM3",
        gpus=8,
        driver_version=driver,
        firmware_version="96.00.89.00.01",
        kernel_version="5.15.0-105-generic",
        os_image="Ubuntu 22.04.4 LTS",
        kubelet_version="v1.30.6",
        container_runtime="containerd://1.7.20",
        packages={f"nvidia-fabricmanager-{fm.split('.')[0]}": f"{fm}-1"},
    )


def test_nvidia_smi_without_a_driver_says_what_the_real_one_says() -> None:
    assert real("nvidia_smi_no_driver_dkms_kernel_6.17_idx55035689867.txt") == NO_DRIVER


def test_fabric_manager_prints_its_version_as_the_real_one_does() -> None:
    line = real("nv_fabricmanager_version_535_idx30957937506.txt")
    assert FM_VERSION_LINE.format(version="535.161.08") == line


def test_fabric_manager_refuses_another_driver_version_in_its_own_words() -> None:
    journal = real("fabricmanager_mismatch_journal_530_gpu-operator-issue544.txt").strip()
    words = re.sub(r"^nv-fabricmanager\[\d+\]: ", "", journal)
    assert fabric_manager_problem(profile(driver="530.41.03", fm="530.30.02"), nvswitch=True) == words
    assert fabric_manager_problem(profile(driver="530.41.03", fm="530.41.03"), nvswitch=True) is None
