"""The GPU node's own tools, answered from its simulator profile: `nvidia-smi` (GPUs, driver,
VBIOS = the active firmware; its real failure when the booted kernel has no driver modules),
`nv-fabricmanager --version`, `update-grub`, the firmware updater `pitstop-fwupdate` (see the
updater contract in `activities/ssh.py`), and `reboot` (GRUB chooses the kernel it boots)."""

from __future__ import annotations

import posixpath
import re
import uuid

from pitstop.ssh import protocol
from pitstop_sim import node_stack
from pitstop_sim.models import NodeProfile
from pitstop_sim.ssh.context import RC_NOT_FOUND, RC_USAGE, ConnectionGone, ExecContext, Handler
from pitstop_sim.ssh.host import UpdaterRun, image_version

UPDATER = protocol.UPDATER
# nvidia-smi's words and exit status (9: driver not loaded) when no driver module is loaded;
# tests/fixtures/real/node_stack/nvidia_smi_no_driver_dkms_kernel_6.17_idx55035689867.txt (its source there).
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
RC_NO_DRIVER = 9
# `nv-fabricmanager --version`
# (tests/fixtures/real/node_stack/nv_fabricmanager_version_535_idx30957937506.txt).
FM_VERSION_LINE = "Fabric Manager version is : {version}\n"
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
    if not node_stack.driver_loaded(profile):
        ctx.write(NO_DRIVER)
        return RC_NO_DRIVER
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


# --- Fabric Manager and GRUB ----------------------------------------------------------------
def nv_fabricmanager(argv: list[str], ctx: ExecContext) -> int:
    version = node_stack.fabric_manager_version(ctx.host.backend.profile(ctx.node))
    if version is None:
        ctx.error("sh: 1: nv-fabricmanager: not found\n")
        return RC_NOT_FOUND
    if argv[1:] in (["--version"], ["-v"]):
        ctx.write(FM_VERSION_LINE.format(version=version))
        return 0
    ctx.error("nv-fabricmanager (pitstop sim): only `--version` is simulated; systemd runs the daemon\n")
    return RC_USAGE


def _grub_setting(ctx: ExecContext) -> str:
    """GRUB_DEFAULT as grub-mkconfig reads it: /etc/default/grub, then grub.d/*.cfg in order."""
    paths = [node_stack.GRUB_DEFAULTS]
    if ctx.fs.exists(node_stack.GRUB_DEFAULTS_DIR):
        names = sorted(n for n in ctx.fs.listdir(node_stack.GRUB_DEFAULTS_DIR) if n.endswith(".cfg"))
        paths += [f"{node_stack.GRUB_DEFAULTS_DIR}/{n}" for n in names]
    value = "0"
    for path in paths:
        if not ctx.fs.exists(path):
            continue
        for line in ctx.fs.read(path).decode(errors="replace").splitlines():
            match = re.match(r"\s*GRUB_DEFAULT=(.*)$", line)
            if match:
                value = match.group(1).strip().strip("\"'")
    return value


def update_grub(argv: list[str], ctx: ExecContext) -> int:
    """`update-grub` (= `grub-mkconfig -o /boot/grub/grub.cfg`): the menu of installed kernels,
    newest first, and the default entry GRUB_DEFAULT names."""
    if ctx.user != "root":
        ctx.error("grub-mkconfig: You must run this as root\n")
        return 1
    profile = ctx.host.backend.profile(ctx.node)
    setting = _grub_setting(ctx)
    lines = ["### generated by update-grub (pitstop sim)", f'set default="{setting}"']
    ctx.error("Sourcing file `/etc/default/grub'\nGenerating grub configuration file ...\n")
    for release in node_stack.installed_kernels(profile):
        lines.append(f"menuentry 'Ubuntu, with Linux {release}'")
        ctx.error(f"Found linux image: /boot/vmlinuz-{release}\n")
    ctx.fs.mkdir("/boot/grub", ctx.user, parents=True)
    ctx.fs.write(node_stack.GRUB_CFG, ("\n".join(lines) + "\n").encode(), ctx.user)
    ctx.error("done\n")
    return 0


def _grub_cfg(ctx: ExecContext) -> str | None:
    if not ctx.fs.exists(node_stack.GRUB_CFG):
        return None
    return ctx.fs.read(node_stack.GRUB_CFG).decode(errors="replace")


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
    # GRUB picks the kernel at boot: the newest installed image unless grub.cfg names another.
    kernel = node_stack.boot_kernel(backend.profile(node), _grub_cfg(ctx))
    if kernel is not None:
        backend.boot_kernel(node, kernel)
    ctx.after_exit.append(lambda: backend.reboot(node))
    return 0


COMMANDS: dict[str, Handler] = {
    "nvidia-smi": nvidia_smi,
    UPDATER: fwupdate,
    "nv-fabricmanager": nv_fabricmanager,
    "update-grub": update_grub,
    "reboot": reboot,
    "systemctl": reboot,
    "shutdown": reboot,
}
