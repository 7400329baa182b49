"""The rehearsal cluster's RBAC authorizer (pitstop_sim.rbac, .rbac_policy, .access) against the
apiserver's rules: request attributes from paths (k8s.io/apiserver RequestInfoFactory), rule
matching (rbac/v1 RuleAllows), binding scope, the 403 message shape, policy files, tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pitstop_sim.access import ADMIN, AccessControl, TokenAuthenticator
from pitstop_sim.errors import ApiError
from pitstop_sim.rbac import (
    RbacAuthorizer,
    RequestAttributes,
    UserInfo,
    forbidden,
    request_attributes,
    rule_allows,
    service_account_user,
)
from pitstop_sim.rbac_policy import PolicyError, bootstrap_objects, load_policy
from pitstop_sim.store import InMemoryStore

WORKER = service_account_user("pitstop", "pitstop-worker")
RBAC = "apiVersion: rbac.authorization.k8s.io/v1\n"
Obj = dict[str, Any]


def attrs(
    method: str, path: str, query: dict[str, str] | None = None, user: UserInfo = WORKER
) -> RequestAttributes:
    return request_attributes(method, path, query or {}, user)


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/nodes", {}, ("list", "", "", "nodes", "", "")),
        ("GET", "/api/v1/nodes/n1", {}, ("get", "", "", "nodes", "", "n1")),
        ("PATCH", "/api/v1/nodes/n1/status", {}, ("patch", "", "", "nodes", "status", "n1")),
        ("POST", "/api/v1/namespaces/ns/pods/p/eviction", {}, ("create", "", "ns", "pods", "eviction", "p")),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", {}, ("get", "", "ns", "pods", "log", "p")),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "1"}, ("watch", "", "ns", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "false"}, ("list", "", "ns", "pods", "", "")),
        ("GET", "/api/v1/watch/namespaces/ns/pods", {}, ("watch", "", "ns", "pods", "", "")),
        ("GET", "/api/v1/pods", {"fieldSelector": "metadata.name=x"}, ("list", "", "", "pods", "", "x")),
        ("GET", "/api/v1/pods", {"fieldSelector": "spec.nodeName=n1"}, ("list", "", "", "pods", "", "")),
        ("DELETE", "/apis/batch/v1/namespaces/ns/jobs", {},
         ("deletecollection", "batch", "ns", "jobs", "", "")),
        ("DELETE", "/apis/batch/v1/namespaces/ns/jobs/j", {}, ("delete", "batch", "ns", "jobs", "", "j")),
        ("PUT", "/apis/apps/v1/namespaces/ns/deployments/d/scale", {},
         ("update", "apps", "ns", "deployments", "scale", "d")),
        ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "ns", "namespaces", "", "ns")),
        ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "", "ns", "namespaces", "finalize", "ns")),
        ("POST", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues", {},
         ("create", "kueue.x-k8s.io", "", "clusterqueues", "", "")),
        ("HEAD", "/api/v1/nodes/n1", {}, ("get", "", "", "nodes", "", "n1")),
    ],
)  # fmt: skip
def test_resource_requests_are_read_as_the_apiserver_reads_them(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    a = attrs(method, path, query)
    assert a.resource_request
    assert (a.verb, a.api_group, a.namespace, a.resource, a.subresource, a.name) == expected


@pytest.mark.parametrize(
    "path", ["/version", "/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/readyz"]
)
def test_discovery_and_health_are_non_resource_requests(path: str) -> None:
    a = attrs("GET", path)
    assert not a.resource_request and a.verb == "get" and a.path == path


def rule(
    verbs: list[str], groups: list[str] | None = None, resources: list[str] | None = None, **extra: Any
) -> Obj:
    out: Obj = {"verbs": verbs, **extra}
    if groups is not None:
        out["apiGroups"] = groups
    if resources is not None:
        out["resources"] = resources
    return out


def test_rules_match_verbs_groups_resources_and_subresources_exactly() -> None:
    patch_node = attrs("PATCH", "/api/v1/nodes/n1")
    assert rule_allows(patch_node, rule(["patch"], [""], ["nodes"]))
    assert rule_allows(patch_node, rule(["*"], ["*"], ["*"]))
    assert not rule_allows(patch_node, rule(["get"], [""], ["nodes"]))
    assert not rule_allows(patch_node, rule(["patch"], ["apps"], ["nodes"]))  # "" is the core group
    assert not rule_allows(patch_node, rule(["patch"], [""], ["nodes/status"]))
    evict = attrs("POST", "/api/v1/namespaces/ns/pods/p/eviction")
    assert not rule_allows(evict, rule(["create"], [""], ["pods"]))  # a subresource is its own resource
    assert rule_allows(evict, rule(["create"], [""], ["pods/eviction"]))
    assert not rule_allows(evict, rule(["create"], [""], ["pods/*"]))  # not a wildcard
    assert rule_allows(
        attrs("GET", "/apis/apps/v1/namespaces/ns/deployments/d/scale"), rule(["get"], ["apps"], ["*/scale"])
    )


def test_resource_names_restrict_named_requests_and_never_match_lists_or_creates() -> None:
    named = rule(
        ["get", "list", "create", "patch"], ["kueue.x-k8s.io"], ["clusterqueues"], resourceNames=["q1"]
    )
    assert rule_allows(attrs("GET", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues/q1"), named)
    assert not rule_allows(attrs("GET", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues/q2"), named)
    assert not rule_allows(attrs("GET", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues"), named)
    assert not rule_allows(attrs("POST", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues"), named)
    # ... unless the list is narrowed to that name with a field selector, as kubectl get NAME -w does.
    pinned = attrs("GET", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues", {"fieldSelector": "metadata.name=q1"})
    assert rule_allows(pinned, named)


def test_non_resource_urls_match_exactly_or_by_prefix() -> None:
    urls = rule(["get"], nonResourceURLs=["/version", "/apis/*"])
    assert rule_allows(attrs("GET", "/version"), urls)
    assert rule_allows(attrs("GET", "/apis/apps/v1"), urls)
    assert not rule_allows(attrs("GET", "/apis"), urls)  # "/apis/*" is the prefix "/apis/"
    assert not rule_allows(attrs("GET", "/readyz"), urls)
    assert not rule_allows(attrs("POST", "/version"), urls)  # the verb is the lowercase method
    assert not rule_allows(attrs("GET", "/api/v1/nodes"), urls)  # a URL rule allows no resource


def store_with(*objects: Obj) -> InMemoryStore:
    store = InMemoryStore()
    plural = {
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "ServiceAccount": "serviceaccounts",
    }
    for obj in objects:
        store.create(plural[obj["kind"]], {**obj, "metadata": dict(obj["metadata"])})
    return store


def cluster_role(name: str, *rules: Obj) -> Obj:
    return {"kind": "ClusterRole", "metadata": {"name": name}, "rules": list(rules)}


def binding(
    kind: str, name: str, ref_kind: str, ref: str, subjects: list[Obj], namespace: str | None = None
) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta, "roleRef": {"kind": ref_kind, "name": ref}, "subjects": subjects}


SA = {"kind": "ServiceAccount", "name": "pitstop-worker", "namespace": "pitstop"}


def test_a_cluster_role_binding_grants_everywhere_and_a_role_binding_only_in_its_namespace() -> None:
    store = store_with(
        cluster_role("nodes", rule(["patch"], [""], ["nodes"])),
        cluster_role(
            "jobs", rule(["create"], ["batch"], ["jobs"]), rule(["get"], nonResourceURLs=["/healthz"])
        ),
        binding("ClusterRoleBinding", "nodes", "ClusterRole", "nodes", [SA]),
        binding("RoleBinding", "jobs", "ClusterRole", "jobs", [SA], namespace="probes"),
    )
    authz = RbacAuthorizer(store)
    assert authz.authorize(attrs("PATCH", "/api/v1/nodes/n1")).allowed
    assert authz.authorize(attrs("POST", "/apis/batch/v1/namespaces/probes/jobs")).allowed
    assert not authz.authorize(attrs("POST", "/apis/batch/v1/namespaces/other/jobs")).allowed
    assert not authz.authorize(attrs("POST", "/apis/batch/v1/jobs")).allowed  # cluster scope
    assert not authz.authorize(attrs("GET", "/healthz")).allowed  # URL rules only via cluster bindings
    other = service_account_user("pitstop", "someone-else")
    assert not authz.authorize(attrs("PATCH", "/api/v1/nodes/n1", user=other)).allowed


def test_subjects_users_groups_and_service_accounts_of_the_bindings_namespace() -> None:
    role = cluster_role("r", rule(["get"], [""], ["pods"]))
    in_ns = {"kind": "ServiceAccount", "name": "pitstop-worker"}  # namespace left out: the binding's own
    store = store_with(
        role,
        binding("RoleBinding", "b", "ClusterRole", "r", [in_ns], namespace="pitstop"),
        binding("ClusterRoleBinding", "u", "ClusterRole", "r", [{"kind": "User", "name": "alice"}]),
        binding("ClusterRoleBinding", "g", "ClusterRole", "r", [{"kind": "Group", "name": "ops"}]),
    )
    authz = RbacAuthorizer(store)
    assert authz.authorize(attrs("GET", "/api/v1/namespaces/pitstop/pods/p")).allowed
    assert not authz.authorize(attrs("GET", "/api/v1/namespaces/default/pods/p")).allowed
    assert authz.authorize(attrs("GET", "/api/v1/pods/p", user=UserInfo("alice"))).allowed
    assert authz.authorize(attrs("GET", "/api/v1/pods/p", user=UserInfo("bob", ("ops",)))).allowed
    assert not authz.authorize(attrs("GET", "/api/v1/pods/p", user=UserInfo("ops"))).allowed


def test_a_binding_to_a_missing_role_says_so_in_the_reason() -> None:
    store = store_with(
        binding("ClusterRoleBinding", "a", "ClusterRole", "gone", [SA]),
        binding("RoleBinding", "b", "Role", "gone-too", [SA], namespace="ns"),
    )
    decision = RbacAuthorizer(store).authorize(attrs("GET", "/api/v1/namespaces/ns/pods/p"))
    assert not decision.allowed
    assert decision.reason == (
        'RBAC: [clusterrole.rbac.authorization.k8s.io "gone" not found, '
        'role.rbac.authorization.k8s.io "gone-too" not found]'
    )
    one = RbacAuthorizer(store).authorize(attrs("GET", "/api/v1/nodes/n1"))
    assert one.reason == 'RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found'


def test_forbidden_has_the_apiservers_message_and_details() -> None:
    user = 'User "system:serviceaccount:pitstop:pitstop-worker"'
    cases = {
        ("PATCH", "/api/v1/nodes/n1"): (
            f'nodes "n1" is forbidden: {user} cannot patch resource "nodes" in API group "" '
            "at the cluster scope",
            {"name": "n1", "kind": "nodes"},
        ),
        ("GET", "/api/v1/namespaces/ns/pods"): (
            f'pods is forbidden: {user} cannot list resource "pods" in API group "" in the namespace "ns"',
            {"kind": "pods"},
        ),
        ("POST", "/api/v1/namespaces/ns/pods/p/eviction"): (
            f'pods "p" is forbidden: {user} cannot create resource "pods/eviction" in API group "" '
            'in the namespace "ns"',
            {"name": "p", "kind": "pods"},
        ),
        ("GET", "/apis/batch/v1/namespaces/ns/jobs/j"): (
            f'jobs.batch "j" is forbidden: {user} cannot get resource "jobs" in API group "batch" '
            'in the namespace "ns"',
            {"name": "j", "group": "batch", "kind": "jobs"},
        ),
        ("GET", "/version"): (f'forbidden: {user} cannot get path "/version"', {}),
    }
    for (method, path), (message, details) in cases.items():
        error = forbidden(attrs(method, path))
        assert (error.code, error.reason, error.message, error.details) == (
            403,
            "Forbidden",
            message,
            details,
        )
    assert forbidden(attrs("GET", "/version"), "RBAC: x").message.endswith('"/version": RBAC: x')
    assert "&lt;" in forbidden(attrs("GET", "/<script>")).message  # no HTML in error text


def test_the_bootstrap_policy_lets_any_authenticated_user_discover_and_the_masters_do_anything() -> None:
    store = store_with(*bootstrap_objects())
    authz = RbacAuthorizer(store)
    for path in ("/version", "/api", "/api/v1", "/apis", "/apis/apps/v1", "/readyz", "/openapi/v3"):
        assert authz.authorize(attrs("GET", path)).allowed, path
    assert not authz.authorize(attrs("GET", "/api/v1/nodes")).allowed
    assert authz.authorize(attrs("DELETE", "/api/v1/namespaces/x/secrets/y", user=ADMIN)).allowed
    assert authz.authorize(
        attrs("GET", "/version", user=UserInfo("anonymous", ("system:unauthenticated",)))
    ).allowed


# --- policy files and tokens ----------------------------------------------------------------------


def test_policy_files_give_namespaces_first_and_bindings_last_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: b, namespace: ns}\n"
        "roleRef: {kind: ClusterRole, name: r}\nsubjects: []\n---\n"
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: worker, namespace: pitstop}\n---\n"
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}\nrules: []\n"
    )
    (tmp_path / "b.yml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n")
    (tmp_path / "notes.txt").write_text("ignored")
    assert [o["kind"] for o in load_policy([tmp_path])] == ["Namespace", "ClusterRole", "RoleBinding"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (RBAC + "kind: Role\nmetadata: {name: r}\nrules: []\n", "names no metadata.namespace"),
        (RBAC + "kind: ClusterRoleBinding\nmetadata: {name: b}\nroleRef: {kind: Role, name: r}\n",
         "can only refer to a ClusterRole"),
        (RBAC + "kind: RoleBinding\nmetadata: {name: b, namespace: n}\n", "needs a roleRef"),
        (RBAC + "kind: ClusterRole\nmetadata: {}\n", "without metadata.name"),
        ("kind: [\n", "cannot be read"),
    ],
)  # fmt: skip
def test_a_policy_file_the_cluster_cannot_take_is_refused_naming_the_file(
    tmp_path: Path, text: str, error: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError, match=error) as refused:
        load_policy([path])
    assert str(path) in str(refused.value)
    with pytest.raises(PolicyError, match="does not exist"):
        load_policy([tmp_path / "missing.yaml"])


def test_tokens_map_to_users_and_anything_else_is_401() -> None:
    store = store_with(
        {"kind": "ServiceAccount", "metadata": {"name": "pitstop-worker", "namespace": "pitstop"}}
    )
    authn = TokenAuthenticator(
        store, "admin-token", {"sa-token": ("pitstop", "pitstop-worker"), "old": ("pitstop", "gone")}
    )
    assert authn.user("Bearer admin-token") == ADMIN
    assert authn.user("bearer  sa-token ") == WORKER
    assert WORKER.groups == (
        "system:serviceaccounts",
        "system:serviceaccounts:pitstop",
        "system:authenticated",
    )
    for header in (None, "", "Bearer", "Basic sa-token", "Bearer nope", "Bearer old"):
        with pytest.raises(ApiError) as refused:
            authn.user(header)
        assert refused.value.code == 401 and refused.value.message == "Unauthorized"


def test_access_control_records_each_denial() -> None:
    store = store_with(
        {"kind": "ServiceAccount", "metadata": {"name": "pitstop-worker", "namespace": "pitstop"}},
        *bootstrap_objects(),
    )
    access = AccessControl(
        TokenAuthenticator(store, "t", {"sa": ("pitstop", "pitstop-worker")}), RbacAuthorizer(store)
    )
    access.check("GET", "/version", {}, "Bearer sa")
    with pytest.raises(ApiError) as refused:
        access.check("PATCH", "/api/v1/nodes/n1", {}, "Bearer sa")
    assert refused.value.code == 403
    [denial] = access.denials()
    assert (denial.user, denial.request) == (WORKER.name, "patch nodes n1")
    assert denial.message == refused.value.message
