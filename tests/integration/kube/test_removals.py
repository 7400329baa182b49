"""kube.removals and kube.delete against the rehearsal cluster, with the real kubectl as an
independent client: the plan lists exactly what the old release shipped and the new one does
not; a deletion whose precondition went stale deletes nothing; check mode deletes nothing;
refused kinds and protected namespaces are refused before any request, and a namespace the
worker policy opens is not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.apply import apply
from activities.kube.client import Kube, api_client
from activities.kube.delete import delete
from activities.kube.removals import removals
from pitstop.runbook.inventory import ClusterConfig
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim
from tests.integration.sim.conftest import Kubectl, kubectl_for

__all__ = ["kubectl_for"]

Obj = dict[str, Any]
CLUSTER = """
cluster: {nodes: 2, domains: 2}
timing: {time_scale: 20}
"""
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: team}}
spec:
  replicas: 0
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: c, image: "registry.local/{name}:{tag}"}}]}}
"""
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{v: '{tag}'}}\n"
# An old release's admission webhook configuration (its webhooks retired; none left to call).
WEBHOOK = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: app-legacy, labels: {app.kubernetes.io/name: app}}
"""
NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n"
OLD = "---\n".join(
    [
        NAMESPACE,
        DEPLOYMENT.format(name="web", tag="1"),
        DEPLOYMENT.format(name="web-legacy", tag="1"),
        CONFIGMAP.format(name="settings", tag="1"),
        CONFIGMAP.format(name="old-settings", tag="1"),
        CONFIGMAP.format(name="gone-already", tag="1"),
        CONFIGMAP.format(name="adopted", tag="1"),
        WEBHOOK,
    ]
)
# v2 renames nothing it keeps, changes what it keeps, and adds one object; the Namespace is no
# longer in the release (a platform team moved it to its own bootstrap).
NEW = "---\n".join(
    [
        DEPLOYMENT.format(name="web", tag="2"),
        CONFIGMAP.format(name="settings", tag="2"),
        CONFIGMAP.format(name="new-settings", tag="2"),
    ]
)
KEPT = {"Deployment team/web", "ConfigMap team/settings", "ConfigMap team/new-settings"}


def kube(sim: SimCluster) -> Kube:
    sim.register("test")
    return Kube(api_client(ClusterConfig(name="test")))


class Release:
    """A runbook directory with `manifests/platform/app/{v1,v2}`, v1 applied and then v2 (as the
    upgrade does), the real kubectl on the same cluster."""

    def __init__(self, sim: SimCluster, kubectl: Kubectl, root: Path, runner: ModuleRunner) -> None:
        self.sim, self.kubectl, self.root, self.runner = sim, kubectl, root, runner
        for version, text in (("v1", OLD), ("v2", NEW)):
            directory = root / "manifests" / "platform" / "app" / version
            directory.mkdir(parents=True)
            (directory / "app.yaml").write_text(text)
        for version in ("v1", "v2"):
            runner(apply, sim, {"src": f"manifests/platform/app/{version}", "namespace": "team"})

    def plan(self, **extra: Any) -> Any:
        args = {
            "components": [{"component": "app", "from_version": "v1", "to_version": "v2"}],
            "namespace": "team",
        }
        return self.runner(removals, self.sim, {**args, **extra})

    def exists(self, kind: str, name: str) -> bool:
        namespaced = [] if kind == "validatingwebhookconfiguration" else ["-n", "team"]
        found = self.kubectl.run("get", kind, name, *namespaced, "--ignore-not-found", "-o", "name")
        return bool(found.stdout.strip())

    def recreate_by_hand(self, text: str) -> None:
        """What a person does with kubectl: a client-side apply (manager kubectl-client-side-apply)."""
        manifest = self.root / "by-hand.yaml"
        manifest.write_text(text)
        self.kubectl("apply", "-n", "team", "-f", str(manifest))

    def uid(self, kind: str, name: str) -> str:
        return self.kubectl("get", kind, name, "-n", "team", "-o", "jsonpath={.metadata.uid}")


@pytest.fixture
def release(
    start_sim: StartSim,
    kubectl_for: Callable[[SimCluster], Kubectl],
    module_runner: ModuleRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Release:
    sim = start_sim(CLUSTER)
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    return Release(sim, kubectl_for(sim), tmp_path, module_runner)


def rows(result: Any) -> dict[str, tuple[str, str]]:
    return {
        (f"{r['kind']} {r['namespace']}/{r['name']}" if r["namespace"] else f"{r['kind']} {r['name']}"): (
            r["state"],
            r["action"],
        )
        for r in result.data["removals"]
    }


def test_the_plan_lists_exactly_the_objects_the_new_release_dropped(release: Release) -> None:
    kubectl = release.kubectl
    kubectl("delete", "configmap", "gone-already", "-n", "team")
    # Someone recreated `adopted` by hand: it is no longer the installer's.
    kubectl("delete", "configmap", "adopted", "-n", "team")
    release.recreate_by_hand(CONFIGMAP.format(name="adopted", tag="mine"))

    plan = release.plan()

    assert rows(plan) == {
        "Deployment team/web-legacy": ("present", "delete"),
        "ConfigMap team/old-settings": ("present", "delete"),
        "ValidatingWebhookConfiguration app-legacy": ("present", "delete"),
        "ConfigMap team/gone-already": ("gone", "none"),
        "ConfigMap team/adopted": ("present", "keep"),
        "Namespace team": ("present", "keep"),
    }
    assert not KEPT & set(rows(plan)), "an object the new release ships was listed"
    by_name = {r["name"]: r for r in plan.data["removals"]}
    assert (
        by_name["adopted"]["reason"] == "kept: not applied by pitstop (managed by kubectl-client-side-apply)"
    )
    assert by_name["team"]["reason"].startswith("kept: deleting a Namespace deletes everything in it")
    # The preconditions are the live objects' own, as kubectl reads them.
    legacy = next(t for t in plan.data["delete"] if t["name"] == "web-legacy")
    assert legacy["uid"] == release.uid("deployment", "web-legacy")
    assert legacy["resourceVersion"] == kubectl(
        "get", "deployment", "web-legacy", "-n", "team", "-o", "jsonpath={.metadata.resourceVersion}"
    )
    assert {t["name"] for t in plan.data["delete"]} == {"web-legacy", "old-settings", "app-legacy"}
    assert plan.changed is False
    assert plan.msg.startswith(
        "6 objects the new releases no longer ship: 3 to delete, 2 kept, 1 already gone"
    )


def test_a_stale_precondition_deletes_nothing_and_a_fresh_plan_deletes_exactly_it(release: Release) -> None:
    plan = release.plan()
    kubectl = release.kubectl
    # Changed since the plan (another resourceVersion) and recreated (another uid).
    kubectl("label", "configmap", "old-settings", "-n", "team", "touched=yes")
    kubectl("delete", "deployment", "web-legacy", "-n", "team")
    release.recreate_by_hand(DEPLOYMENT.format(name="web-legacy", tag="9"))

    with pytest.raises(ApplicationError) as refused:
        release.runner(delete, release.sim, {"objects": plan.data["delete"]})
    assert refused.value.type == "PreconditionFailed"
    message = refused.value.message
    assert message.startswith("kube.delete: changed or recreated since it was planned, so not deleted")
    assert (
        'Operation cannot be fulfilled on configmaps "old-settings": StorageError: invalid object' in message
    )
    assert "Precondition failed: ResourceVersion in precondition: " in message
    assert "Precondition failed: UID in precondition: " in message
    assert message.endswith("; nothing deleted")
    # The dry run caught both before any DELETE: nothing was deleted, the untouched one neither.
    assert all(
        release.exists(kind, name)
        for kind, name in [
            ("configmap", "old-settings"),
            ("deployment", "web-legacy"),
            ("validatingwebhookconfiguration", "app-legacy"),
        ]
    )

    again = release.plan()
    assert rows(again)["Deployment team/web-legacy"] == ("present", "keep")  # kubectl's now
    deleted = release.runner(delete, release.sim, {"objects": again.data["delete"]})
    assert deleted.changed is True
    assert deleted.msg == "deleted 4 objects (Background propagation), 0 already gone"
    assert not release.exists("configmap", "old-settings") and not release.exists(
        "validatingwebhookconfiguration", "app-legacy"
    )
    assert release.exists("deployment", "web-legacy")  # recreated by someone: kept
    assert all(release.exists(*ref) for ref in [("deployment", "web"), ("configmap", "settings")])

    # Run again (a retried task): already gone is ok and not a change.
    twice = release.runner(delete, release.sim, {"objects": again.data["delete"]})
    assert (twice.changed, twice.msg) == (False, "deleted 0 objects (Background propagation), 4 already gone")


def test_check_mode_is_a_server_side_dry_run_that_deletes_nothing(release: Release) -> None:
    plan = release.plan()
    counters = release.sim.counters()
    result = release.runner(delete, release.sim, {"objects": plan.data["delete"]}, check_mode=True)
    assert (result.changed, result.msg) == (
        True,
        "would delete 5 objects (Background propagation), 0 already gone",
    )
    assert all(
        release.exists(*ref)
        for ref in [
            ("deployment", "web-legacy"),
            ("configmap", "old-settings"),
            ("validatingwebhookconfiguration", "app-legacy"),
        ]
    )
    assert release.sim.counters().deletions_total == counters.deletions_total


def test_kinds_that_lose_data_are_refused_before_any_request(release: Release) -> None:
    api = kube(release.sim)
    namespace = api.get("/api/v1/namespaces/team")
    node = api.get("/api/v1/nodes/gpu-node-001")
    targets = [
        {"apiVersion": "v1", "kind": "Namespace", "name": "team", "uid": namespace["metadata"]["uid"]},
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-001", "uid": node["metadata"]["uid"]},
        {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "team", "name": "old-settings", "uid": "x"},
    ]
    with pytest.raises(ApplicationError) as refused:
        release.runner(delete, release.sim, {"objects": targets})
    assert refused.value.type == "InvalidArgs"
    assert refused.value.message.startswith(
        "kube.delete: refused, nothing deleted: Namespace team: deleting a Namespace deletes everything "
        "in it; Node gpu-node-001: deleting a Node removes it from the cluster"
    )
    assert release.exists("configmap", "old-settings")
    assert (api.get("/api/v1/namespaces/team").get("metadata") or {}).get("deletionTimestamp") is None


def test_kube_system_is_refused_unless_the_worker_policy_opens_it(
    release: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubectl = release.kubectl
    cni = release.root / "cni.yaml"
    cni.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: old-cni-config, namespace: kube-system}\n"
    )
    kubectl("apply", "-f", str(cni))
    uid = kubectl("get", "configmap", "old-cni-config", "-n", "kube-system", "-o", "jsonpath={.metadata.uid}")
    target = {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "kube-system", "name": "old-cni-config"}
    target["uid"] = uid
    with pytest.raises(ApplicationError) as refused:
        release.runner(delete, release.sim, {"objects": [target]})
    assert refused.value.type == "PolicyViolation"
    assert refused.value.message.startswith(
        "kube.delete: refused, nothing deleted: ConfigMap kube-system/old-cni-config: kube-system is a "
        "protected namespace (kube-system, kube-public, kube-node-lease) and the worker policy does not "
        "allow deletion there on cluster 'rehearsal' (policy clusters.rehearsal.allow_delete_in: none;"
    )
    assert refused.value.message.endswith(
        "ask the worker's operator to add it to clusters.rehearsal.allow_delete_in in PITSTOP_WORKER_POLICY"
    )
    assert kubectl("get", "configmap", "old-cni-config", "-n", "kube-system", "-o", "name").strip()

    policy = tmp_path / "policy.yaml"
    policy.write_text("clusters:\n  rehearsal:\n    allow_delete_in: [kube-system]\n")
    monkeypatch.setenv("PITSTOP_WORKER_POLICY", str(policy))
    deleted = release.runner(delete, release.sim, {"objects": [target]})
    assert deleted.changed is True
    assert not kubectl.run(
        "get", "configmap", "old-cni-config", "-n", "kube-system", "--ignore-not-found"
    ).stdout


def test_the_simulator_answers_kubectls_precondition_and_dry_run_as_an_apiserver(release: Release) -> None:
    """kubectl as an independent client: `--dry-run=server` (DeleteOptions.dryRun in the body)
    keeps the object and says so; a DELETE with a stale uid precondition is the apiserver's 409
    and an unknown propagationPolicy its 422, in kubectl's words."""
    kubectl = release.kubectl
    dry = kubectl("delete", "configmap", "old-settings", "-n", "team", "--dry-run=server")
    assert dry.strip() == 'configmap "old-settings" deleted (server dry run)'
    assert release.exists("configmap", "old-settings")

    stale = '{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"not-the-uid"}}'
    body = release.root / "options.json"
    body.write_text(stale)
    path = "/api/v1/namespaces/team/configmaps/old-settings"
    answer = kubectl.run("delete", "--raw", path, "-f", str(body), check=False)
    uid = release.uid("configmap", "old-settings")
    assert answer.returncode != 0
    assert (
        'Error from server (Conflict): Operation cannot be fulfilled on configmaps "old-settings": '
        "StorageError: invalid object, Code: 4, Key: /registry/configmaps/team/old-settings, "
        f"ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: not-the-uid, "
        f"UID in object meta: {uid}"
    ) in answer.stderr
    assert release.exists("configmap", "old-settings")

    body.write_text('{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Sideways"}')
    invalid = kubectl.run(
        "delete", "--raw", "/api/v1/namespaces/team/configmaps/settings", "-f", str(body), check=False
    )
    assert (
        'The DeleteOptions "" is invalid: propagationPolicy: Unsupported value: "Sideways": '
        'supported values: "Foreground", "Background", "Orphan", "nil"'
    ) in invalid.stderr
    assert release.exists("configmap", "settings")


def test_foreground_propagation_keeps_the_owner_until_its_dependents_are_gone(release: Release) -> None:
    """propagationPolicy Foreground, as the apiserver and its garbage collector do it: the answer
    is the Deployment marked deleted with the foregroundDeletion finalizer; it disappears only
    after its ReplicaSet and that one's pods (kubectl waits for that, as an independent client)."""
    release.recreate_by_hand(DEPLOYMENT.format(name="fg", tag="1").replace("replicas: 0", "replicas: 2"))
    kubectl = release.kubectl
    kubectl("rollout", "status", "deployment/fg", "-n", "team", "--timeout=60s")
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team", "name": "fg"}
    target["uid"] = release.uid("deployment", "fg")
    args = {"objects": [target], "propagation_policy": "Foreground"}
    result = release.runner(delete, release.sim, args)
    assert result.data["objects"] == [{"object": "Deployment team/fg", "result": "deleting"}]
    assert result.msg == "deleted 1 objects (Foreground propagation), 0 already gone"
    kubectl("wait", "--for=delete", "deployment/fg", "-n", "team", "--timeout=60s")
    assert not kubectl("get", "replicasets,pods", "-n", "team", "-l", "app=fg", "-o", "name").strip()


def test_versions_as_the_inventory_reports_them_find_their_directories(release: Release) -> None:
    """The preflight's inventory says `app v1` (product and version, as it says `calico v3.28.2`):
    the directory of that version is found; a version with no directory is refused, naming both."""
    by_key = {"components": ["app"], "versions_before": {"app": "app v1"}, "versions_after": {"app": "v2"}}
    plan = release.runner(removals, release.sim, {**by_key, "namespace": "team"})
    names = {"web-legacy", "old-settings", "gone-already", "adopted", "app-legacy"}
    assert {t["name"] for t in plan.data["delete"]} == names
    with pytest.raises(ApplicationError) as refused:
        release.runner(removals, release.sim, {**by_key, "versions_before": {"app": "v0.9"}})
    assert refused.value.message == (
        "kube.removals: app v0.9: no directory of that version in manifests/platform/app (there: v1, v2); "
        "the manifests of both releases are needed to tell what the new one no longer ships"
    )


def test_a_namespaced_kind_without_a_namespace_is_refused_not_reported_gone(release: Release) -> None:
    uid = release.uid("deployment", "web-legacy")
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web-legacy", "uid": uid}
    with pytest.raises(ApplicationError) as refused:
        release.runner(delete, release.sim, {"objects": [target]})
    assert refused.value.type == "InvalidArgs"
    assert refused.value.message == (
        "kube.delete: Deployment web-legacy: a Deployment is namespaced; give `namespace`"
    )
    assert release.exists("deployment", "web-legacy")
