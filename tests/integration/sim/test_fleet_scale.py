"""The simulator with a few thousand nodes, through its HTTP API and the official client:
lists answered from the label and field indexes agree with a full scan, a watch sees a
patch, generated names that clash are drawn again, and `GET /_sim/writes` counts writes and
annotation changes per node. Behaviour only: the timing is `bench/sim_scale.py`'s."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, watch

from pitstop_sim import SimCluster
from tests.integration.sim.conftest import StartSim

NODES = 3000
DOMAINS = 16
ZONE = "topology.kubernetes.io/zone"
KEY = "fleet.pitstop.dev/step"

FLEET = f"""
cluster:
  nodes: {NODES}
  domains: {DOMAINS}
  gpus_per_node: 8
timing:
  time_scale: 600
workloads:
  deployments:
    - name: web
      namespace: team-a
      replicas: 300
      cpu: 100m
      memory: 128Mi
"""

ClientFor = Callable[[SimCluster], client.ApiClient]


@pytest.fixture(scope="module")
def fleet_sim(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One fleet for the module (seeding 3,000 nodes and ~9,300 pods takes a few seconds)."""
    from pitstop_sim import SimConfig, parse_scenario

    sim = SimCluster(
        SimConfig(
            scenario=parse_scenario(FLEET, "fleet.yaml"),
            kubeconfig=tmp_path_factory.mktemp("fleet") / "kubeconfig",
        )
    )
    sim.start(timeout=300)
    yield sim
    sim.stop()


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _raw_list(sim: SimCluster, path: str) -> list[dict[str, Any]]:
    status, body = _get(f"{sim.url}{path}")
    assert status == 200, body
    return list(body["items"])


def test_label_selected_lists_match_a_full_scan(fleet_sim: SimCluster) -> None:
    every = _raw_list(fleet_sim, "/api/v1/nodes")
    assert len(every) == NODES
    zones = sorted({n["metadata"]["labels"][ZONE] for n in every})
    assert len(zones) == DOMAINS
    for zone in (zones[0], zones[7], zones[-1]):
        scanned = sorted(n["metadata"]["name"] for n in every if n["metadata"]["labels"][ZONE] == zone)
        indexed = [
            n["metadata"]["name"]
            for n in _raw_list(fleet_sim, f"/api/v1/nodes?labelSelector={ZONE}%3D{zone}")
        ]
        assert indexed == scanned and scanned
    # Set-based and negated selectors are answered by a scan; they must agree too.
    two = f"{ZONE}+in+({zones[1]},{zones[2]})"
    scanned = sorted(n["metadata"]["name"] for n in every if n["metadata"]["labels"][ZONE] in zones[1:3])
    assert [
        n["metadata"]["name"] for n in _raw_list(fleet_sim, f"/api/v1/nodes?labelSelector={two}")
    ] == scanned
    not_first = f"{ZONE}!%3D{zones[0]}"
    listed = _raw_list(fleet_sim, f"/api/v1/nodes?labelSelector={not_first}")
    assert len(listed) == NODES - len([n for n in every if n["metadata"]["labels"][ZONE] == zones[0]])


def test_field_selected_pod_lists_match_a_full_scan(fleet_sim: SimCluster) -> None:
    pods = _raw_list(fleet_sim, "/api/v1/pods")
    by_node: dict[str, list[str]] = {}
    for pod in pods:
        by_node.setdefault(pod["spec"].get("nodeName", ""), []).append(
            f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        )
    busiest = max(by_node, key=lambda n: len(by_node[n]))
    for node in (busiest, "gpu-node-0001", "gpu-node-1500", "gpu-node-3000"):
        listed = _raw_list(fleet_sim, f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
        assert sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in listed) == sorted(
            by_node[node]
        )
    # Combined with a namespace and a label, and a node that has nothing.
    web_here = _raw_list(
        fleet_sim,
        f"/api/v1/namespaces/team-a/pods?labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3D{busiest}",
    )
    scanned = [
        p
        for p in pods
        if p["spec"].get("nodeName") == busiest
        and p["metadata"]["namespace"] == "team-a"
        and p["metadata"]["labels"].get("app") == "web"
    ]
    assert len(web_here) == len(scanned)
    assert _raw_list(fleet_sim, "/api/v1/pods?fieldSelector=spec.nodeName%3Dno-such-node") == []


def test_daemonset_pods_on_thousands_of_nodes_have_distinct_names(fleet_sim: SimCluster) -> None:
    """5-character suffixes clash among ~3,000 pods of one DaemonSet; clashes are drawn again."""
    pods = _raw_list(fleet_sim, "/api/v1/namespaces/gpu-operator/pods")
    names = [p["metadata"]["name"] for p in pods]
    # Two GPU Operator DaemonSets per node (device plugin, DCGM exporter; the driver is host-managed).
    assert len(names) == len(set(names)) == 2 * NODES
    assert all(n.rsplit("-", 1)[1].isalnum() and len(n.rsplit("-", 1)[1]) == 5 for n in names)


def test_a_watch_sees_a_patch_and_the_write_counts_record_it(
    fleet_sim: SimCluster, kube_client_for: ClientFor
) -> None:
    core = client.CoreV1Api(kube_client_for(fleet_sim))
    node = "gpu-node-2718"
    rv = core.list_node(limit=1).metadata.resource_version
    seen: list[str] = []
    watcher = watch.Watch()
    started = threading.Event()

    def follow() -> None:
        started.set()
        for event in watcher.stream(
            core.list_node, field_selector=f"metadata.name={node}", resource_version=rv, timeout_seconds=60
        ):
            seen.append((event["object"].metadata.annotations or {}).get(KEY, ""))
            if seen[-1] == "2":
                watcher.stop()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    started.wait()
    fleet_sim.reset_counters()
    core.patch_node(node, {"metadata": {"annotations": {KEY: "1"}}})
    core.patch_node(node, {"metadata": {"annotations": {KEY: "1"}}})  # stores nothing new
    core.patch_node(
        node, {"metadata": {"annotations": {KEY: "2"}}}, _content_type="application/merge-patch+json"
    )
    core.patch_node("gpu-node-0002", {"metadata": {"annotations": {KEY: "1"}}})
    thread.join(60)
    assert not thread.is_alive(), f"the watch saw only {seen}"
    assert seen == ["1", "2"]

    status, body = _get(f"{fleet_sim.url}/_sim/writes?resource=nodes&annotation={KEY}")
    assert status == 200, body
    assert body["annotation"] == KEY
    assert {name: o["annotation_changes"][KEY] for name, o in body["objects"].items()} == {
        node: 2,
        "gpu-node-0002": 1,
    }
    status, every = _get(f"{fleet_sim.url}/_sim/writes")
    assert status == 200 and every["resource"] == "nodes"
    assert every["objects"][node]["writes"] == 2
    assert every["objects"][node]["annotation_changes"] == {KEY: 2}
    assert "gpu-node-0003" not in every["objects"]


def test_write_counts_refuse_a_resource_that_is_not_served(fleet_sim: SimCluster) -> None:
    status, body = _get(f"{fleet_sim.url}/_sim/writes?resource=nodez")
    assert status == 404
    assert "nodez" in body["error"]


def test_a_generate_name_create_draws_again_when_the_name_is_taken(start_sim: StartSim) -> None:
    sim = start_sim("cluster:\n  nodes: 1\n  domains: 1\n")
    first = sim.create("configmaps", {"metadata": {"generateName": "cm-"}}, "default")
    sim.call(lambda c: setattr(c.ctx, "rng", _Repeating(first["metadata"]["name"][-5:])))
    second = sim.create("configmaps", {"metadata": {"generateName": "cm-"}}, "default")
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert second["metadata"]["name"].startswith("cm-")


class _Repeating:
    """An rng whose first five choices spell `suffix` (a clash), then draws another letter."""

    def __init__(self, suffix: str) -> None:
        self._queue = list(suffix)

    def choice(self, seq: str) -> str:
        return self._queue.pop(0) if self._queue else seq[1]
