"""The upgrade's cleanup (kube.removals, kube.delete) as the worker's ServiceAccount, with the
RBAC of deploy/kubernetes/ enforced by the rehearsal cluster: the shipped removal (kuberay's
rehearsal Deployment, v1.2.2 -> v1.3.0) is planned and deleted with no request denied; without
the cleanup role the delete is the apiserver's 403 and nothing is deleted; and whatever a
runbook lists, a kind or namespace the role does not grant (kueue's controller in kueue-system)
is refused by the cluster before anything is deleted, even what the role does grant."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.apply import apply
from activities.kube.delete import delete
from activities.kube.removals import removals
from pitstop.demo import upgrade as du
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import ModuleRunner
from tests.security.test_rbac import (
    UPGRADE_POLICY,
    WORKER_USER,
    drop_rule,
    registered_worker_token,
    start_with_rbac,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RETIRED = "kuberay-rehearsal-retired"
KUBERAY = {"component": "kuberay", "from_version": "v1.2.2", "to_version": "v1.3.0"}


@pytest.fixture
def runner() -> ModuleRunner:
    return ModuleRunner()


@pytest.fixture
def upgraded(tmp_path: Path, runner: ModuleRunner, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimCluster]:
    """The platform-upgrade rehearsal cluster as the worker's ServiceAccount, kuberay's shipped
    v1.2.2 then v1.3.0 applied by kube.apply (as the upgrade does)."""
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(REPO / "runbooks"))
    sim = start_with_rbac(tmp_path / "cluster", du.SCENARIO, UPGRADE_POLICY)
    try:
        registered_worker_token(sim, runner.cluster(sim).name)
        for version in ("v1.2.2", "v1.3.0"):
            src = f"manifests/platform/kuberay/{version}"
            runner(apply, sim, {"src": src, "force_conflicts": True}, host="localhost")
        yield sim
    finally:
        sim.stop()


def retired(sim: SimCluster) -> dict[str, Any] | None:
    return sim.get("apps/deployments", RETIRED, namespace="ray-system")


def plan(runner: ModuleRunner, sim: SimCluster) -> Any:
    return runner(removals, sim, {"components": [KUBERAY]}, host="localhost")


def test_the_shipped_removal_is_planned_and_deleted_as_the_service_account_with_no_request_denied(
    upgraded: SimCluster, runner: ModuleRunner
) -> None:
    planned = plan(runner, upgraded)
    assert [(t["namespace"], t["name"]) for t in planned.data["delete"]] == [("ray-system", RETIRED)]
    deleted = runner(delete, upgraded, {"objects": planned.data["delete"]}, host="localhost")
    assert deleted.changed is True
    assert retired(upgraded) is None
    assert upgraded.rbac_denials() == []


def test_without_the_cleanup_role_the_delete_is_the_apiservers_403_and_nothing_is_deleted(
    upgraded: SimCluster, runner: ModuleRunner
) -> None:
    planned = plan(runner, upgraded)
    drop_rule(upgraded, "pitstop-platform-cleanup", lambda r: r.get("resources") == ["deployments"])
    with pytest.raises(ApplicationError) as refused:
        runner(delete, upgraded, {"objects": planned.data["delete"]}, host="localhost")
    assert refused.value.type == "Unauthorized"
    assert refused.value.message == (
        f'kube.delete: Deployment ray-system/{RETIRED}: deployments.apps "{RETIRED}" is forbidden: '
        f'User "{WORKER_USER}" cannot delete resource "deployments" in API group "apps" in the namespace '
        '"ray-system" (HTTP 403; check the credentials and RBAC of the kubeconfig)'
    )
    assert retired(upgraded) is not None


def test_a_namespace_the_role_does_not_grant_is_refused_by_the_cluster_before_anything_is_deleted(
    upgraded: SimCluster, runner: ModuleRunner
) -> None:
    """A runbook lists kueue's controller (kueue-system: the worker may patch it, not delete it)
    after the planned object: the dry run meets the 403 first, so neither is deleted."""
    planned = plan(runner, upgraded)
    kueue = upgraded.get("apps/deployments", "kueue-controller-manager", namespace="kueue-system")
    assert kueue is not None
    foreign = {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "kueue-system"}
    foreign |= {"name": "kueue-controller-manager", "uid": kueue["metadata"]["uid"]}
    with pytest.raises(ApplicationError) as refused:
        runner(delete, upgraded, {"objects": [*planned.data["delete"], foreign]}, host="localhost")
    assert refused.value.type == "Unauthorized"
    assert refused.value.message.startswith(
        "kube.delete: Deployment kueue-system/kueue-controller-manager: "
        'deployments.apps "kueue-controller-manager" '
        f'is forbidden: User "{WORKER_USER}" cannot delete resource "deployments" in API group "apps" in the '
        'namespace "kueue-system"'
    )
    assert retired(upgraded) is not None
    assert upgraded.get("apps/deployments", "kueue-controller-manager", namespace="kueue-system") is not None
