"""`dr.gitops_source` against the simulator's API (no GitOps controller, then Flux's CRDs with a
source at its deployed revision) and `dr.report`'s table."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from activities.dr.gitops import gitops_source
from activities.dr.report import report
from activities.kube.client import Kube, api_client
from pitstop_sim.crds import _crd
from tests.integration.dr.conftest import DrSite

REVISION = "main@sha1:5b7c1c3e9f0a2d4b6c8e0f1a3b5d7e9f0a1b2c3d"


def test_no_gitops_controller_is_reported_not_failed(dr_site: DrSite) -> None:
    result = dr_site.run(gitops_source, dr_site.call("dr.gitops_source", {}, host="localhost"))
    assert result.data == {
        "found": False,
        "verified": False,
        "sources": [],
        "why": "no GitOps controller found",
    }
    assert result.msg.startswith("no GitOps controller found")


def _flux(kube: Kube, applied: str) -> None:
    for crd in (
        _crd("source.toolkit.fluxcd.io", "GitRepository", "gitrepositories", "Namespaced", version="v1"),
        _crd("kustomize.toolkit.fluxcd.io", "Kustomization", "kustomizations", "Namespaced", version="v1"),
    ):
        kube.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    repos = "/apis/source.toolkit.fluxcd.io/v1/namespaces/default/gitrepositories"
    kube.post(
        repos,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": "platform", "namespace": "default"},
            "spec": {"url": "https://git.example.com/platform/cluster.git", "interval": "1m"},
        },
    )
    kube.patch(f"{repos}/platform/status", {"status": {"artifact": {"revision": REVISION}}})
    kustomizations = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/default/kustomizations"
    kube.post(
        kustomizations,
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "platform", "namespace": "default"},
            "spec": {
                "sourceRef": {"kind": "GitRepository", "name": "platform"},
                "path": "./",
                "interval": "5m",
            },
        },
    )
    status = {
        "lastAppliedRevision": applied,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": ""}
        ],
    }
    kube.patch(f"{kustomizations}/platform/status", {"status": status})


def test_a_flux_source_at_its_deployed_revision_is_verified(dr_site: DrSite) -> None:
    _flux(Kube(api_client(dr_site.inventory.cluster)), applied=REVISION)
    result = dr_site.run(gitops_source, dr_site.call("dr.gitops_source", {}, host="localhost"))
    assert result.data["found"] and result.data["verified"], result.msg
    row = result.data["sources"][0]
    assert row["url"] == "https://git.example.com/platform/cluster.git" and row["revision"] == REVISION


def test_a_flux_source_behind_its_repository_is_not_verified(dr_site: DrSite) -> None:
    _flux(Kube(api_client(dr_site.inventory.cluster)), applied="main@sha1:0000000")
    result = dr_site.run(gitops_source, dr_site.call("dr.gitops_source", {}, host="localhost"))
    assert not result.data["verified"]
    assert f"applied main@sha1:0000000, but the source is at {REVISION}" in result.data["why"]


def test_the_report_is_a_table_of_verified_and_unverified_items(dr_site: DrSite) -> None:
    items = [
        {"item": "etcd snapshot", "verified": True, "evidence": "s3://b/k sha256 ab12"},
        {"item": "inference failover", "verified": False, "why": "not checkable by pitstop yet"},
        {"item": "model registry", "verified": "", "why": "not configured"},
    ]
    result = dr_site.run(report, dr_site.call("dr.report", {"items": items}, host="localhost"))
    lines = result.msg.splitlines()
    assert lines[0] == "DR readiness"
    assert lines[3].split() == ["etcd", "snapshot", "verified", "s3://b/k", "sha256", "ab12"]
    assert "unverified  not checkable by pitstop yet" in lines[4]
    assert lines[-1] == "1 of 3 recovery items verified"
    assert result.data["unverified"] == ["inference failover", "model registry"]

    with pytest.raises(ApplicationError) as failed:
        dr_site.run(
            report,
            dr_site.call(
                "dr.report", {"items": items, "fail_on_unverified": ["model registry"]}, host="localhost"
            ),
        )
    assert failed.value.message.startswith("required recovery items unverified: model registry\nDR readiness")
