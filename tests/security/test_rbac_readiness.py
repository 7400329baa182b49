"""kube.readiness as the worker's ServiceAccount with deploy/kubernetes/rbac-worker-readiness.yaml
(and nothing else) enforced by the rehearsal cluster: a check and an export run with no request
denied; every rule of the file is needed (without it the module fails with the apiserver's 403,
naming what it could not read, and the cluster is unchanged); and no rule lets the worker read a
Secret's data the way kube.readiness reads Secrets is enough for it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.readiness import readiness
from pitstop_sim import SimCluster, SimConfig, parse_scenario
from pitstop_sim.rbac_policy import load_policy
from tests.integration.kube.conftest import ModuleRunner
from tests.integration.kube.readiness_setup import SIM, multikueue, platform, writes_of_read_kinds
from tests.security.test_rbac import MANIFESTS, WORKER, WORKER_USER, drop_rule, registered_worker_token

pytestmark = pytest.mark.integration

POLICY = [MANIFESTS / f for f in ("namespace.yaml", "serviceaccount.yaml", "rbac-worker-readiness.yaml")]
READ = "pitstop-worker-readiness-read"
SECRETS = "pitstop-worker-readiness-secrets"
SERVICE_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {"plural": "servicemonitors", "singular": "servicemonitor", "kind": "ServiceMonitor"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}
# Every kind kube.readiness compares, as a check's explicit expectation.
EXPECTED: list[dict[str, Any]] = [
    {"kind": "Namespace", "name": "team-a"},
    {"kind": "RuntimeClass", "name": "nvidia", "fields": {"handler": "nvidia"}},
    {
        "kind": "Secret",
        "namespace": "team-a",
        "name": "registry-pull",
        "fields": {"type": "kubernetes.io/dockerconfigjson"},
    },
    {"kind": "StorageClass", "name": "model-cache"},
    {"kind": "PersistentVolumeClaim", "namespace": "team-a", "name": "model-cache"},
    {"kind": "DaemonSet", "namespace": "gpu-monitoring", "name": "nvidia-dcgm-exporter"},
    {"kind": "ServiceMonitor", "namespace": "gpu-monitoring", "name": "dcgm-exporter"},
    {"kind": "ResourceFlavor", "name": "h100"},
    {"kind": "ClusterQueue", "name": "team-a-cq", "fields": {"flavors": {"h100": ["nvidia.com/gpu"]}}},
    {"kind": "LocalQueue", "namespace": "team-a", "name": "team-a", "fields": {"cluster_queue": "team-a-cq"}},
]
CHECK: dict[str, Any] = {"expected": EXPECTED, "source": "expected"}
EXPORT: dict[str, Any] = {
    "mode": "export",
    "label_selector": "pitstop.dev/multikueue=required",
    "worker_cluster": "gpu-b",
}


@dataclass(frozen=True)
class RuleCase:
    role: str
    resources: list[str]
    args: dict[str, Any]
    denied: str


def denied(verb: str, resource: str, group: str, namespace: str | None = None) -> str:
    """The apiserver's words for a denial, after `cannot `."""
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return f'{verb} resource "{resource}" in API group "{group}" {where}'


KUEUE = "kueue.x-k8s.io"
RULE_CASES: dict[str, RuleCase] = {
    "namespaces": RuleCase(READ, ["namespaces"], CHECK, denied("get", "namespaces", "", "gpu-monitoring")),
    "runtimeclasses": RuleCase(
        READ, ["runtimeclasses"], CHECK, denied("get", "runtimeclasses", "node.k8s.io")
    ),
    "secrets": RuleCase(SECRETS, ["secrets"], CHECK, denied("list", "secrets", "", "team-a")),
    "storageclasses": RuleCase(
        READ, ["storageclasses"], CHECK, denied("get", "storageclasses", "storage.k8s.io")
    ),
    "persistentvolumeclaims": RuleCase(
        READ, ["persistentvolumeclaims"], CHECK, denied("get", "persistentvolumeclaims", "", "team-a")
    ),
    "daemonsets": RuleCase(
        READ, ["daemonsets"], CHECK, denied("get", "daemonsets", "apps", "gpu-monitoring")
    ),
    "servicemonitors": RuleCase(
        READ,
        ["servicemonitors"],
        CHECK,
        denied("get", "servicemonitors", "monitoring.coreos.com", "gpu-monitoring"),
    ),
    "kueue queues": RuleCase(
        READ,
        ["resourceflavors", "clusterqueues", "localqueues"],
        CHECK,
        denied("get", "resourceflavors", KUEUE),
    ),
    "multikueueclusters": RuleCase(
        READ, ["multikueueclusters"], EXPORT, denied("get", "multikueueclusters", KUEUE)
    ),
}


@contextlib.contextmanager
def rbac_cluster(workdir: Path) -> Iterator[SimCluster]:
    """A worker cluster that is also the manager of `gpu-b` (so one cluster serves every case),
    with team-a's objects, a ServiceMonitor, and RBAC enforced; the kubeconfig is the worker's."""
    workdir.mkdir(parents=True, exist_ok=True)
    sim = SimCluster(
        SimConfig(
            scenario=parse_scenario(SIM, "scenario.yaml"),
            kubeconfig=workdir / "kubeconfig",
            rbac=True,
            rbac_policy=POLICY,
            kubeconfig_service_account=WORKER,
        )
    )
    sim.start()
    try:
        platform(sim)
        multikueue(sim, "gpu-b")
        sim.create("apiextensions.k8s.io/customresourcedefinitions", SERVICE_MONITOR_CRD)
        sim.create(
            "monitoring.coreos.com/servicemonitors",
            {
                "metadata": {"name": "dcgm-exporter", "labels": {"pitstop.dev/multikueue": "required"}},
                "spec": {"selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}}, "endpoints": []},
            },
            namespace="gpu-monitoring",
        )
        sim.reset_counters()
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def runner() -> ModuleRunner:
    return ModuleRunner()


def test_every_rule_of_the_readiness_roles_has_a_case() -> None:
    rules = {
        (role["metadata"]["name"], tuple(rule["resources"]))
        for role in load_policy(POLICY)
        if role["kind"] == "ClusterRole"
        for rule in role["rules"]
    }
    assert rules == {(c.role, tuple(c.resources)) for c in RULE_CASES.values()}


def test_a_check_and_an_export_run_as_the_service_account_with_no_request_denied(
    tmp_path: Path, runner: ModuleRunner
) -> None:
    with rbac_cluster(tmp_path) as sim:
        registered_worker_token(sim, runner.cluster(sim).name)
        checked = runner(readiness, sim, CHECK, host="localhost", check_mode=True)
        assert not checked.failed, checked.msg
        assert {i["state"] for i in checked.data["items"]} == {"present"}
        exported = runner(readiness, sim, EXPORT, host="localhost")
        assert not exported.failed, exported.msg
        kinds = {e["kind"] for e in exported.data["expected"]}
        assert {"Secret", "ServiceMonitor", "ClusterQueue", "LocalQueue", "DaemonSet"} <= kinds
        assert sim.rbac_denials() == []
        assert writes_of_read_kinds(sim) == {}


@pytest.mark.parametrize("case", RULE_CASES.values(), ids=RULE_CASES.keys())
def test_without_a_rule_kube_readiness_gets_the_apiservers_403(
    tmp_path: Path, runner: ModuleRunner, case: RuleCase
) -> None:
    with rbac_cluster(tmp_path) as sim:
        registered_worker_token(sim, runner.cluster(sim).name)
        drop_rule(sim, case.role, lambda r: r.get("resources") == case.resources)
        expected = f'is forbidden: User "{WORKER_USER}" cannot {case.denied}'
        with pytest.raises(ApplicationError) as refused:
            runner(readiness, sim, case.args, host="localhost")
        assert refused.value.type == "Unauthorized"
        assert refused.value.message.startswith("kube.readiness: ")
        assert expected in refused.value.message, refused.value.message
        assert "(HTTP 403; check the credentials and RBAC of the kubeconfig)" in refused.value.message
        denials = sim.rbac_denials()
        assert denials and all(expected in d.message for d in denials), denials
        assert writes_of_read_kinds(sim) == {}


def test_the_secret_rule_serves_no_secret_data_to_the_way_kube_readiness_reads(
    tmp_path: Path, runner: ModuleRunner
) -> None:
    """The role lists Secrets; kube.readiness asks for the server's Table without objects, and
    that answer holds names and types only (what the module returns is checked in the module's
    tests). A GET of one Secret, which would return its data, is not granted at all."""
    from activities.kube.client import ApiStatus, Kube, api_client
    from pitstop.runbook.inventory import ClusterConfig
    from tests.integration.kube.readiness_setup import SECRET_VALUE, dockerconfig

    with rbac_cluster(tmp_path) as sim:
        name = runner.cluster(sim).name
        registered_worker_token(sim, name)
        kube = Kube(api_client(ClusterConfig(name=name)), name)
        table = kube.table("/api/v1/namespaces/team-a/secrets", fieldSelector="metadata.name=registry-pull")
        text = str(table)
        assert "registry-pull" in text and "kubernetes.io/dockerconfigjson" in text
        assert SECRET_VALUE not in text and dockerconfig() not in text
        with pytest.raises(ApiStatus) as get:
            kube.get("/api/v1/namespaces/team-a/secrets/registry-pull")
        assert get.value.status == 403
