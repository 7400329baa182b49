"""Who may call the rehearsal cluster's API when it enforces RBAC: bearer tokens mapped to users
(authentication), then the RBAC authorizer, then the request is served.

- The cluster's admin token (the one in the kubeconfig `SimCluster` writes by default) is the
  user `pitstop-sim-admin` in the group `system:masters`, which the default `cluster-admin`
  binding lets do anything: tests and the demo set up and inspect the cluster with it.
- A ServiceAccount token issued by `SimCluster` authenticates as
  `system:serviceaccount:<namespace>:<name>` with the groups `system:serviceaccounts`,
  `system:serviceaccounts:<namespace>` and `system:authenticated`, as long as that
  ServiceAccount exists (deleting it revokes the token, as on a real cluster).
- No token, or a token nobody issued: 401 Unauthorized (anonymous requests are off, as with
  `--anonymous-auth=false`).

Every denial is kept (`denials`), so a test can assert that a whole run made none.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from pitstop_sim.errors import unauthorized
from pitstop_sim.rbac import RbacAuthorizer, UserInfo, forbidden, request_attributes, service_account_user
from pitstop_sim.store import ObjectStore

ADMIN = UserInfo("pitstop-sim-admin", ("system:masters", "system:authenticated"))


@dataclass(frozen=True)
class Denial:
    """One request the authorizer refused: who, what (`patch nodes gpu-node-001`), the message."""

    user: str
    request: str
    message: str


class TokenAuthenticator:
    def __init__(
        self, store: ObjectStore, admin_token: str, service_accounts: Mapping[str, tuple[str, str]]
    ) -> None:
        self.store = store
        self.admin_token = admin_token
        self.service_accounts = dict(service_accounts)

    def user(self, authorization: str | None) -> UserInfo:
        """The user a request's `Authorization` header authenticates, or ApiError 401."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized()
        if token == self.admin_token:
            return ADMIN
        account = self.service_accounts.get(token)
        if account is None or self.store.get("serviceaccounts", account[0], account[1]) is None:
            raise unauthorized()
        return service_account_user(*account)


class AccessControl:
    """Authentication and RBAC for every API request of a cluster started with `rbac`."""

    def __init__(self, authenticator: TokenAuthenticator, authorizer: RbacAuthorizer) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self._denials: list[Denial] = []
        self._lock = threading.Lock()

    def check(self, method: str, path: str, query: Mapping[str, str], authorization: str | None) -> None:
        """Return if the request may be served; raise the apiserver's 401 or 403 otherwise."""
        user = self.authenticator.user(authorization)
        attrs = request_attributes(method, path, query, user)
        decision = self.authorizer.authorize(attrs)
        if decision.allowed:
            return
        error = forbidden(attrs, decision.reason)
        with self._lock:
            self._denials.append(Denial(user.name, attrs.describe(), error.message))
        raise error

    def denials(self) -> list[Denial]:
        with self._lock:
            return list(self._denials)
