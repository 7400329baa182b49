"""The exact commands the SSH modules send to a node, so a simulated node can answer them.

Every probe is one `exec` request on its own channel, with the text below. Every value pitstop
puts into a command (the updater, paths, package names) is quoted with `shlex.quote`, which
leaves plain names and paths as they are, so a hostile value is one argument, never shell code;
the updater and the state directory are also checked against `SAFE_WORD` / `SAFE_DIR` by the
module arguments, and `apply_command` refuses anything else. With `become`, a command is wrapped as
`sudo -n -- sh -c '<command>'`; `unwrap_become()` undoes that. The firmware updater
contract (`pitstop-fwupdate --current | --pending | --apply IMAGE`) and pitstop's files on the
node are described in `activities/ssh.py`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from pitstop.ssh.commands import become_prefix

# --- facts ------------------------------------------------------------------------------
BOOT_ID = "cat /proc/sys/kernel/random/boot_id"
KERNEL = "uname -r"
OS_RELEASE = "cat /etc/os-release"
HOSTNAME = "hostname"
NVIDIA_SMI_QUERY = "index,name,driver_version,vbios_version,memory.total"
NVIDIA_SMI = f"nvidia-smi --query-gpu={NVIDIA_SMI_QUERY} --format=csv,noheader"

# --- version facts (platform inventory; read-only, each tool may be absent) ---------------
KUBELET_VERSION = "kubelet --version"  # `Kubernetes v1.30.6`
CONTAINERD_VERSION = "containerd --version"  # `containerd containerd.io 1.7.20 <commit>`
KUBEADM_VERSION = "kubeadm version -o short"  # `v1.30.6`
OFED_INFO = "ofed_info -s"  # `MLNX_OFED_LINUX-24.07-0.6.1.0:`
# Debian packages whose installed version the facts report (`dpkg-query` answers 1 when absent).
FACT_PACKAGES = ("kubeadm", "kubelet", "kubectl")

# --- firmware -----------------------------------------------------------------------------
UPDATER = "pitstop-fwupdate"
STATE_DIR = "/var/lib/pitstop"

# --- reboot -------------------------------------------------------------------------------
REBOOT = "reboot"
TEST_AFTER_REBOOT = "whoami"

# Exit code of a shell for "command not found".
RC_NOT_FOUND = 127

# A command name or path (the updater): no shell metacharacters, no option-looking start.
SAFE_WORD = re.compile(r"^[A-Za-z0-9_./+@:][A-Za-z0-9_./+@:-]*$")
# An absolute directory on the node (pitstop's state directory).
SAFE_DIR = re.compile(r"^/[A-Za-z0-9_./+@:-]*$")


def check_updater(value: str) -> str:
    if not SAFE_WORD.fullmatch(value):
        raise ValueError(
            f"updater {value!r} must be a command name or path (letters, digits and _ . / + @ : -, "
            "not starting with '-'); it is run as `UPDATER --current`, never through a shell"
        )
    return value


def check_state_dir(value: str) -> str:
    if not SAFE_DIR.fullmatch(value) or "/../" in f"{value}/":
        raise ValueError(
            f"state_dir {value!r} must be an absolute directory on the node (letters, digits and "
            "_ . / + @ : -, no '..')"
        )
    return value


def updater_command(updater: str, flag: str) -> str:
    """`UPDATER FLAG` with the updater quoted: whatever it holds is one word, never code."""
    return f"{shlex.quote(updater)} {shlex.quote(flag)}"


def fw_current(updater: str = UPDATER) -> str:
    return updater_command(updater, "--current")


def fw_pending(updater: str = UPDATER) -> str:
    return updater_command(updater, "--pending")


def package_version(package: str) -> str:
    """`dpkg-query -W -f='${Version}' PKG`: the installed version, e.g. `1.30.6-1.1`."""
    return f"dpkg-query -W -f='${{Version}}' {shlex.quote(package)}"


def read_file(path: str) -> str:
    return f"cat {shlex.quote(path)}"


def sha256(path: str) -> str:
    return f"sha256sum {shlex.quote(path)}"


def tail(path: str, size: int) -> str:
    return f"tail -c {int(size)} {shlex.quote(path)}"


def path_exists(path: str) -> str:
    return f"test -e {shlex.quote(path)}"


def process_running(pid: int) -> str:
    return f"test -d /proc/{int(pid)}"


def move(src: str, dest: str) -> str:
    return f"mv -f {shlex.quote(src)} {shlex.quote(dest)}"


def remove(*paths: str) -> str:
    return "rm -f " + " ".join(shlex.quote(p) for p in paths)


def safe_name(value: str) -> str:
    """A version or id usable in a file name and in a marker line."""
    return re.sub(r"[^A-Za-z0-9._:+@-]", "_", value)


@dataclass(frozen=True)
class FirmwareFiles:
    """pitstop's files on the node for one target version (all in the state directory)."""

    state_dir: str
    target: str

    def _path(self, suffix: str) -> str:
        return f"{self.state_dir.rstrip('/')}/firmware-{safe_name(self.target)}.{suffix}"

    @property
    def image(self) -> str:
        return self._path("img")

    @property
    def marker(self) -> str:
        """Written right before the updater starts: `pid=<shell pid> boot=... run=... task=...`."""
        return self._path("staged")

    @property
    def rc(self) -> str:
        """The updater's exit status, written when it ends."""
        return self._path("rc")

    @property
    def log(self) -> str:
        return self._path("log")

    @property
    def failed(self) -> str:
        """Where the marker of a failed flash is moved, so a later run may try again."""
        return self._path("failed")


@dataclass(frozen=True)
class ApplyRequest:
    updater: str
    image: str
    marker: str
    marker_line: str
    log: str
    rc: str


# The shell script of an apply. The marker and the updater start in one exec request: once
# the host has it, both happen even if pitstop's connection or worker dies right after.
# Output goes to the log, not the channel, so a dropped connection cannot SIGPIPE a flash.
_APPLY = (
    'echo "{marker_line}" > {marker} && '
    "{{ {updater} --apply {image} > {log} 2>&1; rc=$?; echo $rc > {rc}; exit $rc; }}"
)
_APPLY_RE = re.compile(
    r'^echo "(?P<marker_line>[^"]*)" > (?P<marker>\S+) && \{ (?P<updater>\S+) --apply (?P<image>\S+) '
    r"> (?P<log>\S+) 2>&1; rc=\$\?; echo \$rc > (?P<rc>\S+); exit \$rc; \}$"
)


_MARKER_VALUE = r"[A-Za-z0-9._:/+@-]*"
# The only `$` is `$$` (the shell's pid); every value went through marker_value.
_MARKER_LINE = re.compile(
    rf"^pid=\$\$ boot={_MARKER_VALUE} run={_MARKER_VALUE} task={_MARKER_VALUE} target={_MARKER_VALUE}$"
)


def marker_value(value: str) -> str:
    """A value inside the marker line (double-quoted by the shell): no spaces, quotes or `$`."""
    return re.sub(r"[^A-Za-z0-9._:/+@-]", "_", value)


def marker_line(boot_id: str, run_id: str, task_path: str, target: str) -> str:
    """`$$` is expanded by the host's shell to its pid: alive while the updater runs."""
    return (
        f"pid=$$ boot={marker_value(boot_id)} run={marker_value(run_id)} "
        f"task={marker_value(task_path)} target={marker_value(target)}"
    )


def apply_command(files: FirmwareFiles, updater: str, line: str, become: bool = False) -> str:
    for value in (updater, files.image, files.marker, files.log, files.rc):
        if not SAFE_WORD.fullmatch(value):
            raise ValueError(f"unsafe path or command for the firmware updater: {value!r}")
    if not _MARKER_LINE.fullmatch(line):
        raise ValueError(f"unsafe marker line for the firmware updater: {line!r}")
    q = shlex.quote  # leaves the checked values as they are; kept so no edit can forget it
    script = _APPLY.format(
        marker_line=line,
        marker=q(files.marker),
        updater=q(updater),
        image=q(files.image),
        log=q(files.log),
        rc=q(files.rc),
    )
    return shlex.join([*become_prefix(become), "sh", "-c", script])


def parse_apply(command: str) -> ApplyRequest | None:
    """The apply request in a command sent by `apply_command`, or None (for simulators)."""
    try:
        argv = _strip_sudo(shlex.split(command))
    except ValueError:
        return None
    if len(argv) != 3 or argv[:2] != ["sh", "-c"]:
        return None
    match = _APPLY_RE.match(argv[2])
    if match is None:
        return None
    return ApplyRequest(**match.groupdict())


def _strip_sudo(argv: list[str]) -> list[str]:
    if argv[:2] != ["sudo", "-n"]:
        return argv
    rest = argv[2:]
    if rest[:1] == ["-u"]:
        rest = rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return rest


def unwrap_become(command: str) -> str:
    """`sudo -n [-u USER] -- sh -c 'X'` → `X`; anything else unchanged."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    if argv[:2] != ["sudo", "-n"]:
        return command
    rest = _strip_sudo(argv)
    if len(rest) == 3 and rest[:2] == ["sh", "-c"]:
        return rest[2]
    return shlex.join(rest)
