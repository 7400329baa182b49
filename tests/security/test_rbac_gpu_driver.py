"""The GPU Operator driver modules as the worker's ServiceAccount, with the shipped maintenance
and upgrade roles enforced by the rehearsal cluster's RBAC: every call they make is allowed,
and each rule they need is needed (without it, the apiserver's 403 and nothing changed): the
ClusterPolicy patch, and the driver pod's eviction (the worker may not delete pods)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.gpu_driver import driver_management, operator_driver_hold, operator_driver_node
from pitstop_sim import SimCluster, SimConfig
from pitstop_sim.scenario import parse_scenario
from tests.integration.kube.conftest import ModuleRunner
from tests.security.test_rbac import UPGRADE_POLICY, WORKER, WORKER_USER, drop_rule, registered_worker_token

pytestmark = pytest.mark.integration

SCENARIO = """
cluster: {nodes: 2, domains: 1, driver_management: operator}
timing: {time_scale: 50, pod_start_seconds: 2, recreate_delay_seconds: 1}
"""
NEW = "570.86.15"
NODE_ARGS = {"version": NEW, "poll_interval_seconds": 0.05, "timeout_seconds": 30}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SimCluster]:
    sim = SimCluster(
        SimConfig(
            scenario=parse_scenario(SCENARIO, "scenario.yaml"),
            kubeconfig=tmp_path / "kubeconfig",
            rbac=True,
            rbac_policy=UPGRADE_POLICY,
            kubeconfig_service_account=WORKER,
        )
    )
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


def _driver(sim: SimCluster) -> dict[str, Any]:
    return dict((sim.get("clusterpolicies", "cluster-policy") or {})["spec"]["driver"])


def test_the_shipped_roles_allow_the_whole_driver_roll(cluster: SimCluster) -> None:
    runner = ModuleRunner()
    registered_worker_token(cluster, runner.cluster(cluster).name)
    assert runner(driver_management, cluster, {}, host="gpu-node-001").data["management"] == "operator"
    assert runner(operator_driver_hold, cluster, {"version": NEW}, host="localhost").changed
    assert runner(operator_driver_node, cluster, NODE_ARGS, host="gpu-node-001").changed
    assert cluster.node_profile("gpu-node-001").driver_version == NEW
    assert cluster.rbac_denials() == []


@pytest.mark.parametrize(
    ("role", "resources", "denied"),
    [
        ("pitstop-gpu-operator-driver", ["clusterpolicies"],
         'patch resource "clusterpolicies" in API group "nvidia.com" at the cluster scope'),
        ("pitstop-node-maintenance", ["pods/eviction"],
         'create resource "pods/eviction" in API group "" in the namespace "gpu-operator"'),
    ],
)  # fmt: skip
def test_without_its_rule_the_driver_roll_gets_the_apiservers_403(
    cluster: SimCluster, role: str, resources: list[str], denied: str
) -> None:
    runner = ModuleRunner()
    registered_worker_token(cluster, runner.cluster(cluster).name)
    if role == "pitstop-node-maintenance":
        # The hold is allowed; the pod's eviction is what this rule is for.
        runner(operator_driver_hold, cluster, {"version": NEW}, host="localhost")
    before = {p["metadata"]["uid"] for p in cluster.list("pods", "gpu-operator")}
    driver_before = _driver(cluster)
    drop_rule(cluster, role, lambda r: r.get("resources") == resources)
    module, args, host = (
        (operator_driver_hold, {"version": NEW}, "localhost")
        if role == "pitstop-gpu-operator-driver"
        else (operator_driver_node, NODE_ARGS, "gpu-node-001")
    )
    with pytest.raises(ApplicationError) as refused:
        runner(module, cluster, args, host=host)
    assert refused.value.type == "Unauthorized"
    assert f'is forbidden: User "{WORKER_USER}" cannot {denied}' in refused.value.message
    assert _driver(cluster) == driver_before
    assert {p["metadata"]["uid"] for p in cluster.list("pods", "gpu-operator")} == before
