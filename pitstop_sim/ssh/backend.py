"""What the SSH endpoints need from the rest of the simulator: a node's profile, its reboot,
staging firmware for the next boot, counting flashes, and simulated time.

`SshBackend` is the interface; `ClusterBackend` implements it on a running `SimCluster`
(every call runs on the simulator's loop, from the SSH server's threads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from pitstop_sim.models import NodeProfile, ProfileUpdate

if TYPE_CHECKING:
    from pitstop_sim.cluster import SimCluster, SimControl


class SshBackend(Protocol):
    def profile(self, node: str) -> NodeProfile: ...

    def reboot(self, node: str) -> None: ...

    def stage_firmware(self, node: str, version: str, still_flashing: Callable[[], bool]) -> bool:
        """Make `version` active at the next boot, unless `still_flashing()` turned False
        (the node rebooted meanwhile); True when staged."""
        ...

    def record_flash(self, node: str) -> None: ...

    def flash_seconds(self) -> float:
        """The scenario's default updater run time, in simulated seconds."""
        ...

    def real_seconds(self, sim_seconds: float) -> float: ...

    # Platform upgrades (kubeadm, apt-get, systemctl; see `pitstop_sim.platform`).
    def kubernetes_version(self) -> str: ...

    def upgrade_control_plane(self, version: str) -> None: ...

    def install_packages(self, node: str, packages: dict[str, str]) -> None: ...

    def remove_packages(self, node: str, names: list[str]) -> None: ...

    def boot_kernel(self, node: str, release: str) -> None:
        """The kernel the next boot runs (GRUB's choice, made when the node reboots)."""
        ...

    def nvswitch(self, node: str) -> bool: ...

    def set_held(self, node: str, names: list[str], held: bool) -> None: ...

    def restart_service(self, node: str, service: str) -> None: ...


class ClusterBackend:
    def __init__(self, cluster: SimCluster) -> None:
        self._cluster = cluster

    def profile(self, node: str) -> NodeProfile:
        return self._cluster.node_profile(node)

    def reboot(self, node: str) -> None:
        self._cluster.reboot(node)

    def stage_firmware(self, node: str, version: str, still_flashing: Callable[[], bool]) -> bool:
        def stage(control: SimControl) -> bool:
            # Checked on the loop, where reboots happen: a flash cut short by a reboot stages nothing.
            if not still_flashing():
                return False
            control.set_node_profile(node, ProfileUpdate(firmware_version=version, apply="reboot"))
            return True

        return self._cluster.call(stage)

    def record_flash(self, node: str) -> None:
        self._cluster.call(lambda c: c.ctx.recorder.firmware_flash(node))

    def flash_seconds(self) -> float:
        return self._cluster.scenario.timing.firmware_flash_seconds

    def real_seconds(self, sim_seconds: float) -> float:
        return max(0.0, sim_seconds) / self._cluster.scenario.timing.time_scale

    def kubernetes_version(self) -> str:
        return self._cluster.kubernetes_version()

    def upgrade_control_plane(self, version: str) -> None:
        self._cluster.call(lambda c: c.platform.upgrade_control_plane(version))

    def install_packages(self, node: str, packages: dict[str, str]) -> None:
        self._cluster.call(lambda c: c.platform.install_packages(node, packages))

    def remove_packages(self, node: str, names: list[str]) -> None:
        self._cluster.call(lambda c: c.platform.remove_packages(node, names))

    def boot_kernel(self, node: str, release: str) -> None:
        self._cluster.call(lambda c: c.platform.boot_kernel(node, release))

    def nvswitch(self, node: str) -> bool:
        return self._cluster.scenario.cluster.is_nvswitch(node)

    def set_held(self, node: str, names: list[str], held: bool) -> None:
        self._cluster.call(lambda c: c.platform.set_held(node, names, held))

    def restart_service(self, node: str, service: str) -> None:
        self._cluster.call(lambda c: c.platform.restart_service(node, service))
