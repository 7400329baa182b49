"""Rehearsal clusters persisted to etcd: a factory that starts them (stopped after the test),
a key prefix of each test's own in the session's etcd, an etcd of a test's own, and etcdctl to
look at what etcd holds. The engine and S3 fixtures of the etcd backup tests serve the drill."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pitstop.devstack import DevStack, free_ports_config
from pitstop_sim import SimCluster, SimConfig

# The engine (a worker, `run` a runbook to its end) and the backup site (S3 credentials, a
# fresh bucket, a cluster name) fixtures.
from tests.integration.engine.conftest import engine_worker, run, start_run  # noqa: F401
from tests.integration.etcd.conftest import aws_env, bucket, cluster, etcdctl  # noqa: F401

StartSim = Callable[..., SimCluster]


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own: other tests share the session's etcd."""
    return f"/t-{uuid.uuid4().hex[:8]}/registry/"


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[StartSim]:
    """`start_sim(**SimConfig fields)` -> a running SimCluster, stopped after the test."""
    running: list[SimCluster] = []

    def start(**options: object) -> SimCluster:
        options.setdefault("domains", 1)
        sim = SimCluster(SimConfig(kubeconfig=tmp_path / f"kubeconfig-{len(running)}", **options))
        sim.start()
        running.append(sim)
        return sim

    yield start
    for sim in running:
        sim.stop()


@pytest.fixture
def own_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """An etcd of the test's own (free ports, fresh data directory): for counting its whole
    keyspace, or stopping it, without disturbing the session's."""
    config = free_ports_config(tmp_path_factory.mktemp("own-etcd"), parts=("etcd",))
    with DevStack(config).running(timeout=30) as stack:
        yield stack


def count(endpoint: str, prefix: str) -> int:
    """Keys under `prefix`, as etcdctl counts them."""
    out = etcdctl(endpoint, "get", prefix, "--prefix", "--count-only", "--write-out=fields")
    return int(next(line.split(":")[1] for line in out.splitlines() if line.startswith('"Count"')))


def keys(endpoint: str, prefix: str) -> set[str]:
    return set(etcdctl(endpoint, "get", prefix, "--prefix", "--keys-only").split())


def stored(endpoint: str, key: str) -> dict[str, Any] | None:
    """The JSON object stored at `key`, or None."""
    text = etcdctl(endpoint, "get", key, "--print-value-only").strip()
    return json.loads(text) if text else None
