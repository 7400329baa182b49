"""The pure CRD/webhook pre-upgrade checks (kube.crd_webhook_check's judgement)."""

from __future__ import annotations

from typing import Any

from pitstop.helm import HelmRelease
from pitstop.kube.crd_webhooks import (
    Backend,
    BackendStatus,
    admission_finding,
    admission_webhooks,
    conversion_backend,
    conversion_finding,
    helm_crd_findings,
    spec_contained,
    storage_findings,
    summary,
)

Obj = dict[str, Any]


def crd(versions: list[tuple[str, bool, bool]], stored: list[str] | None = None, **spec: Any) -> Obj:
    return {
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "versions": [
                {"name": n, "served": served, "storage": storage} for n, served, storage in versions
            ],
            **spec,
        },
        "status": {"storedVersions": stored or []},
    }


def test_a_stored_version_the_new_definition_stops_serving_blocks() -> None:
    live = crd([("v1alpha1", True, False), ("v1", True, True)], stored=["v1alpha1", "v1"])
    new = crd([("v1alpha1", False, False), ("v1", True, True)])
    [finding] = storage_findings("widgets.example.com", live, new, "crds/widgets.yaml document 0")
    assert (finding.check, finding.severity, finding.object) == (
        "storage_version",
        "block",
        "CustomResourceDefinition widgets.example.com",
    )
    assert "v1alpha1 (not served)" in finding.message
    assert "objects stored as v1alpha1 become unreadable: migrate storage first" in finding.message
    assert "crds/widgets.yaml document 0" in finding.message


def test_a_stored_version_dropped_from_spec_versions_is_named_as_removed() -> None:
    live = crd([("v1beta1", True, False), ("v1", True, True)], stored=["v1beta1", "v1"])
    [finding] = storage_findings("w", live, crd([("v1", True, True)]), "new.yaml")
    assert "v1beta1 (removed from spec.versions)" in finding.message


def test_new_definitions_that_keep_every_stored_version_served_pass() -> None:
    live = crd([("v1", True, True)], stored=["v1"])
    new = crd([("v1", True, False), ("v2", True, True)])
    assert storage_findings("w", live, new, "new.yaml") == []


def test_conversion_backends_come_from_service_or_url_and_only_for_webhook_strategy() -> None:
    service = {
        "strategy": "Webhook",
        "webhook": {"clientConfig": {"service": {"namespace": "a", "name": "b"}}},
    }
    assert conversion_backend(crd([], conversion=service)) == Backend(service_namespace="a", service_name="b")
    url = {"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://conv.example:8443/convert"}}}
    backend = conversion_backend(crd([], conversion=url))
    assert backend is not None and backend.host_port() == ("conv.example", 8443)
    assert conversion_backend(crd([], conversion={"strategy": "None"})) is None


def test_a_down_conversion_webhook_blocks_and_says_why() -> None:
    backend = Backend(service_namespace="ops", service_name="conv", port=443)
    down = BackendStatus(ready=False, detail="service ops/conv does not exist")
    finding = conversion_finding("w", backend, down)
    assert finding is not None and finding.severity == "block"
    assert finding.message == (
        "CRD w: conversion webhook service ops/conv:443 is not ready (service ops/conv does not exist); "
        "objects of other versions cannot be read or written until it is"
    )
    assert conversion_finding("w", backend, BackendStatus(ready=True, detail="1 ready pod")) is None


def test_admission_webhooks_default_to_fail_which_blocks_while_ignore_warns() -> None:
    config = {
        "webhooks": [
            {"name": "strict.example.com", "clientConfig": {"service": {"namespace": "ops", "name": "hook"}}},
            {
                "name": "lenient.example.com",
                "failurePolicy": "Ignore",
                "clientConfig": {"url": "https://h:9/"},
            },
        ]
    }
    hooks = admission_webhooks(config)
    assert [(name, policy) for name, policy, _ in hooks] == [
        ("strict.example.com", "Fail"),
        ("lenient.example.com", "Ignore"),
    ]
    down = BackendStatus(ready=False, detail="no ready pods")
    severities = [
        admission_finding("ValidatingWebhookConfiguration", "c", n, p, b, down) for n, p, b in hooks
    ]
    assert [f.severity if f else None for f in severities] == ["block", "warn"]
    assert (
        severities[0] is not None
        and "failurePolicy Fail: every matching create/update is rejected" in severities[0].message
    )


def release_with_crds() -> HelmRelease:
    return HelmRelease(
        name="gpu-operator",
        namespace="gpu-operator",
        version=4,
        chart_name="gpu-operator",
        chart_version="v24.6.2",
    )


def test_helm_shipped_crds_warn_with_the_remedy() -> None:
    findings = helm_crd_findings(release_with_crds(), {"clusterpolicies.nvidia.com": "crds/cp.yaml"}, {}, {})
    [finding] = findings
    assert finding.severity == "warn" and finding.check == "helm_crds"
    assert "Helm installs CRDs in crds/ on install only and never upgrades them" in finding.message
    assert "apply the new chart's CRDs before `helm upgrade`" in finding.message


def test_a_newer_definition_in_new_crds_must_be_applied_first_and_a_matching_one_is_said_to_match() -> None:
    live = {
        "clusterpolicies.nvidia.com": {
            "spec": {"group": "nvidia.com", "scope": "Cluster", "conversion": {"strategy": "None"}}
        }
    }
    newer = {
        "clusterpolicies.nvidia.com": (
            {"spec": {"group": "nvidia.com", "scope": "Namespaced"}},
            "new/cp.yaml document 0",
        )
    }
    same = {
        "clusterpolicies.nvidia.com": (
            {"spec": {"group": "nvidia.com", "scope": "Cluster"}},
            "new/cp.yaml document 0",
        )
    }
    chart = {"clusterpolicies.nvidia.com": "crds/cp.yaml"}
    [must] = helm_crd_findings(release_with_crds(), chart, live, newer)
    assert (
        "the new definition in new/cp.yaml document 0 must be applied (kube.apply) before `helm upgrade`"
        in must.message
    )
    [matches] = helm_crd_findings(release_with_crds(), chart, live, same)
    assert "already matches the cluster" in matches.message


def test_spec_containment_ignores_server_defaults_but_not_changes() -> None:
    assert spec_contained({"a": 1, "l": [{"x": 1}]}, {"a": 1, "b": 2, "l": [{"x": 1, "d": 0}]})
    assert not spec_contained({"a": 1}, {"a": 2})
    assert not spec_contained({"l": [1]}, {"l": [1, 2]})


def test_the_summary_lists_blocking_findings_first() -> None:
    down = BackendStatus(ready=False, detail="x")
    block = conversion_finding("w", Backend(url="https://h:1"), down)
    warn = admission_finding("V", "c", "h", "Ignore", None, down)
    assert block is not None and warn is not None
    text = summary([warn, block])
    assert text.startswith("1 blocking, 1 warnings: CRD w: conversion webhook URL https://h:1 is not ready")
    assert summary([]) == "CRDs and webhooks ready for the upgrade"
