"""Files whose content comes from the node's profile rather than its file system: the boot id
(new at every boot), /etc/os-release (from `os_image`), /etc/hostname."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pitstop.ssh import protocol
from pitstop_sim.models import NodeProfile

if TYPE_CHECKING:
    from pitstop_sim.ssh.context import ExecContext

BOOT_ID_PATH = protocol.BOOT_ID.split(" ", 1)[1]
OS_RELEASE_PATH = protocol.OS_RELEASE.split(" ", 1)[1]
HOSTNAME_PATH = "/etc/hostname"


def os_release(os_image: str) -> str:
    """`Ubuntu 22.04.4 LTS` -> the os-release lines Ubuntu ships (ID, VERSION_ID, PRETTY_NAME...)."""
    words = os_image.split()
    name = words[0] if words else "Linux"
    version = words[1] if len(words) > 1 else ""
    version_id = ".".join(version.split(".")[:2])
    return (
        f'PRETTY_NAME="{os_image}"\n'
        f'NAME="{name}"\n'
        f'VERSION_ID="{version_id}"\n'
        f'VERSION="{" ".join(words[1:])}"\n'
        f"ID={name.lower()}\n"
        "ID_LIKE=debian\n"
    )


def virtual_file(path: str, profile: NodeProfile) -> bytes | None:
    if path == BOOT_ID_PATH:
        return f"{profile.boot_id}\n".encode()
    if path == OS_RELEASE_PATH:
        return os_release(profile.os_image).encode()
    if path == HOSTNAME_PATH:
        return f"{profile.name}\n".encode()
    return None


def is_virtual(path: str) -> bool:
    return path in (BOOT_ID_PATH, OS_RELEASE_PATH, HOSTNAME_PATH)


def read_file(ctx: ExecContext, path: str) -> bytes:
    """A file's bytes as the node shows them (profile-backed files first)."""
    if is_virtual(path):
        content = virtual_file(path, ctx.host.backend.profile(ctx.node))
        assert content is not None
        return content
    return ctx.fs.read(path)
