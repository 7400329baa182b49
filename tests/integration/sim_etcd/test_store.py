"""A rehearsal cluster persisted to the session's real etcd: the keys the apiserver would write,
values that follow every change, clear or load at start, and clear errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pitstop.cli.sim import sim_app
from pitstop.devstack import DevStack, free_port
from pitstop_sim import SimCluster, SimConfig, SimControl
from pitstop_sim.etcd_store import EtcdStoreError
from tests.integration.etcd.conftest import etcdctl
from tests.integration.sim_etcd.conftest import StartSim, count, keys, stored

NODE = "gpu-node-001"


def _object_count(sim: SimCluster) -> int:
    """Objects the cluster serves, over every resource it serves."""

    def total(c: SimControl) -> int:
        return sum(c.ctx.store.count(rt.storage) for rt in c.ctx.registry.all())

    return sim.call(total)


def _cordoned(sim: SimCluster) -> bool:
    node = sim.get("nodes", NODE) or {}
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t["key"] == "node.kubernetes.io/unschedulable" for t in taints)


def _bare_pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


def test_etcd_holds_every_object_under_the_apiservers_keys_and_follows_patches_and_deletes(
    start_sim: StartSim, etcd_endpoint: str, prefix: str
) -> None:
    sim = start_sim(nodes=3, etcd_endpoint=etcd_endpoint, etcd_prefix=prefix)
    sim.flush_etcd()

    assert count(etcd_endpoint, prefix + "minions/") == 3
    assert keys(etcd_endpoint, prefix + "minions/") == {f"{prefix}minions/{n}" for n in sim.node_names()}
    assert count(etcd_endpoint, prefix) == _object_count(sim), "etcd holds exactly the served objects"
    held = keys(etcd_endpoint, prefix)
    pod = sim.list("pods", "gpu-operator")[0]["metadata"]["name"]
    for key in (
        f"{prefix}pods/gpu-operator/{pod}",
        f"{prefix}daemonsets/gpu-operator/nvidia-device-plugin-daemonset",
        f"{prefix}namespaces/kube-system",
        f"{prefix}leases/kube-node-lease/{NODE}",
        f"{prefix}apiextensions.k8s.io/customresourcedefinitions/clusterqueues.kueue.x-k8s.io",
        f"{prefix}nvidia.com/clusterpolicies/cluster-policy",
    ):
        assert key in held

    # A cordon (merge patch) rewrites the stored node, with the node controller's taint.
    sim.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    sim.wait_for(_cordoned, what="the unschedulable taint")
    sim.flush_etcd()
    node = stored(etcd_endpoint, f"{prefix}minions/{NODE}")
    assert node == sim.get("nodes", NODE)
    assert node is not None and node["spec"]["unschedulable"] is True

    # A pod created then deleted: its key comes and goes.
    sim.create("pods", _bare_pod("short-lived"), "default")
    sim.flush_etcd()
    assert stored(etcd_endpoint, f"{prefix}pods/default/short-lived") is not None
    sim.delete("pods", "short-lived", "default")
    sim.wait_for(lambda s: s.get("pods", "short-lived", "default") is None, what="the pod to go")
    sim.flush_etcd()
    assert stored(etcd_endpoint, f"{prefix}pods/default/short-lived") is None
    assert count(etcd_endpoint, prefix) == _object_count(sim)


def test_a_restart_clears_the_prefix_by_default_and_resumes_the_stored_cluster_when_asked(
    start_sim: StartSim, etcd_endpoint: str, prefix: str
) -> None:
    etcdctl(etcd_endpoint, "put", f"{prefix}minions/left-over", '{"metadata":{"name":"left-over"}}')
    first = start_sim(nodes=2, etcd_endpoint=etcd_endpoint, etcd_prefix=prefix)
    first.flush_etcd()
    assert keys(etcd_endpoint, prefix + "minions/") == {f"{prefix}minions/{n}" for n in first.node_names()}
    first.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    first.create("pods", _bare_pod("short-lived"), "default")
    first.delete("pods", "short-lived", "default")  # the newest change is a delete
    first.wait_for(lambda s: s.get("pods", "short-lived", "default") is None, what="the pod to go")
    last_version = first.call(lambda c: c.ctx.store.resource_version)
    objects = _object_count(first)
    first.stop()  # flushes

    resumed = start_sim(nodes=2, etcd_endpoint=etcd_endpoint, etcd_prefix=prefix, etcd_on_start="load")
    assert (resumed.get("nodes", NODE) or {})["spec"]["unschedulable"] is True
    assert _object_count(resumed) == objects
    assert [p["metadata"]["name"] for p in resumed.list("clusterpolicies")] == ["cluster-policy"]
    created = resumed.create("pods", _bare_pod("after-restart"), "default")
    assert int(created["metadata"]["resourceVersion"]) > last_version, "versions never go backwards"
    resumed.stop()

    fresh = start_sim(nodes=2, etcd_endpoint=etcd_endpoint, etcd_prefix=prefix)
    assert not (fresh.get("nodes", NODE) or {}).get("spec", {}).get("unschedulable")
    fresh.flush_etcd()
    assert stored(etcd_endpoint, f"{prefix}pods/default/after-restart") is None
    assert count(etcd_endpoint, prefix) == _object_count(fresh)


def test_changes_made_while_etcd_is_down_are_written_once_it_is_back(
    start_sim: StartSim, own_etcd: DevStack
) -> None:
    endpoint = own_etcd.etcd_endpoint
    sim = start_sim(nodes=2, etcd_endpoint=endpoint)
    sim.flush_etcd()
    own_etcd.down()

    sim.patch("nodes", NODE, {"metadata": {"labels": {"written": "later"}}})
    with pytest.raises(EtcdStoreError) as caught:
        sim.flush_etcd(timeout=1.0)
    assert "still not written to etcd at " + endpoint in str(caught.value)
    assert "cannot reach etcd at " + endpoint in str(caught.value)

    own_etcd.up()
    sim.flush_etcd()
    node = stored(endpoint, f"/registry/minions/{NODE}")
    assert node is not None and node["metadata"]["labels"]["written"] == "later"


def test_an_etcd_nobody_answers_at_stops_the_start_with_its_address() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EtcdStoreError, match=re.escape(f"cannot reach etcd at {endpoint}")):
        SimCluster(SimConfig(nodes=1, domains=1, etcd_endpoint=endpoint)).start()


def test_loading_keys_the_simulator_did_not_write_is_refused_with_a_way_out(
    etcd_endpoint: str, prefix: str
) -> None:
    etcdctl(etcd_endpoint, "put", f"{prefix}minions/n1", "k8s protobuf, not JSON")
    sim = SimCluster(
        SimConfig(nodes=1, domains=1, etcd_endpoint=etcd_endpoint, etcd_prefix=prefix, etcd_on_start="load")
    )
    with pytest.raises(EtcdStoreError) as caught:
        sim.start()
    assert f"cannot load '{prefix}minions/n1'" in str(caught.value)
    assert "give the cluster a key prefix of its own, or start with on_start=clear" in str(caught.value)


def test_bad_etcd_options_are_refused_with_what_is_expected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape("is not an etcd client URL like http://127.0.0.1:2379")):
        SimConfig(etcd_endpoint="127.0.0.1:2379")
    with pytest.raises(ValueError, match="must start and end with '/'"):
        SimConfig(etcd_prefix="/registry")

    def serve(*args: str) -> tuple[int, str]:
        options = ["--no-ssh", "--nodes", "1", "--domains", "1", "--kubeconfig", str(tmp_path / "kc")]
        result = CliRunner().invoke(sim_app, ["serve", *options, *args])
        return result.exit_code, " ".join(result.output.split())  # rich wraps long lines

    code, output = serve("--etcd", "localhost:2379")
    assert code == 2
    assert "invalid --etcd: Value error, 'localhost:2379' is not an etcd client URL" in output
    endpoint = f"http://127.0.0.1:{free_port()}"
    code, output = serve("--etcd", endpoint)
    assert code == 1
    assert f"cannot use etcd: cannot reach etcd at {endpoint}" in output
