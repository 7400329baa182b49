"""Dynamic inventory groups (`from_nodes`) resolved against the rehearsal cluster's nodes when
the plan is loaded."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.inventory import ClusterUnreachable
from activities.plan import build_plan
from pitstop.contracts import Plan, RunRequest
from pitstop.policy.clusters import register_cluster
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import StartSim

CLUSTER = """
cluster:
  nodes: 4
  domains: 2
  node_overrides:
    gpu-node-004: {labels: {pool: spare}}
"""
RUNBOOK = """
name: look
hosts: zone_a
tasks:
  - debug: {msg: "{{ failure_domain }}"}
"""


def inventory(cluster_name: str | None, selector: str = "topology.kubernetes.io/zone=zone-a") -> str:
    cluster = f"cluster: {{name: {cluster_name}}}\n" if cluster_name else ""
    return cluster + textwrap.dedent(
        f"""
        all:
          vars: {{site: lab}}
          children:
            zone_a:
              from_nodes: {{selector: "{selector}", domain_label: topology.kubernetes.io/zone}}
            spare:
              from_nodes: {{selector: "pool=spare"}}
              vars: {{role: spare}}
        """
    )


def plan_for(inv: str) -> Plan:
    return build_plan(
        RunRequest(
            runbook="runbook.yaml",
            inventory="inventory.yaml",
            files={"runbook.yaml": textwrap.dedent(RUNBOOK), "inventory.yaml": inv},
        )
    )


def test_dynamic_groups_hold_the_matching_nodes_with_their_labels_as_host_vars(start_sim: StartSim) -> None:
    sim: SimCluster = start_sim(CLUSTER)
    sim.register("rehearsal")
    plan = plan_for(inventory("rehearsal"))
    assert plan.stages[0].hosts == ["gpu-node-001", "gpu-node-002"]
    assert plan.stages[0].domains == {"gpu-node-001": "zone-a", "gpu-node-002": "zone-a"}
    hv = plan.hostvars["gpu-node-001"]
    assert hv["failure_domain"] == "zone-a"
    assert hv["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert hv["labels"]["kubernetes.io/hostname"] == "gpu-node-001"
    assert hv["site"] == "lab"
    assert plan.cluster is not None and plan.cluster.name == "rehearsal"


def test_a_dynamic_group_needs_a_reachable_cluster(tmp_path: Path, start_sim: StartSim) -> None:
    with pytest.raises(ValueError, match=r"dynamic \(from_nodes\) but the inventory has no `cluster:` block"):
        plan_for(inventory(None))
    # A cluster this worker does not know: refused by the worker policy, saying where to register it.
    with pytest.raises(ApplicationError) as unknown:
        plan_for(inventory("nowhere"))
    assert unknown.value.type == "PolicyViolation"
    assert str(unknown.value).startswith(
        "PolicyViolation: dynamic inventory group(s) zone_a, spare: cluster 'nowhere' is not one this worker "
        "may act on"
    )
    assert "put its kubeconfig at " in str(unknown.value)
    assert "clusters/nowhere/kubeconfig" in str(unknown.value)
    # A registered kubeconfig pointing at a port nobody listens on.
    sim = start_sim(CLUSTER)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert sim.kubeconfig_path is not None
    register_cluster("dead", kubeconfig=sim.kubeconfig_path.read_text().replace(f":{sim.port}", f":{port}"))
    with pytest.raises(ClusterUnreachable) as refused:
        plan_for(inventory("dead"))
    assert str(refused.value) == (
        "cannot list the nodes of cluster 'dead' for zone_a, spare: cannot reach the Kubernetes API at "
        f"http://127.0.0.1:{port}: connection refused"
    )
