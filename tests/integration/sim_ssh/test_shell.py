"""The simulated node's shell on its own (no SSH, no cluster): the subset of sh that pitstop's
modules send, with dash's and coreutils' exit statuses and messages."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pitstop.ssh import protocol
from pitstop.ssh.parsers import parse_marker
from pitstop_sim.models import NodeProfile, ProfileUpdate
from pitstop_sim.ssh import shell
from pitstop_sim.ssh.context import ExecContext
from pitstop_sim.ssh.host import NodeHost


class StagingBackend:
    """The simulator's side, kept in memory: one profile, staged updates, counted flashes."""

    def __init__(self) -> None:
        self.node = NodeProfile(
            name="n1",
            domain="zone-a",
            gpu_product="NVIDIA-H100-80GB-HBM3",
            gpus=2,
            driver_version="550.90.07",
            firmware_version="1.0",
            kernel_version="5.15.0-105-generic",
            os_image="Ubuntu 22.04.4 LTS",
            kubelet_version="v1.32.4",
            container_runtime="containerd://1.7.20",
            boot_id="b0",
        )
        self.flashes = 0

    def profile(self, node: str) -> NodeProfile:
        return self.node.model_copy(deep=True)

    def reboot(self, node: str) -> None:
        raise AssertionError("no reboot expected")

    def stage_firmware(self, node: str, version: str, still_flashing: Callable[[], bool]) -> bool:
        self.node.pending = ProfileUpdate(firmware_version=version, apply="reboot")
        return still_flashing()

    def record_flash(self, node: str) -> None:
        self.flashes += 1

    def flash_seconds(self) -> float:
        return 0.3

    def real_seconds(self, sim_seconds: float) -> float:
        return sim_seconds


def _run(host: NodeHost, command: str, user: str = "ops") -> tuple[int, str, str]:
    ctx = ExecContext(host=host, user=user, pid=host.spawn(command), cwd="/root")
    rc = shell.run(command, ctx)
    return rc, ctx.out.decode(), ctx.err.decode()


def test_lists_redirections_and_exit_statuses_follow_sh() -> None:
    host = NodeHost("n1", StagingBackend())
    script = "mkdir -p /var/lib/x && echo a > /var/lib/x/f && echo b >> /var/lib/x/f; cat /var/lib/x/f"
    assert _run(host, script) == (0, "a\nb\n", "")
    assert _run(host, "false && echo no || echo yes") == (0, "yes\n", "")
    assert _run(host, "cat /nope") == (1, "", "cat: /nope: No such file or directory\n")
    assert _run(host, "sh -c 'true; exit 3'")[0] == 3
    assert _run(host, "sudo -n -u ops -- sh -c whoami")[1] == "ops\n"
    assert _run(host, "sudo -n -- sh -c whoami")[1] == "root\n"
    assert _run(host, "dcgmi diag -r 1") == (127, "", "sh: 1: dcgmi: not found\n")
    rc, _, err = _run(host, "cat /var/lib/x/f | wc -l")
    assert rc == 2 and "'|' (pipes, background jobs and fd redirections are not simulated)" in err
    rc, out, _ = _run(host, "stat -c '%a %U %F' -- /var/lib/x/f && sha256sum -- /var/lib/x/f")
    assert rc == 0 and out.startswith("644 ops regular file\n") and out.endswith("  /var/lib/x/f\n")


def test_the_apply_script_keeps_its_pid_alive_until_the_updater_ends() -> None:
    backend = StagingBackend()
    host = NodeHost("n1", backend)
    files = protocol.FirmwareFiles("/var/lib/pitstop", "2.0")
    host.fs.mkdir("/var/lib/pitstop", "root")
    host.fs.write(files.image, b"FIRMWARE 2.0\n", "root")
    line = protocol.marker_line("b0", "run-1", "stage/0/task/0", "2.0")
    command = protocol.apply_command(files, protocol.UPDATER, line, become=True)
    result: list[tuple[int, str, str]] = []
    worker = threading.Thread(target=lambda: result.append(_run(host, command)))
    worker.start()

    deadline = time.monotonic() + 5
    while not host.fs.exists(files.marker):
        assert time.monotonic() < deadline, "no marker written"
        time.sleep(0.01)
    marker = parse_marker(host.fs.read(files.marker).decode())
    assert (marker["boot"], marker["run"], marker["target"]) == ("b0", "run-1", "2.0")
    assert _run(host, f"test -d /proc/{marker['pid']}")[0] == 0, "the flash runs under the marker's pid"
    assert _run(host, f"cat {files.rc}")[0] == 1, "no exit status while it runs"
    worker.join(5)

    assert result == [(0, "", "")]
    assert _run(host, f"test -d /proc/{marker['pid']}")[0] == 1
    assert host.fs.read(files.rc) == b"0\n"
    assert b"staged 2.0; active after reboot" in host.fs.read(files.log)
    assert backend.node.pending is not None and backend.node.pending.firmware_version == "2.0"
    assert backend.flashes == 1
    assert host.fs.get(files.marker).owner == "root", "written under sudo"
