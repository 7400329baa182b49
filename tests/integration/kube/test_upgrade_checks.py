"""kube.deprecations and kube.crd_webhook_check against the rehearsal cluster: Helm release
Secrets, CRDs, services and webhook configurations are created through the API in each test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.client import Kube, api_client
from activities.kube.upgrade_checks import crd_webhook_check, deprecations
from pitstop.helm import HelmRelease, encode_release
from pitstop.kube.apply import LAST_APPLIED
from pitstop.runbook.inventory import ClusterConfig
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim

Obj = dict[str, Any]
COMPAT = Path(__file__).resolve().parents[3] / "runbooks" / "compat"
CLUSTER = """
cluster: {nodes: 2, domains: 2}
timing: {time_scale: 20}
workloads:
  namespaces: [gpu-operator, webhooks]
  deployments:
    - {name: web, namespace: serving, replicas: 1}
    - {name: hook, namespace: webhooks, replicas: 1}
"""
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@pytest.fixture(autouse=True)
def compat_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PITSTOP_COMPAT_DIR", str(COMPAT))


def kube(sim: SimCluster) -> Kube:
    sim.register("test")  # the worker holds the cluster's kubeconfig; the inventory names it
    return Kube(api_client(ClusterConfig(name="test")))


def doc(api_version: str, kind: str, name: str, namespace: str | None = None, **rest: Any) -> Obj:
    metadata: Obj = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **rest}


def manifest(*docs: Obj) -> str:
    return "".join("---\n" + json.dumps(d) + "\n" for d in docs)


def helm_release(api: Kube, release: HelmRelease) -> None:
    api.post(f"/api/v1/namespaces/{release.namespace}/secrets", encode_release(release))


def legacy_operator(
    version: int, status: str, *docs: Obj, files: dict[str, str | bytes] | None = None
) -> HelmRelease:
    return HelmRelease(
        name="gpu-operator-legacy",
        namespace="gpu-operator",
        version=version,
        status=status,
        chart_name="gpu-operator",
        chart_version=f"v1.{version}.0",
        manifest=manifest(*docs),
        files=files or {},
    )


def test_deprecations_finds_removed_apis_in_last_applied_and_the_deployed_helm_revision(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    api = kube(sim)
    # An object first applied as extensions/v1beta1 keeps that in its last-applied annotation.
    legacy = doc("extensions/v1beta1", "Deployment", "web", "serving")
    api.patch(
        "/apis/apps/v1/namespaces/serving/deployments/web",
        {"metadata": {"annotations": {LAST_APPLIED: json.dumps(legacy)}}},
    )
    current = doc("apps/v1", "Deployment", "api", "serving")
    api.post(
        "/api/v1/namespaces/serving/configmaps",
        {"metadata": {"name": "uses-v1", "annotations": {LAST_APPLIED: json.dumps(current)}}},
    )
    # Revision 1 (superseded) used a CronJob API; revision 2 (deployed) a PDB and a FlowSchema one.
    helm_release(
        api, legacy_operator(1, "superseded", doc("batch/v1beta1", "CronJob", "old", "gpu-operator"))
    )
    helm_release(
        api,
        legacy_operator(
            2,
            "deployed",
            doc("policy/v1beta1", "PodDisruptionBudget", "foo"),
            doc("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema", "gpu"),
            doc("apps/v1", "Deployment", "gpu-operator", "gpu-operator"),
        ),
    )

    result = module_runner(deprecations, sim, {"target_version": "v1.31.2"}, check_mode=True)
    assert result.failed is True and result.changed is False
    found = {
        (f["origin"], f["apiVersion"], f["kind"], f["namespace"], f["name"], f["removed_in"])
        for f in result.data["findings"]
    }
    assert found == {
        ("last-applied configuration", "extensions/v1beta1", "Deployment", "serving", "web", "v1.16"),
        (
            "helm release gpu-operator-legacy (gpu-operator)",
            "policy/v1beta1",
            "PodDisruptionBudget",
            "gpu-operator",
            "foo",
            "v1.25",
        ),
    }
    assert (
        "helm release gpu-operator-legacy (gpu-operator): policy/v1beta1 PodDisruptionBudget "
        "gpu-operator/foo removed in v1.25, use policy/v1"
    ) in result.msg
    assert result.msg.startswith("2 manifests use API versions removed by v1.31.2: ")
    assert result.data["checked"]["helm_releases"] == 1 and result.data["checked"]["objects"] > 10

    # The FlowSchema API goes in 1.32; only the Helm source, and without failing.
    later = module_runner(
        deprecations,
        sim,
        {"target_version": "1.32", "sources": ["helm"], "fail_on": "never", "max_listed": 1},
    )
    assert later.failed is False
    # FlowSchema is cluster-scoped: not placed in the release's namespace.
    assert {(f["kind"], f["namespace"]) for f in later.data["findings"]} == {
        ("PodDisruptionBudget", "gpu-operator"),
        ("FlowSchema", ""),
    }
    assert later.msg.endswith("and 1 more (0 objects in 0 resource types, 1 Helm releases)")

    earlier = module_runner(deprecations, sim, {"target_version": "v1.24", "sources": ["last-applied"]})
    assert [f["name"] for f in earlier.data["findings"]] == ["web"]

    capped = module_runner(
        deprecations, sim, {"target_version": "v1.31", "sources": ["last-applied"], "max_objects": 3}
    )
    assert capped.data["truncated"] is True and capped.data["checked"]["objects"] == 3
    assert "stopped after max_objects=3" in capped.msg


def test_deprecations_finds_removed_apis_a_server_side_applier_wrote(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # Server-side apply leaves no last-applied annotation; the apiVersion an applier (Argo CD,
    # Flux, kubectl --server-side) wrote its manifest in is in its managedFields entry.
    sim = start_sim(CLUSTER)
    api = kube(sim)
    path = "/apis/apps/v1/namespaces/serving/deployments/web"
    entry = {
        "manager": "argocd-controller",
        "operation": "Apply",
        "apiVersion": "extensions/v1beta1",
        "time": "2019-01-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:replicas": {}}},
    }
    api.patch(path, [{"op": "add", "path": "/metadata/managedFields", "value": [entry]}], "json")
    assert api.get(path)["metadata"]["managedFields"][0]["manager"] == "argocd-controller"
    result = module_runner(deprecations, sim, {"target_version": "v1.31", "sources": ["last-applied"]})
    assert result.failed is True
    assert [
        (f["origin"], f["apiVersion"], f["kind"], f["namespace"], f["name"]) for f in result.data["findings"]
    ] == [("server-side apply by argocd-controller", "extensions/v1beta1", "Deployment", "serving", "web")]


def test_deprecations_passes_a_clean_cluster_and_refuses_a_target_that_is_not_a_version(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    clean = module_runner(deprecations, sim, {"target_version": "v1.31"})
    assert (clean.failed, clean.data["findings"]) == (False, [])
    assert clean.msg.startswith("no manifests use API versions removed by v1.31 (")
    with pytest.raises(ApplicationError) as bad:
        module_runner(deprecations, sim, {"target_version": "next"})
    assert bad.value.type == "InvalidArgs"
    assert bad.value.message == (
        "kube.deprecations: target_version: Value error, target Kubernetes version 'next' is not a "
        "version: expected v1.31, 1.31 or v1.31.2"
    )


# --- kube.crd_webhook_check -------------------------------------------------------------------


def crd(group: str, kind: str, plural: str, versions: list[tuple[str, bool, bool]], **spec: Any) -> Obj:
    return doc(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        f"{plural}.{group}",
        spec={
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": name,
                    "served": served,
                    "storage": storage,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
                for name, served, storage in versions
            ],
            **spec,
        },
    )


def conversion(namespace: str, name: str) -> Obj:
    return {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": namespace, "name": name, "path": "/convert"}},
        },
    }


def service(name: str, app: str) -> Obj:
    return doc(
        "v1", "Service", name, spec={"selector": {"app": app}, "ports": [{"port": 443, "targetPort": 9443}]}
    )


def webhook_config(kind: str, name: str, policy: str, client_config: Obj) -> Obj:
    hook = {
        "name": f"{name}.example.com",
        "failurePolicy": policy,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config,
    }
    return doc("admissionregistration.k8s.io/v1", kind, name, webhooks=[hook])


def seed_platform(api: Kube) -> None:
    """Widgets: stored in v1alpha1 and v1, converted by a ready webhook. Gadgets: converted by a
    service that does not exist. ClusterPolicy and NVIDIADriver: shipped by the operator's
    chart, one NVIDIADriver object exists."""
    for name, app in (("hook", "hook"), ("down", "nothing-selects-this")):
        api.post("/api/v1/namespaces/webhooks/services", service(name, app))
    api.post(
        CRDS,
        crd(
            "example.com",
            "Widget",
            "widgets",
            [("v1alpha1", True, False), ("v1", True, True)],
            conversion=conversion("webhooks", "hook"),
        ),
    )
    api.patch(f"{CRDS}/widgets.example.com/status", {"status": {"storedVersions": ["v1alpha1", "v1"]}})
    api.post(
        CRDS,
        crd(
            "example.com",
            "Gadget",
            "gadgets",
            [("v1", True, True), ("v2", True, False)],
            conversion=conversion("webhooks", "gone"),
        ),
    )
    # clusterpolicies.nvidia.com (v1) is installed by the simulator's GPU Operator.
    api.post(CRDS, crd("nvidia.com", "NVIDIADriver", "nvidiadrivers", [("v1alpha1", True, True)]))
    api.post(
        "/apis/nvidia.com/v1alpha1/namespaces/gpu-operator/nvidiadrivers",
        doc("nvidia.com/v1alpha1", "NVIDIADriver", "default"),
    )
    base = "/apis/admissionregistration.k8s.io/v1"
    api.post(
        f"{base}/validatingwebhookconfigurations",
        webhook_config(
            "ValidatingWebhookConfiguration",
            "strict",
            "Fail",
            {"service": {"namespace": "webhooks", "name": "down"}},
        ),
    )
    api.post(
        f"{base}/validatingwebhookconfigurations",
        webhook_config(
            "ValidatingWebhookConfiguration", "lenient", "Ignore", {"url": "https://127.0.0.1:1/validate"}
        ),
    )
    api.post(
        f"{base}/mutatingwebhookconfigurations",
        webhook_config(
            "MutatingWebhookConfiguration",
            "defaults",
            "Fail",
            {"service": {"namespace": "webhooks", "name": "hook"}},
        ),
    )
    chart_crds = {
        "crds/nvidia.com_clusterpolicies.yaml": manifest(
            crd("nvidia.com", "ClusterPolicy", "clusterpolicies", [("v1", True, True)])
        ),
        "crds/nvidia.com_nvidiadrivers.yaml": manifest(
            crd("nvidia.com", "NVIDIADriver", "nvidiadrivers", [("v1alpha1", True, True)])
        ),
    }
    helm_release(
        api,
        HelmRelease(
            name="gpu-operator",
            namespace="gpu-operator",
            version=1,
            chart_name="gpu-operator",
            chart_version="v24.6.2",
            files=chart_crds,
        ),
    )


def test_crd_webhook_check_blocks_on_lost_storage_versions_and_down_webhooks_and_warns_about_helm_crds(
    start_sim: StartSim, module_runner: ModuleRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = start_sim(CLUSTER)
    seed_platform(kube(sim))
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    (tmp_path / "crds").mkdir()
    # The new Widget definition stops serving v1alpha1; the new ClusterPolicy adds a version.
    (tmp_path / "crds" / "widgets.yaml").write_text(
        manifest(
            crd(
                "example.com",
                "Widget",
                "widgets",
                [("v1alpha1", False, False), ("v1", True, True)],
                conversion=conversion("webhooks", "hook"),
            )
        )
    )
    (tmp_path / "crds" / "clusterpolicies.yaml").write_text(
        manifest(
            crd("nvidia.com", "ClusterPolicy", "clusterpolicies", [("v1", True, True), ("v2", True, False)])
        )
    )

    result = module_runner(
        crd_webhook_check, sim, {"new_crds": "crds", "helm_releases": ["gpu-operator"]}, check_mode=True
    )
    assert result.failed is True and result.changed is False
    found = {(f["check"], f["object"], f["severity"]) for f in result.data["findings"]}
    assert found == {
        ("storage_version", "CustomResourceDefinition widgets.example.com", "block"),
        ("conversion_webhook", "CustomResourceDefinition gadgets.example.com", "block"),
        ("admission_webhook", "ValidatingWebhookConfiguration strict", "block"),
        ("admission_webhook", "ValidatingWebhookConfiguration lenient", "warn"),
        ("helm_crds", "CustomResourceDefinition clusterpolicies.nvidia.com", "warn"),
        ("helm_crds", "CustomResourceDefinition nvidiadrivers.nvidia.com", "warn"),
        ("crd_cascade", "CustomResourceDefinition nvidiadrivers.nvidia.com", "warn"),
    }
    messages = {(f["check"], f["object"]): f["message"] for f in result.data["findings"]}
    said = {
        ("storage_version", "CustomResourceDefinition widgets.example.com"): (
            "objects stored as v1alpha1 become unreadable: migrate storage first"
        ),
        ("conversion_webhook", "CustomResourceDefinition gadgets.example.com"): (
            "service webhooks/gone does not exist"
        ),
        ("admission_webhook", "ValidatingWebhookConfiguration strict"): (
            "service webhooks/down selects 0 pods (app=nothing-selects-this), none of them Ready"
        ),
        ("admission_webhook", "ValidatingWebhookConfiguration lenient"): "cannot connect to 127.0.0.1:1",
        ("helm_crds", "CustomResourceDefinition clusterpolicies.nvidia.com"): (
            "crds/clusterpolicies.yaml document 0 must be applied (kube.apply) before `helm upgrade`"
        ),
        ("helm_crds", "CustomResourceDefinition nvidiadrivers.nvidia.com"): (
            "apply the new chart's CRDs before `helm upgrade`"
        ),
        ("crd_cascade", "CustomResourceDefinition nvidiadrivers.nvidia.com"): (
            "has 1 custom resources and is not in the new CRD manifests"
        ),
    }
    for where, text in said.items():
        assert text in messages[where], (where, messages[where])
    assert result.msg.startswith("3 blocking, 4 warnings: CRD gadgets.example.com: conversion webhook")
    assert result.data["checked"]["helm_releases"] == ["gpu-operator/gpu-operator"]

    # Scoped to the ready CRD, with nothing new: only the cluster-wide webhook findings remain.
    scoped = module_runner(crd_webhook_check, sim, {"crds": ["widgets.example.com"]})
    assert {(f["check"], f["severity"]) for f in scoped.data["findings"]} == {
        ("admission_webhook", "block"),
        ("admission_webhook", "warn"),
    }


def test_crd_webhook_check_passes_when_everything_is_ready_and_explains_bad_arguments(
    start_sim: StartSim, module_runner: ModuleRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = start_sim(CLUSTER)
    api = kube(sim)
    api.post("/api/v1/namespaces/webhooks/services", service("hook", "hook"))
    api.post(
        CRDS,
        crd(
            "example.com",
            "Widget",
            "widgets",
            [("v1", True, True)],
            conversion=conversion("webhooks", "hook"),
        ),
    )
    ok = module_runner(crd_webhook_check, sim, {})
    assert (ok.failed, ok.data["findings"], ok.msg) == (False, [], "CRDs and webhooks ready for the upgrade")

    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    (tmp_path / "broken.yaml").write_text("apiVersion: v1\nkind: [\n")
    (tmp_path / "not-crds.yaml").write_text(manifest(doc("v1", "ConfigMap", "x")))
    cases: list[tuple[dict[str, Any], str, str]] = [
        (
            {"new_crds": "missing"},
            "InvalidArgs",
            f"kube.crd_webhook_check: new_crds: {tmp_path}/missing: no such file or directory",
        ),
        (
            {"new_crds": "broken.yaml"},
            "InvalidArgs",
            f"kube.crd_webhook_check: new_crds: {tmp_path}/broken.yaml:3:1: invalid YAML",
        ),
        (
            {"new_crds": ["not-crds.yaml"]},
            "InvalidArgs",
            "kube.crd_webhook_check: new_crds ['not-crds.yaml'] hold no CustomResourceDefinition",
        ),
        (
            {"helm_releases": ["gpu-operatr"]},
            "PreconditionFailed",
            "kube.crd_webhook_check: helm release 'gpu-operatr' not found (releases: none)",
        ),
        (
            {"crds": ["widgets.example.org"]},
            "PreconditionFailed",
            "kube.crd_webhook_check: CRDs ['widgets.example.org'] are neither in the cluster nor in "
            "new_crds (cluster CRDs: ",
        ),
    ]
    for args, kind, message in cases:
        with pytest.raises(ApplicationError) as error:
            module_runner(crd_webhook_check, sim, args)
        assert (error.value.type, error.value.message[: len(message)]) == (kind, message)
