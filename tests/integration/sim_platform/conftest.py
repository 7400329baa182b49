"""One rehearsal cluster per test module, started from `runbooks/scenarios/
platform-upgrade-regression.yaml` with SSH endpoints: real kubectl against its API, and
commands run on its nodes over SSH as pitstop's modules run them."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
import pytest

from pitstop_sim import SimCluster, SimConfig, load_scenario

SCENARIO = Path(__file__).resolve().parents[3] / "runbooks" / "scenarios" / "platform-upgrade-regression.yaml"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@dataclass(frozen=True)
class Ran:
    rc: int
    stdout: str
    stderr: str


@dataclass
class Platform:
    sim: SimCluster
    kubeconfig: Path

    def ssh(self, node: str, command: str) -> Ran:
        """Run `command` on `node` over SSH as the inventory's user (`sudo -n` for root)."""
        client = paramiko.SSHClient()
        client.load_host_keys(str(self.sim.known_hosts_path))
        client.connect(
            "127.0.0.1",
            port=self.sim.ssh_port(node),
            username="ops",
            key_filename=str(self.sim.client_key_path),
            look_for_keys=False,
            allow_agent=False,
        )
        try:
            _, out, err = client.exec_command(command, timeout=30)
            rc = out.channel.recv_exit_status()
            return Ran(rc, out.read().decode(), err.read().decode())
        finally:
            client.close()

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def node(self, name: str) -> dict[str, Any]:
        node = self.sim.get("nodes", name)
        assert node is not None
        return node

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        self.sim.wait_for(lambda _: predicate(), timeout, what)


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    directory = tmp_path_factory.mktemp("platform")
    sim = SimCluster(
        SimConfig(
            scenario=load_scenario(SCENARIO), kubeconfig=directory / "kubeconfig", ssh=True, time_scale=60
        )
    )
    sim.start()
    try:
        yield Platform(sim, directory / "kubeconfig")
    finally:
        sim.stop()
