"""Static checks of deploy/kubernetes/: what the worker's identity may never be granted, the
Deployment's hardening, and that the pieces refer to each other correctly. (That the roles are
sufficient and each rule necessary is shown by tests/security/test_rbac.py on the rehearsal
cluster.)"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
WORKER_SA = {"kind": "ServiceAccount", "name": "pitstop-worker", "namespace": "pitstop"}
Obj = dict[str, Any]


def _docs(path: Path) -> list[Obj]:
    return [d for d in YAML(typ="safe").load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    found = [d for f in sorted(MANIFESTS.glob("*.yaml")) if f.name != "kustomization.yaml" for d in _docs(f)]
    assert found
    return found


def _of(objects: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def _rules(objects: list[Obj]) -> list[tuple[str, Obj]]:
    return [
        (r["metadata"]["name"], rule)
        for r in objects
        if r["kind"] in ("ClusterRole", "Role")
        for rule in r["rules"]
    ]


def test_every_object_is_labelled_and_every_binding_is_for_the_worker_only(objects: list[Obj]) -> None:
    roles = {o["metadata"]["name"] for o in _of(objects, "ClusterRole")}
    for obj in objects:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "pitstop", obj["metadata"]["name"]
    bindings = _of(objects, "ClusterRoleBinding") + _of(objects, "RoleBinding")
    assert len(bindings) >= 4
    for binding in bindings:
        assert binding["subjects"] == [WORKER_SA], binding["metadata"]
        assert binding["roleRef"]["kind"] == "ClusterRole" and binding["roleRef"]["name"] in roles


def test_no_rule_grants_what_the_worker_must_never_have(objects: list[Obj]) -> None:
    never_verbs = {"*", "escalate", "bind", "impersonate", "deletecollection"}
    never_resources = {"pods/exec", "pods/attach", "pods/portforward", "nodes/proxy", "serviceaccounts/token",
                       "certificatesigningrequests/approval"}  # fmt: skip
    for role, rule in _rules(objects):
        verbs = set(rule["verbs"])
        resources = set(rule.get("resources") or [])
        assert not verbs & never_verbs, (role, rule)
        assert not resources & never_resources, (role, rule)
        if "*" in resources:  # only reading custom resources of the operators being upgraded
            assert verbs == {"list"} and "" not in rule["apiGroups"] and "*" not in rule["apiGroups"], (
                role,
                rule,
            )
        if "" in rule.get("apiGroups", []) and "pods" in resources:
            assert not verbs & {"delete", "create", "update"}, (
                f"{role}: pods may only be evicted, never deleted"
            )
        if "rbac.authorization.k8s.io" in rule.get("apiGroups", []):
            assert verbs <= {"get", "list"}, (role, rule)
        if "secrets" in resources:
            assert role in SECRET_LISTERS and verbs == {"list"}, (role, rule)


# Roles that may list Secrets: the upgrade's Helm release records, and the MultiKueue readiness
# check's image pull Secrets (names and types as a Table; bound per namespace only).
SECRET_LISTERS = {"pitstop-platform-upgrade-read", "pitstop-worker-readiness-secrets"}


def test_the_readiness_checks_secret_role_is_bound_in_namespaces_only(objects: list[Obj]) -> None:
    bound = [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    secrets = [o for o in bound if o["roleRef"]["name"] == "pitstop-worker-readiness-secrets"]
    assert secrets and {o["kind"] for o in secrets} == {"RoleBinding"}


TRAINING_OPERATORS = (
    "pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs", "trainjobs", "jobsets",
    "rayclusters", "rayjobs",
)  # fmt: skip


def test_the_maintenance_roles_read_no_secret_and_write_only_what_maintenance_changes() -> None:
    docs = _docs(MANIFESTS / "rbac-node-maintenance.yaml")
    writes = {
        (role, group, resource, verb)
        for role, rule in _rules(docs)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if verb not in ("get", "list", "watch")
    }
    assert writes == {
        ("pitstop-node-maintenance", "", "nodes", "patch"),
        ("pitstop-node-maintenance", "", "pods/eviction", "create"),
        ("pitstop-node-maintenance", "kueue.x-k8s.io", "clusterqueues", "patch"),
        ("pitstop-validation-jobs", "batch", "jobs", "create"),
        ("pitstop-validation-jobs", "batch", "jobs", "delete"),
        ("pitstop-checkpoint-requests", "", "pods", "patch"),
        ("pitstop-checkpoint-requests", "batch", "jobs", "patch"),
        # Protocol suspend: the training operators' objects (one rule: RBAC grants every
        # group x resource pair of it, the ones that do not exist included) and Kueue Workloads.
        *(
            ("pitstop-checkpoint-requests", group, resource, "patch")
            for group in ("kubeflow.org", "trainer.kubeflow.org", "jobset.x-k8s.io", "ray.io")
            for resource in TRAINING_OPERATORS
        ),
        ("pitstop-checkpoint-requests", "kueue.x-k8s.io", "workloads", "patch"),
    }
    assert not any("secrets" in rule.get("resources", []) for _, rule in _rules(docs))
    # Namespaced writes are granted by RoleBindings only, never cluster-wide.
    cluster_wide = {b["roleRef"]["name"] for b in docs if b["kind"] == "ClusterRoleBinding"}
    assert cluster_wide == {"pitstop-node-maintenance"}


def test_the_worker_runs_unprivileged_with_its_keys_and_policy_mounted(objects: list[Obj]) -> None:
    [deployment] = _of(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "pitstop-worker" and pod["automountServiceAccountToken"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]} and security["privileged"] is False
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounted_files = (
        "PITSTOP_WORKER_POLICY",
        "PITSTOP_WORKER_KEY_FILE",
        "PITSTOP_VOTE_KEY_FILE",
        "PITSTOP_CODEC_KEY_FILE",
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    )
    for name in mounted_files:
        path = env[name]
        assert path, name
        mount = next((m for p, m in mounts.items() if path.startswith(p + "/")), None)
        assert mount is not None and mount["readOnly"] is True, f"{name}={path} is not in a read-only mount"
        assert mount["name"] in volumes
    assert {m["name"] for m in mounts.values()} == set(volumes), "every volume mounted, every mount a volume"
    for mount in mounts.values():  # everything writable is scratch space
        if not mount.get("readOnly"):
            assert "emptyDir" in volumes[mount["name"]], mount
    # Secret values come from Secrets, never from the manifest.
    assert not _of(objects, "Secret")
    for entry in container["env"]:
        if re.search(r"SECRET|TOKEN|PASSWORD|ACCESS_KEY", entry["name"]) and not entry["name"].endswith(
            "_DIR"
        ):
            assert "valueFrom" in entry, entry["name"]
    header = (MANIFESTS / "worker.yaml").read_text(encoding="utf-8")
    for volume in volumes.values():
        if "secret" in volume:
            assert f"create secret generic {volume['secret']['secretName']}" in header, volume


def test_the_namespace_is_restricted_and_the_network_policy_closes_ingress(objects: list[Obj]) -> None:
    [namespace] = _of(objects, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    [policy] = _of(objects, "NetworkPolicy")
    [deployment] = _of(objects, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"} and policy["spec"]["ingress"] == []
    [sa] = _of(objects, "ServiceAccount")
    assert sa["automountServiceAccountToken"] is False


def test_the_policy_config_map_is_a_worker_policy_for_this_cluster(objects: list[Obj]) -> None:
    [config] = _of(objects, "ConfigMap")
    [deployment] = _of(objects, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    path = next(e["value"] for e in container["env"] if e["name"] == "PITSTOP_WORKER_POLICY")
    assert Path(path).name in config["data"]
    policy = YAML(typ="safe").load(config["data"][Path(path).name])
    assert set(policy) <= {"files", "clusters_dir", "clusters", "s3", "etcd", "secrets"}
    assert [c.get("in_cluster") for c in policy["clusters"].values()] == [True]


def test_kustomize_renders_everything_but_the_opt_in_roles() -> None:
    """The upgrade's role and the MultiKueue readiness check's are applied only where those
    runbooks run (each file's header says why)."""
    listed = YAML(typ="safe").load((MANIFESTS / "kustomization.yaml").read_text())["resources"]
    files = {f.name for f in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(listed) == files - {"rbac-platform-upgrade.yaml", "rbac-worker-readiness.yaml"}
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on PATH to render the kustomization")
    rendered = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS)], capture_output=True, text=True, timeout=60
    )
    assert rendered.returncode == 0, rendered.stderr
    kinds = re.findall(r"^kind: (\w+)$", rendered.stdout, re.MULTILINE)
    assert sorted(set(kinds)) == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Namespace",
                                  "NetworkPolicy", "RoleBinding", "ServiceAccount"]  # fmt: skip


CLUSTER_WORKER = ROOT / "deploy" / "kubernetes-cluster-worker"


@pytest.fixture(scope="module")
def cluster_worker() -> list[Obj]:
    """deploy/kubernetes-cluster-worker as kustomize renders it (the base plus its patches)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on PATH to render the kustomization")
    rendered = subprocess.run(
        [kubectl, "kustomize", str(CLUSTER_WORKER)], capture_output=True, text=True, timeout=60
    )
    assert rendered.returncode == 0, rendered.stderr
    return [d for d in YAML(typ="safe").load_all(rendered.stdout) if isinstance(d, dict)]


def test_the_cluster_worker_serves_its_clusters_queue_activities_only_through_its_service_account(
    cluster_worker: list[Obj], tmp_path: Path
) -> None:
    from pitstop.policy import load_policy
    from pitstop.policy.errors import POLICY_ENV

    [deployment] = _of(cluster_worker, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["python", "worker.py", "--activities-only"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # A worker policy (it loads as the worker would load it) for one cluster, reached in-cluster.
    [config] = _of(cluster_worker, "ConfigMap")
    policy_file = tmp_path / Path(env["PITSTOP_WORKER_POLICY"] or "").name
    policy_file.write_text(config["data"][policy_file.name])
    policy = load_policy({POLICY_ENV: str(policy_file), "PITSTOP_HOME": str(tmp_path)})
    [(name, rule)] = policy.clusters.items()
    assert rule.in_cluster and rule.kubeconfig is None
    # The cluster's own queue, named after it (what its inventories give as cluster.task_queue).
    assert env["PITSTOP_TASK_QUEUE"] == f"pitstop-{name}"
    assert pod["serviceAccountName"] == "pitstop-worker" and pod["automountServiceAccountToken"] is True
    # No kubeconfig anywhere: not in the environment, not mounted.
    assert "KUBECONFIG" not in env
    assert not any("kube" in m["mountPath"] or "kube" in m["name"] for m in container["volumeMounts"])
    # No worker or vote key: the workflows' signing runs on the central worker.
    assert not {"PITSTOP_WORKER_KEY_FILE", "PITSTOP_VOTE_KEY_FILE"} & set(env)
    [keys] = [v for v in pod["volumes"] if v["name"] == "keys"]
    assert [i["key"] for i in keys["secret"]["items"]] == ["codec.key"]
    assert env["PITSTOP_CODEC_KEY_FILE"] == "/etc/pitstop/keys/codec.key"
    # Still the base's hardening, RBAC and network policy around it.
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    [network] = _of(cluster_worker, "NetworkPolicy")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert network["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert _of(cluster_worker, "ClusterRoleBinding") and _of(cluster_worker, "ServiceAccount")
