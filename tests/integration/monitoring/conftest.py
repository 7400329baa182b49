"""A rehearsal cluster started in-process from scenario text, stopped after the test."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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
