"""Three clusters at once — lab, staging, prod — each a rehearsal cluster with its own
activities-only worker whose policy reaches only it; the workflows on the central worker.

A kube task of each cluster's run goes to that cluster's queue and changes that cluster only;
a run whose inventory names prod but sends its tasks to lab's queue is refused by lab's worker,
whose policy does not know prod."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from pitstop.contracts import RunReport
from tests.integration.engine.conftest import StartFn, start_run
from tests.multicluster import RehearsedCluster, inventory_text, module_identities
from tests.policy_site import TestSite

__all__ = ["start_run"]

MARK = "pitstop.dev/rehearsed-on"
RUNBOOK = """
name: mark-nodes
stages:
  - name: mark
    hosts: gpu
    tasks:
      - name: mark the node
        kube.annotate:
          annotations: {"pitstop.dev/rehearsed-on": "{{ marker }}"}
"""


def marks(cluster: RehearsedCluster) -> dict[str, str | None]:
    """Each node of the cluster's simulator: the mark a run left on it, if any."""
    found: dict[str, str | None] = {}
    for node in cluster.nodes:
        obj = cluster.sim.get("nodes", node)
        assert obj is not None, node
        found[node] = (obj["metadata"].get("annotations") or {}).get(MARK)
    return found


async def start_mark(start_run: StartFn, inventory: str, marker: str) -> WorkflowHandle[Any, RunReport]:
    return await start_run(RUNBOOK, inventory, vars={"marker": marker})


@pytest.mark.timeout(180)
async def test_each_clusters_kube_task_runs_on_its_own_worker_and_changes_its_own_cluster(
    temporal_client: Client,
    start_run: StartFn,
    clusters: dict[str, RehearsedCluster],
    worker_site: TestSite,
) -> None:
    # Each cluster is registered with its own worker only, never with the central one.
    for name, cluster in clusters.items():
        assert [p.name for p in cluster.home.clusters_dir.iterdir()] == [name]
    # (Other tests of the session may register clusters of the same names with the central
    # worker: none of them is this rehearsal's simulator.)
    for name, cluster in clusters.items():
        central = worker_site.home / "clusters" / name / "kubeconfig"
        assert not central.exists() or cluster.sim.url not in central.read_text(), name
    # Sequentially started (start_run writes one bundle directory), run at the same time.
    handles = {}
    for name, cluster in clusters.items():
        handles[name] = await start_mark(start_run, cluster.inventory.read_text(), marker=name)
    reports = dict(zip(handles, await asyncio.gather(*(h.result() for h in handles.values())), strict=True))

    for name, cluster in clusters.items():
        assert reports[name].status == "succeeded", reports[name].model_dump_json(indent=1)
        # Every node of the cluster carries its own run's mark, and no other run's.
        assert marks(cluster) == dict.fromkeys(cluster.nodes, name)
        identities = await module_identities(temporal_client, handles[name])
        assert set(identities) == {"module.kube.annotate"}, identities
        assert all(cluster.worker.owns(who) for who in identities["module.kube.annotate"]), (name, identities)


@pytest.mark.timeout(180)
async def test_a_cluster_worker_refuses_a_cluster_its_policy_does_not_reach(
    start_run: StartFn, clusters: dict[str, RehearsedCluster]
) -> None:
    lab, prod = clusters["lab"], clusters["prod"]
    # Names prod, but its tasks go to lab's queue: lab's worker has only lab registered.
    inventory = inventory_text("prod", lab.task_queue, prod.nodes)
    report = await (await start_mark(start_run, inventory, marker="misrouted")).result()

    assert report.status != "succeeded", report.model_dump_json(indent=1)
    [stage] = report.stages
    assert {h.host for h in stage.hosts} == set(prod.nodes)
    for host in stage.hosts:
        assert host.status == "failed", host
        assert "cluster 'prod' is not one this worker may act on (known clusters: lab;" in host.msg, host.msg
    assert set(marks(prod).values()) == {None}, "prod was changed through lab's worker"
    assert set(marks(lab).values()) == {None}
