"""How many feasible nodes the simulated scheduler looks for before choosing, as
kube-scheduler's numFeasibleNodesToFind with the default percentageOfNodesToScore."""

from __future__ import annotations

import pytest

from pitstop_sim.controllers.scheduler import feasible_nodes_to_find


@pytest.mark.parametrize(
    ("nodes", "wanted"),
    [
        (0, 0),
        (1, 1),
        (99, 99),
        (100, 100),
        (200, 100),
        (1000, 420),
        (5000, 500),
        (10_000, 500),
        (50_000, 2500),
    ],
)
def test_feasible_nodes_to_find(nodes: int, wanted: int) -> None:
    assert feasible_nodes_to_find(nodes) == wanted
