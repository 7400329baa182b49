"""Kernel, headers, driver and Fabric Manager as one unit on an NVSwitch node, over SSH, with
the commands runbooks/tasks/upgrade-gpu-node.yaml and rollback-gpu-node.yaml send: one apt
transaction and one reboot forward; back, the previous set reinstalled, GRUB pointed at the
previous kernel, a reboot, then the new kernel removed."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pytest

from pitstop_sim import SimCluster, SimConfig, load_scenario
from tests.integration.sim_platform.conftest import SCENARIO, Platform
from tests.integration.sim_platform.test_nodes import nccl_busbw, reboot_and_wait

HGX = "gpu-node-001"  # the scenario's canary: its regression follows driver 570.86.15
PLAIN = "gpu-node-002"
OLD_KERNEL, NEW_KERNEL = "5.15.0-105-generic", "5.15.0-119-generic"
OLD = (OLD_KERNEL, "550.90.07", "Fabric Manager version is : 550.90.07", "active")
NEW = (NEW_KERNEL, "570.86.15", "Fabric Manager version is : 570.86.15", "active")
NO_DRIVER = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    scenario = load_scenario(SCENARIO)
    override = scenario.cluster.node_overrides[HGX].model_copy(update={"nvswitch": True})
    scenario.cluster.node_overrides[HGX] = override
    assert scenario.platform is not None
    scenario.platform.node_packages[HGX] = {"nvidia-fabricmanager-550": "550.90.07-1"}
    directory = tmp_path_factory.mktemp("stack")
    sim = SimCluster(
        SimConfig(scenario=scenario, kubeconfig=directory / "kubeconfig", ssh=True, time_scale=60)
    )
    sim.start()
    try:
        yield Platform(sim, directory / "kubeconfig")
    finally:
        sim.stop()


def stack(platform: Platform, node: str) -> tuple[str, str, str, str]:
    """What the node says: uname -r, nvidia-smi's driver, nv-fabricmanager, the unit's state."""
    kernel = platform.ssh(node, "uname -r").stdout.strip()
    smi = platform.ssh(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    driver = smi.stdout.splitlines()[0] if smi.rc == 0 else f"rc {smi.rc}: {smi.stdout.strip()}"
    fm = platform.ssh(node, "nv-fabricmanager --version").stdout.strip()
    active = platform.ssh(node, "systemctl is-active nvidia-fabricmanager").stdout.strip()
    return kernel, driver, fm, active


def ok(platform: Platform, node: str, command: str) -> str:
    shell = f"sudo -n sh -c {shlex.quote(command)}" if "&&" in command else f"sudo -n {command}"
    ran = platform.ssh(node, shell)
    assert ran.rc == 0, f"{command}: {ran.stdout}{ran.stderr}"
    return ran.stdout


def test_upgrade_in_lock_step_then_a_regression_rolls_back_the_whole_previous_set(platform: Platform) -> None:
    assert stack(platform, HGX) == OLD
    before = {
        p: platform.ssh(HGX, f"dpkg-query -W -f='${{Version}}' {p}").stdout
        for p in ("nvidia-driver-550", "nvidia-fabricmanager-550", f"linux-image-{OLD_KERNEL}")
    }

    ok(
        platform,
        HGX,
        "apt-get install -y --allow-downgrades nvidia-driver-570=570.86.15-0ubuntu1 "
        f"linux-image-{NEW_KERNEL} linux-headers-{NEW_KERNEL} nvidia-fabricmanager-570=570.86.15-1",
    )
    reboot_and_wait(platform, HGX)
    assert stack(platform, HGX) == NEW
    assert nccl_busbw(platform, HGX) == 205, "the scenario's canary regression on driver 570.86.15"

    ok(
        platform,
        HGX,
        "apt-get install -y --allow-downgrades "
        f"nvidia-driver-550={before['nvidia-driver-550']} "
        f"nvidia-fabricmanager-550={before['nvidia-fabricmanager-550']} "
        f"linux-image-{OLD_KERNEL}={before[f'linux-image-{OLD_KERNEL}']} "
        f"linux-headers-{OLD_KERNEL}={before[f'linux-image-{OLD_KERNEL}']}",
    )
    refused = platform.ssh(HGX, f"sudo -n apt-get remove -y linux-image-{NEW_KERNEL}")
    assert refused.rc == 100 and "running kernel" in refused.stderr
    ok(
        platform,
        HGX,
        "mkdir -p /etc/default/grub.d && echo 'GRUB_DEFAULT=\"Advanced options for Ubuntu>Ubuntu, with Linux "
        f"{OLD_KERNEL}\"' > /etc/default/grub.d/99-pitstop-rollback.cfg && update-grub",
    )
    reboot_and_wait(platform, HGX)
    assert stack(platform, HGX) == OLD
    ok(
        platform,
        HGX,
        f"apt-get remove -y linux-image-{NEW_KERNEL} linux-headers-{NEW_KERNEL} "
        "&& rm -f /etc/default/grub.d/99-pitstop-rollback.cfg && update-grub",
    )
    reboot_and_wait(platform, HGX)  # GRUB's default entry is the newest kernel left: the previous one
    assert stack(platform, HGX) == OLD
    assert nccl_busbw(platform, HGX) == 392


def test_fabric_manager_on_another_version_than_the_driver_does_not_start(platform: Platform) -> None:
    node = "gpu-node-003"
    ok(platform, node, "apt-get install -y nvidia-fabricmanager-550=550.54.15-1")
    assert platform.ssh(node, "systemctl is-active nvidia-fabricmanager").stdout == "failed\n"  # no NVSwitch


def test_a_kernel_without_headers_boots_without_the_driver(platform: Platform) -> None:
    node = "gpu-node-004"
    ok(platform, node, f"apt-get install -y linux-image-{NEW_KERNEL}")
    reboot_and_wait(platform, node)
    smi = platform.ssh(node, "nvidia-smi -L")
    assert (platform.ssh(node, "uname -r").stdout.strip(), smi.rc) == (NEW_KERNEL, 9)
    assert smi.stdout.startswith(NO_DRIVER)


def test_a_node_without_fabric_manager_or_kernel_change_upgrades_as_before(platform: Platform) -> None:
    assert platform.ssh(PLAIN, "systemctl is-active nvidia-fabricmanager").stdout == "inactive\n"
    assert platform.ssh(PLAIN, "nv-fabricmanager --version").rc == 127
    ok(platform, PLAIN, "apt-get install -y --allow-downgrades nvidia-driver-570=570.86.15-0ubuntu1")
    reboot_and_wait(platform, PLAIN)
    assert stack(platform, PLAIN)[:2] == (OLD_KERNEL, "570.86.15")
