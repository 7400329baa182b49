"""A rehearsal cluster started in-process from scenario text, and the embedded stack's
Prometheus (Debian's /usr/bin/prometheus) in the test's own home; both stopped after the test."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pitstop.devstack import DevStack, free_port, free_ports_config
from pitstop.prometheus_stack import PROMETHEUS_BINARY
from pitstop_sim import SimCluster, SimConfig, parse_scenario

StartSim = Callable[..., SimCluster]


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[StartSim]:
    running: list[SimCluster] = []

    def start(scenario_yaml: str, **options: object) -> SimCluster:
        scenario = parse_scenario(textwrap.dedent(scenario_yaml).strip("\n") + "\n", "scenario.yaml")
        sim = SimCluster(
            SimConfig(scenario=scenario, kubeconfig=tmp_path / f"kubeconfig-{len(running)}", **options)
        )
        sim.start()
        running.append(sim)
        return sim

    yield start
    for sim in running:
        sim.stop()


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[DevStack]:
    """Only the stack's `prometheus` part, on free ports, in a home of its own."""
    if not PROMETHEUS_BINARY.is_file():
        pytest.skip(
            f"{PROMETHEUS_BINARY} is not installed (Debian package `prometheus`; `make test` installs it)"
        )
    config = free_ports_config(tmp_path / "stack-home", parts=("prometheus",), prometheus_port=free_port())
    with DevStack(config).running(timeout=60) as stack:
        yield stack
