"""The pure part of kube.removals and kube.delete: which objects a new release no longer ships
(by group, kind, namespace and name), what kube.delete never deletes, and the module arguments."""

from __future__ import annotations

import textwrap

import pytest
from pydantic import ValidationError

from pitstop.kube.manifests import Manifest, parse_documents
from pitstop.kube.removals import ObjectKey, crd_scopes, object_key, refusal, removed_objects
from pitstop.module_args.kube_removals import ComponentChange, DeleteArgs, RemovalsArgs

CLUSTER_SCOPED = {"ClusterRole", "ValidatingWebhookConfiguration", "Namespace", "CustomResourceDefinition"}


def docs(text: str) -> list[Manifest]:
    return parse_documents(textwrap.dedent(text), "release.yaml")


def scope(m: Manifest) -> bool | None:
    return m.kind not in CLUSTER_SCOPED


OLD = docs(
    """
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: controller, namespace: ops}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: old-webhook-server, namespace: ops}
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: settings}
    ---
    apiVersion: admissionregistration.k8s.io/v1beta1
    kind: ValidatingWebhookConfiguration
    metadata: {name: ops-validating}
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRole
    metadata: {name: ops-legacy, namespace: ignored}
    ---
    apiVersion: policy/v1beta1
    kind: PodDisruptionBudget
    metadata: {name: controller, namespace: ops}
    """
)
NEW = docs(
    """
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: controller, namespace: ops}
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: settings, namespace: default}
    ---
    apiVersion: admissionregistration.k8s.io/v1
    kind: ValidatingWebhookConfiguration
    metadata: {name: ops-validating}
    ---
    apiVersion: policy/v1
    kind: PodDisruptionBudget
    metadata: {name: controller, namespace: ops}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: webhook-server, namespace: ops}
    """
)


def keys(found: list[tuple[ObjectKey, Manifest]]) -> list[str]:
    return [key.label for key, _ in found]


def test_only_what_the_old_release_shipped_and_the_new_one_does_not_is_listed() -> None:
    found = removed_objects(OLD, NEW, scope, "default")
    # A new apiVersion of the same group is the same object (PDB, webhook configuration); the
    # ConfigMap without a namespace lands in the default one, as kube.apply puts it; the
    # cluster-scoped ClusterRole's stray namespace is dropped as the server drops it.
    assert keys(found) == [
        "Deployment.apps ops/old-webhook-server",
        "ClusterRole.rbac.authorization.k8s.io ops-legacy",
    ]
    assert found[0][1].where == "release.yaml document 1"


def test_nothing_the_new_release_still_ships_is_ever_listed() -> None:
    assert removed_objects(NEW, NEW, scope, "default") == []
    assert removed_objects(OLD, OLD + NEW, scope, "default") == []
    new_keys = {object_key(m, scope(m), "default") for m in NEW}
    assert not {key for key, _ in removed_objects(OLD, NEW, scope, "default")} & new_keys


def test_the_default_namespace_decides_where_an_unnamespaced_object_was() -> None:
    # Applied with namespace `team`, the old ConfigMap was team/settings: the new default/settings
    # is another object.
    found = removed_objects(OLD, NEW, scope, "team")
    assert "ConfigMap team/settings" in keys(found)


def test_a_moved_object_leaves_its_old_namespace_behind_and_duplicates_are_listed_once() -> None:
    old = docs(
        """
        apiVersion: v1
        kind: Service
        metadata: {name: api, namespace: a}
        ---
        apiVersion: v1
        kind: Service
        metadata: {name: api, namespace: a}
        """
    )
    new = docs("apiVersion: v1\nkind: Service\nmetadata: {name: api, namespace: b}\n")
    assert keys(removed_objects(old, new, scope, "default")) == ["Service a/api"]


def test_crd_scopes_come_from_the_manifests_own_crds_and_unknown_kinds_are_taken_as_written() -> None:
    crds = docs(
        """
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {name: clusterpolicies.nvidia.com}
        spec: {group: nvidia.com, scope: Cluster, names: {kind: ClusterPolicy, plural: clusterpolicies}}
        ---
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {name: widgets.example.com}
        spec: {group: example.com, scope: Namespaced, names: {kind: Widget, plural: widgets}}
        """
    )
    assert crd_scopes(crds) == {("nvidia.com", "ClusterPolicy"): False, ("example.com", "Widget"): True}
    policy = docs("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: p, namespace: x}\n")[0]
    assert object_key(policy, False, "default") == ObjectKey("nvidia.com", "ClusterPolicy", "", "p")
    assert object_key(policy, None, "default").namespace == "x"


@pytest.mark.parametrize(
    ("key", "allowed", "refused"),
    [
        (ObjectKey("", "Namespace", "", "ops"), (), "deleting a Namespace deletes everything in it"),
        (
            ObjectKey("apiextensions.k8s.io", "CustomResourceDefinition", "", "a.b"),
            ("kube-system",),
            "custom",
        ),
        (ObjectKey("", "PersistentVolume", "", "pv-1"), (), "data"),
        (ObjectKey("", "PersistentVolumeClaim", "ops", "data"), (), "data"),
        (ObjectKey("", "Node", "", "gpu-node-001"), (), "removes it from the cluster"),
        (
            ObjectKey("apps", "DaemonSet", "kube-system", "old-cni"),
            (),
            "kube-system is a protected namespace",
        ),
        (ObjectKey("", "ConfigMap", "kube-public", "x"), ("kube-system",), "kube-public is a protected"),
    ],
)
def test_kinds_that_lose_data_and_protected_namespaces_are_refused(
    key: ObjectKey, allowed: tuple[str, ...], refused: str
) -> None:
    reason = refusal(key, allowed)
    assert reason is not None and refused in reason


def test_what_the_policy_opens_and_ordinary_objects_are_not_refused() -> None:
    assert refusal(ObjectKey("apps", "DaemonSet", "kube-system", "old-cni"), ("kube-system",)) is None
    assert refusal(ObjectKey("apps", "Deployment", "ops", "old"), ()) is None
    # Only the core group's Node: a custom resource of kind Node is not the cluster's node.
    assert refusal(ObjectKey("example.com", "Node", "", "n"), ()) is None


def test_components_by_key_take_their_versions_from_the_maps_and_unchanged_ones_are_skipped() -> None:
    args = RemovalsArgs(
        components=[
            "kueue",
            "cni",
            "trainer",
            {"component": "lws", "from_version": "v0.4.0", "to_version": "v0.5.0"},
        ],
        versions_before={"kueue": "v0.9.1", "cni": "v3.29.1"},
        versions_after={"kueue": "v0.10.1", "cni": "v3.29.1", "trainer": "v1.9.0"},
    )
    changes, skipped = args.changes()
    assert changes == [
        ComponentChange(component="kueue", from_version="v0.9.1", to_version="v0.10.1"),
        ComponentChange(component="lws", from_version="v0.4.0", to_version="v0.5.0"),
    ]
    assert skipped == ["cni: still v3.29.1", "trainer: not in versions_before"]


def test_versions_as_the_inventory_reports_them_are_accepted_and_compared_as_versions() -> None:
    args = RemovalsArgs(
        components=["cni", "csi"],
        versions_before={"cni": "calico v3.28.2", "csi": "nfs v4.10.0"},
        versions_after={"cni": "v3.29.1", "csi": "v4.10.0"},
    )
    changes, skipped = args.changes()
    assert changes == [ComponentChange(component="cni", from_version="calico v3.28.2", to_version="v3.29.1")]
    assert skipped == ["csi: still v4.10.0"]


@pytest.mark.parametrize("bad", ["../../etc", "a/b", "..", ".hidden"])
def test_components_and_versions_are_one_directory_name(bad: str) -> None:
    with pytest.raises(ValidationError, match="is not a version"):
        RemovalsArgs(components=[{"component": "kueue", "from_version": bad, "to_version": "v1"}])
    with pytest.raises(ValidationError, match="is not a directory name"):
        RemovalsArgs(components=[bad])


def test_every_object_to_delete_carries_a_precondition() -> None:
    ok = DeleteArgs.model_validate(
        {
            "objects": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "ops", "name": "x", "uid": "u"}
            ]
        }
    )
    assert ok.propagation_policy == "Background"
    assert ok.objects[0].label == "Deployment ops/x"
    with pytest.raises(ValidationError, match="give `uid` and/or `resourceVersion`"):
        DeleteArgs.model_validate({"objects": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}]})
    with pytest.raises(ValidationError, match="propagation_policy"):
        DeleteArgs.model_validate({"objects": [], "propagation_policy": "Orphan"})
