"""Kubernetes RBAC as the apiserver applies it, for a rehearsal cluster started with `rbac`.

So that a test fails when a module calls an API its ServiceAccount is not granted, the rehearsal
cluster can authorize every request the way a real apiserver with `--authorization-mode=RBAC`
does, from the Roles, ClusterRoles and bindings it stores:

- Request attributes come from the path as k8s.io/apiserver's `RequestInfoFactory` derives
  them: `/api/v1/...` and `/apis/<group>/<version>/...` with at least one more segment are
  resource requests (verb from the method: get/list/watch/create/update/patch/delete/
  deletecollection; namespace, resource, name, subresource from the segments; a list or watch
  narrowed by `fieldSelector=metadata.name=x` names `x`); everything else (`/version`, `/api`,
  `/apis/<group>/<version>`, `/readyz`) is a non-resource request whose verb is the lowercase
  HTTP method.
- A rule allows a resource request when its `verbs`, `apiGroups` (`""` is the core group),
  `resources` (`pods`, `pods/eviction`, `*/scale`, `*`) and `resourceNames` (empty: any name;
  otherwise the request must name one of them, so a list or create never matches) all match;
  a non-resource request when its `verbs` and `nonResourceURLs` (exact, or a prefix ending in
  `*`) match.
- ClusterRoleBindings grant their ClusterRole's rules at the cluster scope and in every
  namespace; RoleBindings grant their Role's or ClusterRole's rules in their own namespace
  only (never non-resource URLs). Subjects are Users, Groups and ServiceAccounts
  (`system:serviceaccount:<namespace>:<name>`).
- A denial is the apiserver's 403 `Forbidden` Status, e.g. `nodes "n1" is forbidden: User
  "system:serviceaccount:pitstop:pitstop-worker" cannot patch resource "nodes" in API group ""
  at the cluster scope`; a binding whose role does not exist adds `: RBAC: clusterrole.rbac.
  authorization.k8s.io "x" not found`, as the real authorizer does.

Not modelled: aggregated ClusterRoles (`aggregationRule`), the escalation check on writes of
RBAC objects, impersonation, and authorizers other than RBAC (Node, webhooks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pitstop_sim.errors import ApiError
from pitstop_sim.store import ObjectStore

Obj = dict[str, Any]

RBAC_GROUP = "rbac.authorization.k8s.io"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
# Namespace subresources: `/api/v1/namespaces/x/status` is namespace x's status, not a resource.
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
SPECIAL_VERBS = frozenset({"proxy", "watch"})
METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
# The apiserver avoids error text that looks like HTML; quotes are left alone.
_SANITIZE = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()


def service_account_user(namespace: str, name: str) -> UserInfo:
    """The user a ServiceAccount's token authenticates as, with the groups the apiserver adds."""
    return UserInfo(
        f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )


@dataclass(frozen=True)
class RequestAttributes:
    """What the authorizer decides on (k8s.io/apiserver `authorizer.Attributes`)."""

    user: UserInfo
    verb: str
    path: str
    resource_request: bool
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def describe(self) -> str:
        """`patch nodes/n1`, `create pods/eviction training/p1`, `get /version`: for denial logs."""
        if not self.resource_request:
            return f"{self.verb} {self.path}"
        group = f".{self.api_group}" if self.api_group else ""
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.verb} {self.combined_resource}{group} {where}{self.name}".rstrip()


def _field_selector_name(selector: str | None) -> str:
    """The name a field selector pins (`metadata.name=x`), as the apiserver uses it for authz."""
    for term in (selector or "").split(","):
        key, sep, value = term.partition("==") if "==" in term else term.partition("=")
        if sep and not key.endswith("!") and key.strip() == "metadata.name":
            value = value.strip()
            if value and value not in (".", "..") and "/" not in value and "%" not in value:
                return value
    return ""


def request_attributes(method: str, path: str, query: Mapping[str, str], user: UserInfo) -> RequestAttributes:
    """The attributes of one HTTP request, following `RequestInfoFactory.NewRequestInfo`."""
    verb = method.lower()
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return RequestAttributes(user, verb, path, False)
    prefix, rest = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(rest) < 3:
            return RequestAttributes(user, verb, path, False)
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    if rest and rest[0] in SPECIAL_VERBS and len(rest) >= 2:
        verb, rest = rest[0], rest[1:]
    else:
        verb = METHOD_VERBS.get(method.upper(), "")
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 and verb != "proxy" else ""
    if not name and verb == "get":
        watch = query.get("watch", "").lower() not in ("", "false", "0")
        verb = "watch" if watch else "list"
        name = _field_selector_name(query.get("fieldSelector"))
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestAttributes(user, verb, path, True, group, version, namespace, resource, subresource, name)


# --- rules ----------------------------------------------------------------------------------------


def _strings(rule: Obj, key: str) -> list[str]:
    values = rule.get(key) or []
    return [str(v) for v in values] if isinstance(values, list) else []


def _resource_matches(resources: list[str], combined: str, subresource: str) -> bool:
    for resource in resources:
        if resource in ("*", combined):
            return True
        # `*/scale` matches the scale subresource of every resource; `pods/*` is not a wildcard.
        if subresource and resource == f"*/{subresource}":
            return True
    return False


def _url_matches(urls: list[str], path: str) -> bool:
    for url in urls:
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(attrs: RequestAttributes, rule: Obj) -> bool:
    """Whether one PolicyRule allows the request (rbac/v1 `RuleAllows`)."""
    verbs = _strings(rule, "verbs")
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.resource_request:
        return _url_matches(_strings(rule, "nonResourceURLs"), attrs.path)
    groups = _strings(rule, "apiGroups")
    if "*" not in groups and attrs.api_group not in groups:
        return False
    if not _resource_matches(_strings(rule, "resources"), attrs.combined_resource, attrs.subresource):
        return False
    names = _strings(rule, "resourceNames")
    return not names or attrs.name in names


def subject_applies(subject: Obj, user: UserInfo, binding_namespace: str) -> bool:
    kind = subject.get("kind")
    name = str(subject.get("name") or "")
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        # A RoleBinding may leave out the ServiceAccount's namespace: its own is meant.
        namespace = str(subject.get("namespace") or binding_namespace)
        return bool(namespace) and user.name == f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"
    return False


# --- the authorizer -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


def _aggregate(errors: list[str]) -> str:
    # k8s.io/apimachinery's error aggregate: one error as is, several as a bracketed list.
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


class RbacAuthorizer:
    """Decides from the Roles, ClusterRoles and bindings in the store, read at each request (a
    rule changed through the API applies to the next request, as on a real apiserver)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def _rules(self, ref: Obj, namespace: str, errors: list[str]) -> list[Obj]:
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "ClusterRole":
            role = self.store.get("clusterroles", None, name)
            missing = f'clusterrole.{RBAC_GROUP} "{name}" not found'
        elif kind == "Role" and namespace:
            role = self.store.get("roles", namespace, name)
            missing = f'role.{RBAC_GROUP} "{name}" not found'
        else:
            errors.append(f'unsupported role reference kind: "{kind}"')
            return []
        if role is None:
            errors.append(missing)
            return []
        rules = role.get("rules") or []
        return [r for r in rules if isinstance(r, dict)]

    def _bindings(self, storage: str, namespace: str | None) -> list[Obj]:
        return list(self.store.list(storage, namespace).items)

    def authorize(self, attrs: RequestAttributes) -> Decision:
        errors: list[str] = []
        scopes = [("clusterrolebindings", "")]
        if attrs.namespace:
            scopes.append(("rolebindings", attrs.namespace))
        for storage, namespace in scopes:
            for binding in self._bindings(storage, namespace or None):
                subjects = binding.get("subjects") or []
                if not any(subject_applies(s, attrs.user, namespace) for s in subjects):
                    continue
                rules = self._rules(binding.get("roleRef") or {}, namespace, errors)
                if any(rule_allows(attrs, r) for r in rules):
                    return Decision(True)
        return Decision(False, f"RBAC: {_aggregate(errors)}" if errors else "")


def _quote(text: str) -> str:
    # Go's %q for the names and paths that reach here (printable ASCII in practice).
    return json.dumps(text, ensure_ascii=False)


def forbidden_message(attrs: RequestAttributes) -> str:
    """k8s.io/apiserver responsewriters `forbiddenMessage`."""
    user = _quote(attrs.user.name)
    if not attrs.resource_request:
        return f"User {user} cannot {attrs.verb} path {_quote(attrs.path)}"
    resource = _quote(attrs.combined_resource)
    group = _quote(attrs.api_group)
    if attrs.namespace:
        return (
            f"User {user} cannot {attrs.verb} resource {resource} in API group {group} "
            f"in the namespace {_quote(attrs.namespace)}"
        )
    return f"User {user} cannot {attrs.verb} resource {resource} in API group {group} at the cluster scope"


def forbidden(attrs: RequestAttributes, reason: str = "") -> ApiError:
    """The 403 the apiserver answers (`responsewriters.Forbidden` + `apierrors.NewForbidden`)."""
    text = forbidden_message(attrs).translate(_SANITIZE)
    if reason:
        text = f"{text}: {reason}"
    group = attrs.api_group if attrs.resource_request else ""
    resource = attrs.resource if attrs.resource_request else ""
    name = attrs.name if attrs.resource_request else ""
    qualified = f"{resource}.{group}" if group else resource
    if not qualified:
        message = f"forbidden: {text}"
    elif name:
        message = f"{qualified} {_quote(name)} is forbidden: {text}"
    else:
        message = f"{qualified} is forbidden: {text}"
    details: Obj = {k: v for k, v in (("name", name), ("group", group), ("kind", resource)) if v}
    return ApiError(403, "Forbidden", message, details)
