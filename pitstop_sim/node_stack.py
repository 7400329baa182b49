"""What a GPU node runs after a boot, from its dpkg view: the kernel GRUB boots, whether the
NVIDIA driver loads on it, and whether Fabric Manager starts against that driver.

Real behaviour modelled (sources kept with the outputs in tests/fixtures/real/node_stack/):
- Ubuntu's GRUB boots the newest installed `linux-image-<release>` (menu entry 0) unless
  `GRUB_DEFAULT` names another entry ("Advanced options for Ubuntu>Ubuntu, with Linux <release>")
  and `update-grub` wrote it to /boot/grub/grub.cfg.
- The driver's kernel modules exist for a release only when DKMS built them against
  `linux-headers-<release>` or Ubuntu's precompiled `linux-modules-nvidia-<branch>[-server]-<release>`
  is installed; otherwise nvidia-smi cannot talk to a driver.
- On NVSwitch systems Fabric Manager refuses to start unless its version is the loaded driver's.
"""

from __future__ import annotations

import re

from pitstop_sim.models import NodeProfile
from pitstop_sim.platform_objects import upstream
from pitstop_sim.ssh.packages import compare_versions

GRUB_CFG = "/boot/grub/grub.cfg"
GRUB_DEFAULTS = "/etc/default/grub"
GRUB_DEFAULTS_DIR = "/etc/default/grub.d"
ENTRY = re.compile(r"^(?:Advanced options for Ubuntu>)?Ubuntu, with Linux (\S+)$")
FABRIC_MANAGER = "nvidia-fabricmanager-"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager"


def installed_kernels(profile: NodeProfile) -> list[str]:
    """Releases with a linux-image package, newest first (GRUB's menu order)."""
    releases = [p.removeprefix("linux-image-") for p in profile.packages if p.startswith("linux-image-")]
    out: list[str] = []
    for release in releases:
        at = next((i for i, r in enumerate(out) if compare_versions(release, r) > 0), len(out))
        out.insert(at, release)
    return out


def grub_default(grub_cfg: str | None) -> str | None:
    """The release `set default="..."` in grub.cfg names, or None for entry 0."""
    for line in (grub_cfg or "").splitlines():
        match = re.match(r'\s*set default="([^"]*)"', line)
        if match:
            entry = ENTRY.match(match.group(1))
            return entry.group(1) if entry else None
    return None


def boot_kernel(profile: NodeProfile, grub_cfg: str | None) -> str | None:
    """The release the next boot runs; None when the node has no kernel packages to choose from
    (a scenario without a dpkg view keeps the profile's kernel)."""
    kernels = installed_kernels(profile)
    if not kernels:
        return None
    chosen = grub_default(grub_cfg)
    return chosen if chosen in kernels else kernels[0]


def driver_branch(driver_version: str) -> str:
    return driver_version.split(".", 1)[0]


def driver_loaded(profile: NodeProfile) -> bool:
    """The driver loads when its modules exist for the booted kernel (see the module doc)."""
    kernel = profile.kernel_version
    if f"linux-image-{kernel}" not in profile.packages:
        return True  # no dpkg view of this kernel: the scenario's profile is the truth
    branch = driver_branch(profile.driver_version)
    prebuilt = {f"linux-modules-nvidia-{branch}{flavour}-{kernel}" for flavour in ("", "-server", "-open")}
    return f"linux-headers-{kernel}" in profile.packages or bool(prebuilt & set(profile.packages))


def fabric_manager(profile: NodeProfile) -> tuple[str, str] | None:
    """The installed `nvidia-fabricmanager-<branch>` package and its version, if any."""
    return next(((n, v) for n, v in profile.packages.items() if n.startswith(FABRIC_MANAGER)), None)


def fabric_manager_version(profile: NodeProfile) -> str | None:
    """`nv-fabricmanager --version`'s version: the installed package's upstream part."""
    installed = fabric_manager(profile)
    return upstream(installed[1]) if installed else None


def fabric_manager_problem(profile: NodeProfile, nvswitch: bool) -> str | None:
    """Why the nvidia-fabricmanager unit is not active, or None when it runs."""
    version = fabric_manager_version(profile)
    if version is None:
        return "Unit nvidia-fabricmanager.service could not be found."
    if not nvswitch:
        return "(pitstop sim) no NVSwitch on this node: Fabric Manager has no fabric to manage"
    if not driver_loaded(profile):
        return "(pitstop sim) the NVIDIA driver is not loaded"
    if version != profile.driver_version:
        # The daemon's own words (gpu-operator#544, nvtrust#55; the fixture
        # tests/fixtures/real/node_stack/fabricmanager_mismatch_journal_530_gpu-operator-issue544.txt).
        return (
            f"fabric manager NVIDIA GPU driver interface version {version} don't match with driver "
            f"version {profile.driver_version}. Please update with matching NVIDIA driver package."
        )
    return None
