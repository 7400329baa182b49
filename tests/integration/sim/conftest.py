"""Rehearsal-cluster fixtures: a simulator started in-process from scenario text, and a
`kubectl` runner pointed at it (real kubectl, its own discovery cache per test)."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from pitstop_sim import SimCluster, SimConfig, parse_scenario

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

StartSim = Callable[..., SimCluster]


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[StartSim]:
    """`start_sim(*yaml_parts, **SimConfig fields)` -> a running SimCluster (stopped after the test).

    Each part is dedented on its own, so a shared block (timing) can precede an indented one."""
    running: list[SimCluster] = []

    def start(*scenario_yaml: str, **options: object) -> SimCluster:
        text = "\n".join(textwrap.dedent(part).strip("\n") for part in scenario_yaml) + "\n"
        scenario = parse_scenario(text, "scenario.yaml")
        sim = SimCluster(
            SimConfig(scenario=scenario, kubeconfig=tmp_path / f"kubeconfig-{len(running)}", **options)
        )
        sim.start()
        running.append(sim)
        return sim

    yield start
    for sim in running:
        sim.stop()


class Kubectl:
    def __init__(self, kubeconfig: Path, cache: Path) -> None:
        self.kubeconfig = kubeconfig
        self.cache = cache

    def argv(self, *args: str) -> list[str]:
        return [KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache), *args]

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}{result.stdout}"
            )
        return result

    def __call__(self, *args: str) -> str:
        return self.run(*args).stdout

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def kubectl_for(tmp_path: Path) -> Callable[[SimCluster], Kubectl]:
    if not Path(KUBECTL).exists():
        pytest.skip("kubectl is not installed (expected at /usr/bin/kubectl)")

    def make(sim: SimCluster) -> Kubectl:
        assert sim.kubeconfig_path is not None
        return Kubectl(sim.kubeconfig_path, tmp_path / f"kube-cache-{sim.port}")

    return make


@pytest.fixture
def kube_client_for() -> Iterator[Callable[[SimCluster], client.ApiClient]]:
    """An official-client ApiClient from the simulator's kubeconfig (closed after the test)."""
    made: list[client.ApiClient] = []

    def make(sim: SimCluster) -> client.ApiClient:
        api_client = config.new_client_from_config(config_file=str(sim.kubeconfig_path))
        made.append(api_client)
        return api_client

    yield make
    for api_client in made:
        api_client.close()
