"""The node's package manager, answered from its profile's package set: `apt-get install`
(`PKG=VERSION`, held and downgraded packages refused as apt refuses them), `apt-get update`,
`apt-mark hold|unhold|showhold` and `dpkg-query -W [-f FORMAT]`.

A driver (`nvidia-driver-<branch>`) or kernel (`linux-image-<release>`) package takes effect
at the next reboot; `kubelet` and `containerd.io` when their service restarts. One branch of the
driver and of Fabric Manager (`nvidia-fabricmanager-<branch>`) at a time: a new branch's package
replaces the old one. `apt-get remove|purge` takes packages out of the dpkg view, except the
running kernel's image (boot another kernel first, as Ubuntu's linux-check-removal insists)."""

from __future__ import annotations

import re

from pitstop_sim.platform_objects import kernel_package_version
from pitstop_sim.ssh.context import ExecContext, Handler

APT_FAILED = 100
# What the node's apt sources offer besides what is installed (Kubernetes, containerd, NVIDIA,
# Mellanox/DOCA and Ubuntu kernel repositories): anything else is a typo apt cannot find.
REPOSITORY_PACKAGES = frozenset(
    {"kubeadm", "kubelet", "kubectl", "kubernetes-cni", "cri-tools", "containerd", "containerd.io"}
)
REPOSITORY_PREFIXES = (
    "nvidia-",
    "libnvidia-",
    "cuda-",
    "datacenter-gpu-manager",
    "linux-image-",
    "linux-headers-",
    "linux-modules-",
    "mlnx-",
    "doca-",
)
# Packages named by kernel release: the archive has one version per name (`kernel_package_version`).
KERNEL_PACKAGE = re.compile(
    r"^linux-(?:image|headers|modules-nvidia-[0-9]+(?:-server|-open)?)-([0-9]+\.[0-9]+\.[0-9]+-[0-9]+-[a-z0-9]+)$"
)
ONE_BRANCH = ("nvidia-driver-", "nvidia-fabricmanager-")
NOT_ROOT_APT = (
    "E: Could not open lock file /var/lib/dpkg/lock-frontend - open (13: Permission denied)\n"
    "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), are you root?\n"
)


# --- Debian version ordering (deb-version(7)) ----------------------------------------------------
def _order(char: str) -> int:
    if char == "~":
        return -1
    if not char:
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(a: str, b: str) -> int:
    while a or b:
        a_text = re.match(r"[^0-9]*", a)
        b_text = re.match(r"[^0-9]*", b)
        at, bt = (a_text.group() if a_text else ""), (b_text.group() if b_text else "")
        for i in range(max(len(at), len(bt))):
            diff = _order(at[i] if i < len(at) else "") - _order(bt[i] if i < len(bt) else "")
            if diff:
                return -1 if diff < 0 else 1
        a, b = a[len(at) :], b[len(bt) :]
        a_num = re.match(r"[0-9]*", a)
        b_num = re.match(r"[0-9]*", b)
        an, bn = (a_num.group() if a_num else ""), (b_num.group() if b_num else "")
        if int(an or 0) != int(bn or 0):
            return -1 if int(an or 0) < int(bn or 0) else 1
        a, b = a[len(an) :], b[len(bn) :]
    return 0


def _split(version: str) -> tuple[int, str, str]:
    epoch, _, rest = version.rpartition(":")
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    return int(epoch) if epoch.isdigit() else 0, upstream, revision


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1 as `dpkg --compare-versions` orders Debian versions."""
    ea, ua, ra = _split(a)
    eb, ub, rb = _split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


# --- apt-get -------------------------------------------------------------------------------------
def _apt_options(args: list[str]) -> tuple[set[str], list[str]]:
    flags: set[str] = set()
    words: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("-o", "-c", "-t") and rest:
            rest.pop(0)
        elif arg.startswith("--"):
            flags.add(arg.split("=", 1)[0])
        elif arg.startswith("-") and len(arg) > 1:
            flags.update(f"-{c}" for c in arg[1:])
        else:
            words.append(arg)
    return flags, words


def apt_get(argv: list[str], ctx: ExecContext) -> int:
    flags, words = _apt_options(argv[1:])
    if not words:
        ctx.error("E: No command given\n")
        return 1
    command, packages = words[0], words[1:]
    if command == "update":
        if ctx.user != "root":
            ctx.error("E: Could not open lock file /var/lib/apt/lists/lock - open (13: Permission denied)\n")
            return APT_FAILED
        ctx.write("Hit:1 https://pkgs.k8s.io/core:/stable:/v1.30/deb  InRelease\nReading package lists...\n")
        return 0
    if command not in ("install", "remove", "purge"):
        ctx.error(f"E: Invalid operation {command} (the simulated node knows install, remove and update)\n")
        return APT_FAILED
    if ctx.user != "root":
        ctx.error(NOT_ROOT_APT)
        return APT_FAILED
    if command != "install":
        return _remove(packages, flags, ctx)
    return _install(packages, flags, ctx)


def _remove(names: list[str], flags: set[str], ctx: ExecContext) -> int:
    profile = ctx.host.backend.profile(ctx.node)
    ctx.write("Reading package lists...\nBuilding dependency tree...\nReading state information...\n")
    running = f"linux-image-{profile.kernel_version}"
    if running in names:
        # Ubuntu's linux-check-removal asks "Abort kernel removal?" (default yes); unattended, it aborts.
        ctx.error(
            f"E: (pitstop sim) {running} is the running kernel: linux-check-removal aborts its "
            "removal; boot another kernel first\n"
        )
        return APT_FAILED
    gone = [n for n in names if n in profile.packages]
    for name in names:
        if name not in profile.packages:
            ctx.write(f"Package '{name}' is not installed, so not removed\n")
    if gone:
        ctx.write(f"The following packages will be REMOVED:\n  {' '.join(gone)}\n")
    ctx.write(f"0 upgraded, 0 newly installed, {len(gone)} to remove and 0 not upgraded.\n")
    if not gone:
        return 0
    if not {"-y", "--yes", "--assume-yes"} & flags:
        ctx.write("Do you want to continue? [Y/n] Abort.\n")
        return 1
    ctx.host.backend.remove_packages(ctx.node, gone)
    for name in gone:
        ctx.write(f"Removing {name} ({profile.packages[name]}) ...\n")
    return 0


def _install(specs: list[str], flags: set[str], ctx: ExecContext) -> int:
    profile = ctx.host.backend.profile(ctx.node)
    installed = profile.packages
    ctx.write("Reading package lists...\nBuilding dependency tree...\nReading state information...\n")
    changes: dict[str, str] = {}
    upgraded: list[str] = []
    new: list[str] = []
    downgraded: list[str] = []
    removed: list[str] = []
    held: list[str] = []
    for spec in specs:
        name, _, version = spec.partition("=")
        name = name.split(":", 1)[0]  # `kubeadm:amd64`
        current = installed.get(name)
        if current is None and name not in REPOSITORY_PACKAGES and not name.startswith(REPOSITORY_PREFIXES):
            ctx.error(f"E: Unable to locate package {name}\n")
            return APT_FAILED
        kernel = KERNEL_PACKAGE.match(name)
        if not version and current is None and kernel is not None:
            version = kernel_package_version(kernel.group(1))
        if not version:
            if current is None:
                ctx.error(f"E: Unable to locate package {name}\n")
                return APT_FAILED
            ctx.write(f"{name} is already the newest version ({current}).\n")
            continue
        if current == version and not name.startswith(("nvidia-driver-", "linux-image-")):
            ctx.write(f"{name} is already the newest version ({current}).\n")
            continue
        changes[name] = version
        if current is None:
            new.append(name)
            for family in ONE_BRANCH:
                if name.startswith(family):
                    removed += [p for p in installed if p.startswith(family) and p != name]
        elif compare_versions(version, current) < 0:
            downgraded.append(name)
        elif current != version:
            upgraded.append(name)
        if name in profile.held and current is not None and current != version:
            held.append(name)
    yes = bool({"-y", "--yes", "--assume-yes"} & flags)
    for title, names in (
        ("The following packages will be REMOVED:", removed),
        ("The following NEW packages will be installed:", new),
        ("The following held packages will be changed:", held),
        ("The following packages will be upgraded:", upgraded),
        ("The following packages will be DOWNGRADED:", downgraded),
    ):
        if names:
            ctx.write(f"{title}\n  {' '.join(names)}\n")
    ctx.write(
        f"{len(upgraded)} upgraded, {len(new)} newly installed, {len(downgraded)} downgraded, "
        f"{len(removed)} to remove and 0 not upgraded.\n"
    )
    if not changes:
        return 0
    if not yes:
        ctx.write("Do you want to continue? [Y/n] Abort.\n")
        return 1
    if held and "--allow-change-held-packages" not in flags:
        ctx.error("E: Held packages were changed and -y was used without --allow-change-held-packages.\n")
        return APT_FAILED
    if downgraded and "--allow-downgrades" not in flags:
        ctx.error("E: Packages were downgraded and -y was used without --allow-downgrades.\n")
        return APT_FAILED
    ctx.host.backend.install_packages(ctx.node, changes)
    for name in removed:
        ctx.write(f"Removing {name} ({installed[name]}) ...\n")
    for name, version in changes.items():
        ctx.write(f"Setting up {name} ({version}) ...\n")
        if name.startswith(("nvidia-driver-", "linux-image-")):
            ctx.write(f"{name}: the new version becomes active after a reboot.\n")
    return 0


# --- apt-mark ------------------------------------------------------------------------------------
def apt_mark(argv: list[str], ctx: ExecContext) -> int:
    _, words = _apt_options(argv[1:])
    if not words:
        ctx.error("apt-mark: no command given (hold, unhold, showhold)\n")
        return 1
    command, names = words[0], words[1:]
    profile = ctx.host.backend.profile(ctx.node)
    if command == "showhold":
        ctx.write("".join(f"{name}\n" for name in sorted(profile.held)))
        return 0
    if command not in ("hold", "unhold"):
        ctx.error(f"E: Invalid operation {command}\n")
        return APT_FAILED
    if ctx.user != "root":
        ctx.error("E: Can not write log (Is /dev/pts mounted?) - open (13: Permission denied)\n")
        return APT_FAILED
    for name in names:
        if name not in profile.packages:
            ctx.error(f"E: Unable to locate package {name}\n")
            return APT_FAILED
    hold = command == "hold"
    for name in names:
        was_held = name in profile.held
        if hold:
            ctx.write(f"{name} was already set on hold.\n" if was_held else f"{name} set on hold.\n")
        else:
            ctx.write(f"Canceled hold on {name}.\n" if was_held else f"{name} was already not on hold.\n")
    ctx.host.backend.set_held(ctx.node, names, hold)
    return 0


# --- dpkg-query ----------------------------------------------------------------------------------
def _format(fmt: str, name: str, version: str) -> str:
    fields = {
        "Package": name,
        "binary:Package": name,
        "Version": version,
        "Status": "install ok installed",
        "db:Status-Abbrev": "ii ",
        "Architecture": "amd64",
    }
    text = re.sub(r"\$\{([^}]+)\}", lambda m: fields.get(m.group(1).split(";")[0], ""), fmt)
    return text.replace("\\n", "\n").replace("\\t", "\t")


def dpkg_query(argv: list[str], ctx: ExecContext) -> int:
    args = argv[1:]
    fmt = "${binary:Package}\t${Version}\n"
    show = False
    names: list[str] = []
    while args:
        arg = args.pop(0)
        if arg in ("-W", "--show"):
            show = True
        elif arg in ("-f", "--showformat") and args:
            fmt = args.pop(0)
        elif arg.startswith(("-f", "--showformat=")):
            fmt = arg.split("=", 1)[1] if arg.startswith("--") else arg[2:].removeprefix("=")
        elif arg.startswith("-"):
            ctx.error(f"dpkg-query: error: unknown option {arg}\n")
            return 2
        else:
            names.append(arg)
    if not show:
        ctx.error("dpkg-query: error: need an action option (the simulated node knows -W)\n")
        return 2
    packages = ctx.host.backend.profile(ctx.node).packages
    rc = 0
    for name in names:
        version = packages.get(name)
        if version is None:
            ctx.error(f"dpkg-query: no packages found matching {name}\n")
            rc = 1
            continue
        ctx.write(_format(fmt, name, version))
    return rc


COMMANDS: dict[str, Handler] = {
    "apt-get": apt_get,
    "apt": apt_get,
    "apt-mark": apt_mark,
    "dpkg-query": dpkg_query,
}
