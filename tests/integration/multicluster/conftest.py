"""Many-cluster fixtures: the central worker (workflows, on the test's queue), a cluster worker
process on a cluster queue of its own, and three rehearsal clusters (lab, staging, prod), each
with its own activities-only worker (tests/multicluster.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from pitstop.settings import Settings
from tests.integration.engine.conftest import engine_worker
from tests.multicluster import ClusterHome, ClusterWorker, RehearsedCluster, rehearsal_clusters

__all__ = ["cluster_worker", "clusters", "engine_worker"]

CLUSTERS = ["lab", "staging", "prod"]


@pytest.fixture
def cluster_worker(temporal_settings: Settings, task_queue: str, tmp_path: Path) -> Iterator[ClusterWorker]:
    """An activities-only worker (not started) for cluster `edge` on `<task_queue>-edge`."""
    home = ClusterHome(tmp_path / "edge-home")
    worker = ClusterWorker(temporal_settings, f"{task_queue}-edge", home, tmp_path)
    yield worker
    worker.kill()


@pytest.fixture
async def clusters(
    temporal_settings: Settings, temporal_client: Client, task_queue: str, tmp_path: Path
) -> AsyncIterator[dict[str, RehearsedCluster]]:
    """lab, staging and prod: a simulator each, and each one's activities-only worker polling."""
    with rehearsal_clusters(temporal_settings, tmp_path, CLUSTERS, task_queue) as started:
        for cluster in started:
            await cluster.worker.start(temporal_client)
        yield {c.name: c for c in started}
