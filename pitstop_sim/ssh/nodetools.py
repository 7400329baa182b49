"""The GPU node's own tools, answered from its simulator profile: `nvidia-smi` (GPUs, driver,
VBIOS = the active firmware), the firmware updater `pitstop-fwupdate` (see the updater
contract in `activities/ssh.py`), and `reboot`."""

from __future__ import annotations

import posixpath
import re
import uuid

from pitstop.ssh import protocol
from pitstop_sim.models import NodeProfile
from pitstop_sim.ssh.context import RC_NOT_FOUND, RC_USAGE, ConnectionGone, ExecContext, Handler
from pitstop_sim.ssh.host import UpdaterRun, image_version

UPDATER = protocol.UPDATER
# What `nvidia-smi` reports as memory.total for the products the scenarios use (MiB).
MEMORY_MIB = {80: 81559, 94: 95830, 141: 143771, 40: 40960, 48: 46068, 24: 23034}


# --- nvidia-smi ---------------------------------------------------------------------------
def gpu_name(product: str) -> str:
    """The node label `NVIDIA-H100-80GB-HBM3` is nvidia-smi's `NVIDIA H100 80GB HBM3`."""
    return product.replace("-", " ")


def memory_mib(product: str) -> int:
    match = re.search(r"(\d+)GB", product)
    if match is None:
        return 81559
    size = int(match.group(1))
    return MEMORY_MIB.get(size, size * 1024)


def _gpu_fields(profile: NodeProfile, index: int, units: bool) -> dict[str, str]:
    gpu_uuid = uuid.uuid5(uuid.NAMESPACE_DNS, f"{profile.name}/gpu/{index}")
    return {
        "index": str(index),
        "name": gpu_name(profile.gpu_product),
        "gpu_name": gpu_name(profile.gpu_product),
        "driver_version": profile.driver_version,
        "vbios_version": profile.firmware_version,
        "memory.total": f"{memory_mib(profile.gpu_product)}{' MiB' if units else ''}",
        "uuid": f"GPU-{gpu_uuid}",
        "gpu_uuid": f"GPU-{gpu_uuid}",
        "pci.bus_id": f"00000000:{0x18 + index * 0x10:02X}:00.0",
        "serial": f"{gpu_uuid.int % 10**13:013d}",
        "count": str(profile.gpus),
    }


def nvidia_smi(argv: list[str], ctx: ExecContext) -> int:
    profile = ctx.host.backend.profile(ctx.node)
    if profile.gpus == 0:
        ctx.error("sh: 1: nvidia-smi: not found\n")
        return RC_NOT_FOUND
    args = argv[1:]
    if args == ["-L"]:
        for i in range(profile.gpus):
            fields = _gpu_fields(profile, i, True)
            ctx.write(f"GPU {i}: {fields['name']} (UUID: {fields['uuid']})\n")
        return 0
    query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
    fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), None)
    if query is None or fmt is None or len(args) != 2:
        ctx.error(
            "nvidia-smi (pitstop sim): only `-L` and `--query-gpu=FIELDS --format=csv[,noheader][,nounits]` "
            "are simulated\n"
        )
        return RC_USAGE
    options = set(fmt.split(","))
    if "csv" not in options:
        ctx.error(f'"{fmt}" is not a valid format.\n')
        return RC_USAGE
    names = [n.strip() for n in query.split(",")]
    units = "nounits" not in options
    known = _gpu_fields(profile, 0, units)
    for name in names:
        if name not in known:
            ctx.error(f'Field "{name}" is not a valid field to query.\n')
            return RC_USAGE
    if "noheader" not in options:
        ctx.write(", ".join(f"{n} [MiB]" if n == "memory.total" and units else n for n in names) + "\n")
    for i in range(profile.gpus):
        fields = _gpu_fields(profile, i, units)
        ctx.write(", ".join(fields[n] for n in names) + "\n")
    return 0


# --- the firmware updater -----------------------------------------------------------------
def _image_version(ctx: ExecContext, image: str) -> tuple[str | None, str]:
    """The version in the image at `image`, or (None, the updater's complaint)."""
    try:
        data = ctx.fs.read(ctx.path(image))
    except OSError as exc:
        return None, f"pitstop-fwupdate: cannot read {image}: {exc.strerror}\n"
    version = image_version(data, image)
    if version is None:
        return (
            None,
            f"pitstop-fwupdate: {image} is not a firmware image (no `FIRMWARE <version>` first line)\n",
        )
    return version, ""


def _wait_for(run: UpdaterRun, ctx: ExecContext) -> int:
    ctx.wait(run.done)
    if run.rc is None:
        raise ConnectionGone()  # the node went down mid-flash
    return run.rc


def fwupdate(argv: list[str], ctx: ExecContext) -> int:
    args = argv[1:]
    profile = ctx.host.backend.profile(ctx.node)
    if args == ["--current"]:
        ctx.write(profile.firmware_version + "\n")
        return 0
    if args == ["--pending"]:
        pending = profile.pending.firmware_version if profile.pending else None
        if pending:
            ctx.write(pending + "\n")
        return 0
    if len(args) == 2 and args[0] == "--apply":
        version, problem = _image_version(ctx, args[1])
        if version is None:
            ctx.error(problem)
            return RC_USAGE
        run = ctx.host.start_flash(version, ctx.pid, ctx.write, None, ctx.user)
        return _wait_for(run, ctx)
    ctx.error(f"usage: {UPDATER} --current | --pending | --apply IMAGE\n")
    return RC_USAGE


def apply(request: protocol.ApplyRequest, ctx: ExecContext) -> int:
    """pitstop's apply script (`protocol.apply_command`): marker, updater, log, exit status.

    Mirrors what `sh -c` does with it: `$$` in the marker is this shell's pid, which stays
    alive (`test -d /proc/PID`) until the updater ends, whatever happens to the connection.
    """
    fs = ctx.fs
    marker, log, rc_file = ctx.path(request.marker), ctx.path(request.log), ctx.path(request.rc)
    try:
        fs.write(marker, (request.marker_line.replace("$$", str(ctx.pid)) + "\n").encode(), ctx.user)
    except OSError:
        ctx.error(f"sh: 1: cannot create {request.marker}: Directory nonexistent\n")
        return RC_USAGE

    def finish(rc: int, message: str) -> int:
        fs.write(log, message.encode(), ctx.user, append=True)
        fs.write(rc_file, f"{rc}\n".encode(), ctx.user)
        return rc

    try:
        fs.write(log, b"", ctx.user)
    except OSError:
        ctx.error(f"sh: 1: cannot create {request.log}: Directory nonexistent\n")
        fs.write(rc_file, f"{RC_USAGE}\n".encode(), ctx.user)
        return RC_USAGE
    if posixpath.basename(request.updater) != UPDATER:
        return finish(RC_NOT_FOUND, f"sh: 1: {request.updater}: not found\n")
    version, problem = _image_version(ctx, request.image)
    if version is None:
        return finish(RC_USAGE, problem)

    def to_log(text: str) -> None:
        fs.write(log, text.encode(), ctx.user, append=True)

    run = ctx.host.start_flash(version, ctx.pid, to_log, rc_file, ctx.user)
    return _wait_for(run, ctx)


# --- reboot -------------------------------------------------------------------------------
def reboot(argv: list[str], ctx: ExecContext) -> int:
    name = posixpath.basename(argv[0])
    wants_reboot = (
        name == "reboot"
        or (name == "systemctl" and argv[1:2] == ["reboot"])
        or (name == "shutdown" and "-r" in argv[1:])
    )
    if not wants_reboot:
        ctx.error(f"{name}: only rebooting is simulated on this node (`reboot`)\n")
        return 1
    backend, node = ctx.host.backend, ctx.node
    ctx.after_exit.append(lambda: backend.reboot(node))
    return 0


COMMANDS: dict[str, Handler] = {
    "nvidia-smi": nvidia_smi,
    UPDATER: fwupdate,
    "reboot": reboot,
    "systemctl": reboot,
    "shutdown": reboot,
}
