"""The RBAC objects of a rehearsal cluster started with `rbac`: the rbac.authorization.k8s.io/v1
resource types it then serves, the default roles every apiserver creates, the policy files
(e.g. `deploy/kubernetes/*.yaml`) whose Namespaces, ServiceAccounts, Roles, ClusterRoles and
bindings it starts with, and the ServiceAccount tokens it issues (`install_rbac`).

The defaults are the apiserver's bootstrap policy that matters for a client: `cluster-admin`
bound to the group `system:masters` (the admin token's user), `system:discovery` and
`system:basic-user` bound to `system:authenticated`, `system:public-info-viewer` (the health
and version endpoints) bound to `system:authenticated` and `system:unauthenticated`, and the
user-facing `admin`, `edit` and `view` roles (unbound; their rules abbreviated).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from pitstop_sim.rbac import RBAC_GROUP
from pitstop_sim.resources import ResourceType
from pitstop_sim.scenario import ScenarioError

if TYPE_CHECKING:
    from pitstop_sim.api import KubeApi
    from pitstop_sim.context import SimContext

Obj = dict[str, Any]

RBAC_VERSION = f"{RBAC_GROUP}/v1"
RBAC_TYPES: tuple[ResourceType, ...] = (
    ResourceType(RBAC_GROUP, "v1", "clusterroles", "clusterrole", "ClusterRole", False, subresources=()),
    ResourceType(
        RBAC_GROUP,
        "v1",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        False,
        subresources=(),
    ),
    ResourceType(RBAC_GROUP, "v1", "roles", "role", "Role", True, subresources=()),
    ResourceType(RBAC_GROUP, "v1", "rolebindings", "rolebinding", "RoleBinding", True, subresources=()),
)
# What a policy file may create in the rehearsal cluster, in the order it is created; any other
# kind in the files (the worker's Deployment, its Secrets, a NetworkPolicy) is not RBAC's
# business and is left out.
POLICY_KINDS: dict[tuple[str, str], int] = {
    ("v1", "Namespace"): 0,
    ("v1", "ServiceAccount"): 1,
    (RBAC_VERSION, "ClusterRole"): 2,
    (RBAC_VERSION, "Role"): 2,
    (RBAC_VERSION, "ClusterRoleBinding"): 3,
    (RBAC_VERSION, "RoleBinding"): 3,
}
BOOTSTRAP_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
PUBLIC_INFO_URLS = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
DISCOVERY_URLS = ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", *PUBLIC_INFO_URLS]


class PolicyError(ValueError):
    """A policy file cannot be read or holds an RBAC object the cluster cannot take."""


def _cluster_role(name: str, rules: list[Obj]) -> Obj:
    return {
        "apiVersion": RBAC_VERSION,
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": dict(BOOTSTRAP_LABELS)},
        "rules": rules,
    }


def _binding(name: str, role: str, groups: list[str]) -> Obj:
    return {
        "apiVersion": RBAC_VERSION,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": dict(BOOTSTRAP_LABELS)},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": g} for g in groups],
    }


def bootstrap_objects() -> list[Obj]:
    """The default ClusterRoles and ClusterRoleBindings of a new apiserver that clients rely on."""
    return [
        _cluster_role(
            "cluster-admin",
            [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ],
        ),
        _cluster_role("system:discovery", [{"nonResourceURLs": DISCOVERY_URLS, "verbs": ["get"]}]),
        _cluster_role("system:public-info-viewer", [{"nonResourceURLs": PUBLIC_INFO_URLS, "verbs": ["get"]}]),
        _cluster_role(
            "system:basic-user",
            [
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["authentication.k8s.io"],
                    "resources": ["selfsubjectreviews"],
                    "verbs": ["create"],
                },
            ],
        ),
        # The user-facing roles (upstream they aggregate many more rules from labelled roles).
        _cluster_role("admin", [{"apiGroups": ["", "apps", "batch"], "resources": ["*"], "verbs": ["*"]}]),
        _cluster_role(
            "edit",
            [
                {
                    "apiGroups": ["", "apps", "batch"],
                    "resources": ["pods", "services", "configmaps", "deployments", "jobs"],
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                }
            ],
        ),
        _cluster_role(
            "view",
            [
                {
                    "apiGroups": ["", "apps", "batch"],
                    "resources": ["pods", "services", "configmaps", "deployments", "jobs"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        ),
        _binding("cluster-admin", "cluster-admin", ["system:masters"]),
        _binding("system:discovery", "system:discovery", ["system:authenticated"]),
        _binding("system:basic-user", "system:basic-user", ["system:authenticated"]),
        _binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            ["system:authenticated", "system:unauthenticated"],
        ),
    ]


def _files(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()))
        elif path.is_file():
            found.append(path)
        else:
            raise PolicyError(f"RBAC policy {path} does not exist (give YAML files or directories of them)")
    return found


def _check(obj: Obj, where: str) -> None:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name"):
        raise PolicyError(f"{where}: {obj.get('kind')} without metadata.name")
    kind = obj["kind"]
    if kind in ("Role", "RoleBinding", "ServiceAccount") and not metadata.get("namespace"):
        # kubectl apply would put it in the current context's namespace; say which one instead.
        raise PolicyError(f"{where}: {kind} {metadata['name']} names no metadata.namespace")
    if kind.endswith("Binding"):
        ref = obj.get("roleRef")
        name = metadata["name"]
        if not isinstance(ref, dict) or ref.get("kind") not in ("Role", "ClusterRole") or not ref.get("name"):
            raise PolicyError(
                f"{where}: {kind} {name} needs a roleRef with kind Role or ClusterRole and a name"
            )
        if kind == "ClusterRoleBinding" and ref.get("kind") != "ClusterRole":
            raise PolicyError(f"{where}: ClusterRoleBinding {name} can only refer to a ClusterRole")
    if kind.endswith("Role") and not isinstance(obj.get("rules", []), list):
        raise PolicyError(f"{where}: {kind} {metadata['name']}: rules must be a list")


def load_policy(paths: list[Path]) -> list[Obj]:
    """The objects of the policy files a rehearsal cluster creates, Namespaces first, bindings
    last; PolicyError names the file and document of anything it cannot take."""
    yaml = YAML(typ="safe", pure=True)
    chosen: list[tuple[int, int, Obj]] = []
    for file in _files(paths):
        try:
            docs = list(yaml.load_all(file.read_text(encoding="utf-8")))
        except (OSError, YAMLError) as exc:
            raise PolicyError(f"RBAC policy {file} cannot be read: {exc}") from None
        for index, doc in enumerate(docs):
            if not isinstance(doc, dict):
                continue
            key = (str(doc.get("apiVersion")), str(doc.get("kind")))
            order = POLICY_KINDS.get(key)
            if order is None:
                continue
            _check(doc, f"{file} (document {index + 1})")
            chosen.append((order, len(chosen), doc))
    return [doc for _, _, doc in sorted(chosen, key=lambda item: (item[0], item[1]))]


def namespaces_needed(objects: list[Obj]) -> list[str]:
    """Namespaces the policy's namespaced objects live in."""
    names = {
        str(obj["metadata"]["namespace"])
        for obj in objects
        if obj["kind"] != "Namespace" and obj["metadata"].get("namespace")
    }
    return sorted(names)


def parse_account(text: str) -> tuple[str, str]:
    """`namespace/name` of a ServiceAccount; ValueError says the expected form."""
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(
            f"{text!r} is not a ServiceAccount as 'namespace/name' (e.g. pitstop/pitstop-worker)"
        )
    return namespace, name


def install_rbac(
    ctx: SimContext, api: KubeApi, policy: list[Path], service_accounts: list[str]
) -> dict[str, tuple[str, str]]:
    """Serve the RBAC API, create the default roles and the policy's objects (those already
    there, in a cluster resumed from etcd, are kept), and issue the ServiceAccounts' tokens
    (token -> (namespace, name))."""
    for rt in RBAC_TYPES:
        ctx.registry.add(rt)
    objects = bootstrap_objects() + load_policy(policy)
    namespaces = ctx.rt("", "namespaces")
    declared = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    for missing in namespaces_needed(objects):
        # On a real cluster the namespaces a policy binds roles in exist (the operators made them).
        if ctx.store.get("namespaces", None, missing) is None and missing not in declared:
            api.create(namespaces, None, {"metadata": {"name": missing}})
    for obj in objects:
        found = ctx.registry.of_kind(str(obj["apiVersion"]), str(obj["kind"]))
        assert found is not None, f"{obj['apiVersion']} {obj['kind']} is not served"
        where = str(obj["metadata"].get("namespace") or "default") if found.namespaced else None
        if ctx.store.get(found.storage, where, str(obj["metadata"]["name"])) is None:
            api.create(found, where, obj)
    tokens: dict[str, tuple[str, str]] = {}
    for account in service_accounts:
        namespace, name = parse_account(account)
        if ctx.store.get("serviceaccounts", namespace, name) is None:
            raise ScenarioError(
                f"ServiceAccount {account} does not exist in the rehearsal cluster; add it to the RBAC "
                "policy files (rbac_policy / --rbac)"
            )
        tokens[secrets.token_urlsafe(32)] = (namespace, name)
    return tokens
