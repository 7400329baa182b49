"""Kubernetes node tools, answered from the node's packages and the cluster's control-plane
version: `kubeadm version|upgrade plan|upgrade apply|upgrade node` (with kubeadm's version
policy and its messages), `kubelet --version`, `containerd --version`, `ofed_info -s`, and
`systemctl` (restart kubelet/containerd, daemon-reload, is-active, reboot)."""

from __future__ import annotations

import re

from pitstop_sim import node_stack
from pitstop_sim.platform_objects import upstream
from pitstop_sim.ssh import nodetools
from pitstop_sim.ssh.context import RC_NOT_FOUND, ExecContext, Handler

ADMIN_CONF_ERROR = (
    'couldn\'t create a Kubernetes client from file "/etc/kubernetes/admin.conf": failed to load admin '
    "kubeconfig: open /etc/kubernetes/admin.conf: no such file or directory\n"
    "To see the stack trace of this error execute with --v=5 or higher\n"
)
CONTAINERD_COMMIT = "8fc6bcff51318944179630522a095cc9dbf9f353"
VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
Version = tuple[int, int, int]


def _parse(text: str) -> Version | None:
    match = VERSION_RE.fullmatch(text.strip())
    if match is None:
        return None
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def _show(version: Version) -> str:
    return "v" + ".".join(str(p) for p in version)


def _not_found(ctx: ExecContext, name: str) -> int:
    ctx.error(f"sh: 1: {name}: not found\n")
    return RC_NOT_FOUND


# --- kubeadm -------------------------------------------------------------------------------------
def kubeadm(argv: list[str], ctx: ExecContext) -> int:
    profile = ctx.host.backend.profile(ctx.node)
    package = profile.packages.get("kubeadm")
    if package is None:
        return _not_found(ctx, argv[0])
    own = _parse(upstream(package))
    assert own is not None, f"kubeadm package version {package!r}"
    args = argv[1:]
    if args[:1] == ["version"]:
        output = " ".join(args[1:]).replace("--output", "-o").replace("=", " ")
        if output.split() == ["-o", "short"] or output.split() == ["-oshort"]:
            ctx.write(_show(own) + "\n")
        else:
            major, minor, _ = own
            ctx.write(
                f'kubeadm version: &version.Info{{Major:"{major}", Minor:"{minor}", '
                f'GitVersion:"{_show(own)}", GitTreeState:"clean", GoVersion:"go1.22.8", '
                'Compiler:"gc", Platform:"linux/amd64"}\n'
            )
        return 0
    if args[:2] == ["upgrade", "node"]:
        if ctx.user != "root":
            return _not_root(ctx)
        ctx.write(
            "[upgrade] Reading configuration from the cluster...\n"
            "[upgrade] The configuration for this node was successfully updated!\n"
            "[upgrade] Now you should go ahead and upgrade the kubelet package using your package manager.\n"
        )
        return 0
    if args[:2] in (["upgrade", "plan"], ["upgrade", "apply"]):
        if ctx.user != "root":
            return _not_root(ctx)
        if profile.role != "control-plane":
            ctx.error(ADMIN_CONF_ERROR)
            return 1
        if args[1] == "plan":
            return _plan(ctx, own)
        return _apply(ctx, own, args[2:])
    ctx.error(
        f'unknown command "{" ".join(args[:2])}" for "kubeadm" (the simulated node knows version, '
        "upgrade plan|apply|node)\n"
    )
    return 1


def _not_root(ctx: ExecContext) -> int:
    ctx.error(
        "[preflight] Some fatal errors occurred:\n\t[ERROR IsPrivilegedUser]: user is not running as root\n"
        "[preflight] If you know what you are doing, you can make a check non-fatal with "
        "`--ignore-preflight-errors=...`\n"
    )
    return 1


def _plan(ctx: ExecContext, own: Version) -> int:
    cluster = _parse(ctx.host.backend.kubernetes_version())
    assert cluster is not None
    target = own if own[1] <= cluster[1] + 1 else (own[0], cluster[1] + 1, 0)
    current, wanted = _show(cluster), _show(target)
    node = ctx.node
    ctx.write(
        "[preflight] Running pre-flight checks.\n"
        "[upgrade/config] Reading configuration from the cluster...\n"
        "[upgrade] Running cluster health checks\n"
        "[upgrade] Fetching available versions to upgrade to\n"
        f"[upgrade/versions] Cluster version: {current}\n"
        f"[upgrade/versions] kubeadm version: {_show(own)}\n"
    )
    if target <= cluster:
        ctx.write("\nAwesome, you're up-to-date! Enjoy!\n")
        return 0
    rows = "".join(
        f"{component:<26}{node:<10}{current:<10}{wanted}\n"
        for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
    )
    ctx.write(
        "\nComponents that must be upgraded manually after you have upgraded the control plane "
        "with 'kubeadm upgrade apply':\n"
        f"COMPONENT   NODE      CURRENT   TARGET\nkubelet     {node:<10}{current:<10}{wanted}\n\n"
        "Upgrade to the latest stable version:\n\n"
        f"COMPONENT                 NODE      CURRENT   TARGET\n{rows}\n"
        "You can now apply the upgrade by executing the following command:\n\n"
        f"\tkubeadm upgrade apply {wanted}\n\n"
    )
    return 0


def _apply(ctx: ExecContext, own: Version, args: list[str]) -> int:
    positional = [a for a in args if not a.startswith("-")]
    flags = {a.split("=", 1)[0] for a in args if a.startswith("-")}
    if not positional:
        ctx.error("[upgrade/version] FATAL: missing version argument (kubeadm upgrade apply VERSION)\n")
        return 1
    target = _parse(positional[0])
    if target is None:
        ctx.error(
            f'[upgrade/version] FATAL: unable to parse normalized version "{positional[0]}" as a '
            "semantic version\n"
        )
        return 1
    cluster = _parse(ctx.host.backend.kubernetes_version())
    assert cluster is not None
    wanted = _show(target)
    ctx.write(
        "[preflight] Running pre-flight checks.\n"
        "[upgrade/config] Reading configuration from the cluster...\n"
        "[upgrade] Running cluster health checks\n"
        f'[upgrade/version] You have chosen to change the cluster version to "{wanted}"\n'
        f"[upgrade/versions] Cluster version: {_show(cluster)}\n"
        f"[upgrade/versions] kubeadm version: {_show(own)}\n"
    )
    fatal, skippable = _policy(cluster, own, target)
    if fatal:
        ctx.error(
            "[upgrade/version] FATAL: the --version argument is invalid due to these fatal errors:\n\n"
            + "".join(f"\t- {e}\n" for e in fatal)
            + "\nPlease fix the misalignments highlighted above and try upgrading again\n"
            "To see the stack trace of this error execute with --v=5 or higher\n"
        )
        return 1
    if skippable and "--force" not in flags and "-f" not in flags:
        ctx.error(
            "[upgrade/version] FATAL: the --version argument is invalid due to these errors:\n\n"
            + "".join(f"\t- {e}\n" for e in skippable)
            + "\nCan be bypassed if you pass the --force flag\n"
            "To see the stack trace of this error execute with --v=5 or higher\n"
        )
        return 1
    if not flags & {"--yes", "-y", "--force", "-f", "--dry-run"}:
        ctx.write("[upgrade] Are you sure you want to proceed? [y/N]: ")
        ctx.error("won't proceed; the user didn't answer (Y|y) in order to continue\n")
        return 1
    if "--dry-run" in flags:
        ctx.write("[dryrun] Finished dryrunning successfully!\n")
        return 0
    ctx.host.backend.upgrade_control_plane(wanted)
    ctx.write(
        "[upgrade/prepull] Pulling images required for setting up a Kubernetes cluster\n"
        "[upgrade/apply] Upgrading your Static Pod-hosted control plane to version "
        f'"{wanted}" (timeout: 5m0s)...\n'
        + "".join(
            f'[upgrade/staticpods] Component "{c}" upgraded successfully!\n'
            for c in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
        )
        + "[addons] Applied essential addon: CoreDNS\n[addons] Applied essential addon: kube-proxy\n\n"
        f'[upgrade/successful] SUCCESS! Your cluster was upgraded to "{wanted}". Enjoy!\n\n'
        "[upgrade/kubelet] Now that your control plane is upgraded, please proceed with upgrading your "
        "kubelets if you haven't already done so.\n"
    )
    return 0


def _policy(cluster: Version, own: Version, target: Version) -> tuple[list[str], list[str]]:
    """kubeadm's EnforceVersionPolicies (phases/upgrade/policy.go): fatal and skippable errors."""
    wanted = f'"{_show(target)}"'
    fatal: list[str] = []
    skippable: list[str] = []
    if target[1] > cluster[1] + 1:
        fatal.append(
            f"Specified version to upgrade to {wanted} is too high; "
            "kubeadm can upgrade only 1 minor version at a time"
        )
    if target[1] < cluster[1] - 1:
        fatal.append(
            f"Specified version to downgrade to {wanted} is too low; "
            "kubeadm can downgrade only 1 minor version at a time"
        )
    if own < target:
        fatal.append(
            f'Specified version to upgrade to {wanted} is higher than the kubeadm version "{_show(own)}". '
            "Upgrade kubeadm first using the tool you used to install kubeadm"
        )
    if own[1] > target[1]:
        skippable.append(
            f'Kubeadm version "{_show(own)}" can only be used to upgrade to Kubernetes version '
            f'"v{own[0]}.{own[1]}"'
        )
    if target < cluster:
        skippable.append(
            f"Specified version to upgrade to {wanted} is equal to or lower than the cluster version "
            f'"{_show(cluster)}". Downgrades are not supported yet'
        )
    return fatal, skippable


# --- versions of the node's daemons ------------------------------------------------------------------
def kubelet(argv: list[str], ctx: ExecContext) -> int:
    package = ctx.host.backend.profile(ctx.node).packages.get("kubelet")
    if package is None:
        return _not_found(ctx, argv[0])
    if argv[1:] != ["--version"]:
        ctx.error("kubelet (pitstop sim): only `kubelet --version` is simulated\n")
        return 1
    ctx.write(f"Kubernetes v{upstream(package)}\n")
    return 0


def containerd(argv: list[str], ctx: ExecContext) -> int:
    package = ctx.host.backend.profile(ctx.node).packages.get("containerd.io")
    if package is None:
        return _not_found(ctx, argv[0])
    if argv[1:] not in (["--version"], ["-v"]):
        ctx.error("containerd (pitstop sim): only `containerd --version` is simulated\n")
        return 1
    ctx.write(f"containerd containerd.io {upstream(package)} {CONTAINERD_COMMIT}\n")
    return 0


def ofed_info(argv: list[str], ctx: ExecContext) -> int:
    version = ctx.host.backend.profile(ctx.node).nic_driver
    if version is None:
        return _not_found(ctx, argv[0])
    if argv[1:] not in (["-s"], ["-n"]):
        ctx.error("ofed_info (pitstop sim): only `ofed_info -s` and `-n` are simulated\n")
        return 1
    ctx.write(f"MLNX_OFED_LINUX-{version}:\n" if argv[1] == "-s" else f"{version}\n")
    return 0


# --- systemctl -------------------------------------------------------------------------------------
def _unit_state(unit: str, ctx: ExecContext) -> str:
    if unit in ("kubelet", "containerd"):
        return "active"
    if unit == node_stack.FABRIC_MANAGER_UNIT:
        profile = ctx.host.backend.profile(ctx.node)
        if node_stack.fabric_manager(profile) is None:
            return "inactive"  # systemd's answer for a unit it does not know
        problem = node_stack.fabric_manager_problem(profile, ctx.host.backend.nvswitch(ctx.node))
        return "active" if problem is None else "failed"
    return "inactive"


def _fabric_manager_status(ctx: ExecContext) -> int:
    """The unit's state and, when it failed, the daemon's last words (as the journal shows them)."""
    profile = ctx.host.backend.profile(ctx.node)
    if node_stack.fabric_manager(profile) is None:
        ctx.error("Unit nvidia-fabricmanager.service could not be found.\n")
        return 4
    problem = node_stack.fabric_manager_problem(profile, ctx.host.backend.nvswitch(ctx.node))
    state = "active (running)" if problem is None else "failed (Result: exit-code)"
    ctx.write(f"● nvidia-fabricmanager.service - NVIDIA fabric manager service\n     Active: {state}\n")
    if problem is not None:
        ctx.write(f"{ctx.node} nv-fabricmanager: {problem}\n")
    return 0 if problem is None else 3


def systemctl(argv: list[str], ctx: ExecContext) -> int:
    args = [a for a in argv[1:] if not a.startswith("-")]
    verb = args[0] if args else ""
    if verb in ("reboot", "poweroff") or not args:
        return nodetools.reboot(argv, ctx)
    if verb == "daemon-reload":
        return 0
    units = [u.removesuffix(".service") for u in args[1:]]
    if verb == "is-active":
        states = [_unit_state(u, ctx) for u in units]
        if not {"--quiet", "-q"} & set(argv):
            ctx.write("".join(f"{state}\n" for state in states))
        return 0 if all(state == "active" for state in states) else 3
    if verb == "status" and units == [node_stack.FABRIC_MANAGER_UNIT]:
        return _fabric_manager_status(ctx)
    if verb in ("restart", "try-restart", "reload-or-restart"):
        for unit in units:
            if unit not in ("kubelet", "containerd"):
                ctx.error(f"Failed to restart {unit}.service: Unit {unit}.service not found.\n")
                return 5
            if ctx.user != "root":
                ctx.error(
                    f"Failed to restart {unit}.service: Interactive authentication required.\n"
                    f"See system logs and 'systemctl status {unit}.service' for details.\n"
                )
                return 1
        for unit in units:
            ctx.host.backend.restart_service(ctx.node, unit)
        return 0
    ctx.error(
        f"systemctl (pitstop sim): `{verb}` is not simulated (restart, daemon-reload, is-active, reboot)\n"
    )
    return 1


COMMANDS: dict[str, Handler] = {
    "kubeadm": kubeadm,
    "kubelet": kubelet,
    "containerd": containerd,
    "ofed_info": ofed_info,
    "systemctl": systemctl,
}
