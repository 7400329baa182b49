"""The SSH test lab: real sshd nodes on loopback, module calls aimed at them, and a fake
GPU node whose firmware updater, reboot and nvidia-smi are small scripts on its PATH.

The fake node is the same machine (loopback), so its tools keep their state in files under
the node's directory: `fw/current`, `fw/pending`, `fw/flashes.log` (one line per flash, so
"flashed once" is countable), `boot_id`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import signal
import textwrap
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.modules import SecretRef
from pitstop.runbook.inventory import ClusterConfig, SSHConfig
from tests.policy_site import PolicyLayer
from tests.sshd import SSHD, ClientKey, SshServer, running_with, wait_gone

KEY_SECRET = "ssh-test-key"
KEY_ENV = "PITSTOP_SECRET_SSH_TEST_KEY"

# Real `nvidia-smi --query-gpu=index,name,driver_version,vbios_version,memory.total
# --format=csv,noheader` output of a two-GPU H100 node.
NVIDIA_SMI_OUTPUT = (
    "0, NVIDIA H100 80GB HBM3, 550.54.15, 96.00.89.00.01, 81559 MiB\n"
    "1, NVIDIA H100 80GB HBM3, 550.54.15, 96.00.89.00.01, 81559 MiB\n"
)


@dataclass
class SshLab:
    """The lab's worker policy: cluster `lab` with the lab's known_hosts file, the client key
    granted as its SSH key; another known_hosts file makes another cluster (`lab-<hash>`)."""

    base: Path
    key: ClientKey
    node: SshServer
    known_hosts: Path
    policy: PolicyLayer
    heartbeats: list[Any] = field(default_factory=list)

    def cluster_name(self, known_hosts: Path | None) -> str:
        if known_hosts is None or known_hosts == self.known_hosts:
            return "lab"
        name = f"lab-{hashlib.sha256(str(known_hosts).encode()).hexdigest()[:8]}"
        if name not in self.policy.doc.get("clusters", {}):
            self.policy.cluster(name, known_hosts=known_hosts)
        return name

    def cluster(
        self,
        *,
        known_hosts: Path | None = None,
        known_hosts_secret: str | None = None,
        jump_host: str | None = None,
        key_secret: str = KEY_SECRET,
    ) -> ClusterConfig:
        return ClusterConfig(
            name=self.cluster_name(known_hosts),
            ssh=SSHConfig(
                user="root",
                key=SecretRef(secret=key_secret),
                known_hosts_secret=SecretRef(secret=known_hosts_secret) if known_hosts_secret else None,
                jump_host=jump_host,
            ),
        )

    def call(
        self,
        module: str,
        args: dict[str, Any],
        *,
        server: SshServer | None = None,
        check_mode: bool = False,
        run_id: str = "run-1",
        task_path: str = "stage/0/task/0",
        port: int | None = None,
        **cluster: Any,
    ) -> ModuleCall:
        target = server or self.node
        return ModuleCall(
            module=module,
            host=f"node-{target.port}",
            args=args,
            check_mode=check_mode,
            run_id=run_id,
            task_path=task_path,
            host_vars={"ansible_host": "127.0.0.1", "ansible_port": port or target.port},
            cluster=self.cluster(**cluster),
        )

    def run(self, activity_fn: Callable[[ModuleCall], ModuleResult], call: ModuleCall) -> ModuleResult:
        """Run a module activity in an activity context (heartbeats recorded), as a worker would."""
        env = ActivityEnvironment()
        env.on_heartbeat = lambda *details: self.heartbeats.append(details)
        return env.run(activity_fn, call)

    def run_retried(
        self, activity_fn: Callable[[ModuleCall], ModuleResult], call: ModuleCall, attempts: int = 3
    ) -> ModuleResult:
        """`run`, with the retries a worker's retry policy gives a module call: a failure the
        module marks retryable (a pooled connection lost before the command started, seen on a
        loaded machine) is tried again; a non-retryable one is raised at once."""
        for _ in range(attempts - 1):
            try:
                return self.run(activity_fn, call)
            except ApplicationError as exc:
                if exc.non_retryable:
                    raise
        return self.run(activity_fn, call)


@dataclass
class FakeNode:
    """A 'GPU node': an sshd whose sessions find fake node tools first on PATH."""

    root: Path
    server: SshServer

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def fw(self) -> Path:
        return self.root / "fw"

    @property
    def state_dir(self) -> str:
        return str(self.root / "state")

    @property
    def boot_id_command(self) -> str:
        return f"cat {self.root / 'boot_id'}"

    @property
    def reboot_command(self) -> str:
        # Always the absolute path: a PATH mistake must never reach the real `reboot`.
        return str(self.bin / "fake-reboot")

    def boot_id(self) -> str:
        return (self.root / "boot_id").read_text().strip()

    def current(self) -> str:
        return (self.fw / "current").read_text().strip()

    def pending(self) -> str | None:
        path = self.fw / "pending"
        return path.read_text().strip() if path.exists() else None

    def flashes(self) -> list[str]:
        path = self.fw / "flashes.log"
        return path.read_text().splitlines() if path.exists() else []

    def set_flash_seconds(self, seconds: float) -> None:
        (self.fw / "flash_seconds").write_text(str(seconds))

    def set_flash_fails(self, fails: bool) -> None:
        path = self.fw / "fail"
        if fails:
            path.write_text("yes")
        else:
            path.unlink(missing_ok=True)

    def image(self, version: str) -> Path:
        path = self.root / f"image-{version}.bin"
        path.write_bytes(f"FIRMWARE {version}\n".encode() + os.urandom(8192))
        return path

    def stop(self) -> None:
        """Stop the node for good: first any reboot still in progress (it runs detached and
        would start sshd again after this test), then sshd, wherever it was started from."""
        scripts = running_with(self.bin)
        for pid in scripts:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_gone(scripts, within=10.0)
        self.server.stop()


_UPDATER = """\
#!/usr/bin/python3
# Fake `pitstop-fwupdate` (the updater contract): --current, --pending, --apply IMAGE.
import os, sys, time
from pathlib import Path

FW = Path({fw!r})
args = sys.argv[1:]
if args == ["--current"]:
    print((FW / "current").read_text().strip())
elif args == ["--pending"]:
    pending = FW / "pending"
    if pending.exists():
        print(pending.read_text().strip())
elif len(args) == 2 and args[0] == "--apply":
    version = Path(args[1]).read_bytes().split(b"\\n", 1)[0].decode().split()[1]
    with open(FW / "flashes.log", "a") as log:
        log.write(f"{{version}} pid={{os.getpid()}}\\n")
    print(f"flashing {{version}}", flush=True)
    delay = FW / "flash_seconds"
    for _ in range(int(float(delay.read_text()) * 10) if delay.exists() else 0):
        time.sleep(0.1)
        print("progress", flush=True)
    if (FW / "fail").exists():
        print("flash failed: device busy", file=sys.stderr)
        sys.exit(3)
    (FW / "pending").write_text(version)
    print(f"staged {{version}}; active after reboot")
else:
    print("usage: pitstop-fwupdate --current | --pending | --apply IMAGE", file=sys.stderr)
    sys.exit(2)
"""

_REBOOT = """\
#!/usr/bin/python3
# Fake reboot: returns at once, then (detached) stops this node's sshd and every session,
# makes the pending firmware current, changes the boot id, and starts sshd again.
import json, os, signal, subprocess, sys, time, uuid
from pathlib import Path

CFG = json.loads({cfg!r})
if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
null = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
time.sleep(0.3)


def parent(pid):
    try:
        return int(Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


listener = int(Path(CFG["pid_file"]).read_text())
tree = {{listener}}
changed = True
while changed:
    changed = False
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in tree and parent(int(entry.name)) in tree:
            tree.add(int(entry.name))
            changed = True
for pid in tree - {{os.getpid()}}:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def gone(pid):
    try:
        return Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


# A killed listener holds its port until the kernel has torn it down (slow on a loaded
# machine): bind only once every killed process is gone, or the bind fails and the node
# never comes back.
deadline = time.monotonic() + 30
while not all(gone(pid) for pid in tree - {{os.getpid()}}) and time.monotonic() < deadline:
    time.sleep(0.02)
fw = Path(CFG["fw"])
if (fw / "pending").exists():
    (fw / "current").write_text((fw / "pending").read_text())
    (fw / "pending").unlink()
Path(CFG["boot_id"]).write_text(str(uuid.uuid4()) + "\\n")
# Down until someone has seen it down (a connection hung up at once, as on a node whose sshd
# is gone) and at least `down_seconds` passed: on a loaded machine a poller that is late must
# still find the node away, not sleep through a fixed window and only see the new boot id.
import socket
down = socket.socket()
down.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
down.bind(("127.0.0.1", CFG["port"]))
down.listen(16)
down.settimeout(CFG["down_seconds"] + 60)  # a bound for a reboot nobody is waiting for
until = time.monotonic() + CFG["down_seconds"]
seen = False
while not seen or time.monotonic() < until:
    try:
        conn, _ = down.accept()
    except socket.timeout:
        break
    conn.close()
    seen = True
    down.settimeout(max(0.05, until - time.monotonic()) if time.monotonic() < until else 0.05)
down.close()
Path(CFG["pid_file"]).unlink(missing_ok=True)
subprocess.run([CFG["sshd"], "-f", CFG["config"], "-E", CFG["log"]], check=False)
"""

_NVIDIA_SMI = """\
#!/bin/sh
if [ "$*" = "--query-gpu=index,name,driver_version,vbios_version,memory.total --format=csv,noheader" ]; then
  printf '%s' {output}
  exit 0
fi
echo "fake nvidia-smi: unsupported arguments: $*" >&2
exit 2
"""


def make_fake_node(root: Path, port: int, authorized_keys: list[str], firmware: str = "1.0") -> FakeNode:
    bin_dir, fw = root / "bin", root / "fw"
    bin_dir.mkdir(parents=True)
    fw.mkdir()
    (fw / "current").write_text(firmware)
    (root / "boot_id").write_text(str(uuid.uuid4()) + "\n")
    server = SshServer(root / "sshd", port, authorized_keys, path_prefix=str(bin_dir))
    cfg = {
        "pid_file": str(server.pid_file),
        "config": str(server.config_path),
        "log": str(server.log_path),
        "sshd": SSHD,
        "fw": str(fw),
        "boot_id": str(root / "boot_id"),
        "down_seconds": 1.0,
        "port": port,
    }
    scripts = {
        "pitstop-fwupdate": _UPDATER.format(fw=str(fw)),
        "fake-reboot": _REBOOT.format(cfg=json.dumps(cfg)),
        "nvidia-smi": _NVIDIA_SMI.format(output=shlex.quote(NVIDIA_SMI_OUTPUT)),
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(textwrap.dedent(text))
        path.chmod(0o755)
    return FakeNode(root, server.start())
