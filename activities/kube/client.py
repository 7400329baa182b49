"""The Kubernetes client the kube modules share: the official `kubernetes` ApiClient for the
cluster the inventory names, reached the way the worker policy says (a kubeconfig and context
the worker holds, or in-cluster config; never a path from the inventory), cached per worker
process, and a thin JSON layer over it. A kubeconfig whose user runs an `exec` or
`auth-provider` plugin is refused before the client reads it unless the policy allows that
cluster to (`pitstop.policy.clusters`).

Objects travel as the apiserver serves them (plain dicts, camelCase): the modules patch
annotations, taints and custom resources (Kueue) that typed models would only get in the way
of, and pitstop's pure logic (`pitstop.kube`) reads the same shapes the simulator stores.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Literal
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import KubeConfigLoader

from pitstop.kube.names import check_api_version, check_name
from pitstop.policy.clusters import checked_kubeconfig, cluster_rule
from pitstop.policy.effective import ClusterRule
from pitstop.runbook.inventory import ClusterConfig

Obj = dict[str, Any]
PatchType = Literal["merge", "strategic", "json"]
PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}
# (connect, read) seconds for one request; long waits are loops of short requests.
REQUEST_TIMEOUT = (10.0, 60.0)
LIST_PAGE = 500


class KubeConfigError(Exception):
    """The cluster block cannot be turned into a client (missing kubeconfig, unknown context)."""


class Unreachable(Exception):
    """No HTTP answer from the API server (refused, reset, timed out): transient."""


class ApiStatus(Exception):
    """A non-2xx answer, with the apiserver's Status fields."""

    def __init__(self, status: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details or {}

    @property
    def causes(self) -> list[Obj]:
        return [c for c in self.details.get("causes") or [] if isinstance(c, dict)]

    @classmethod
    def from_body(cls, status: int, body: bytes | str | None, http_reason: str = "") -> ApiStatus:
        text = body.decode(errors="replace") if isinstance(body, bytes) else (body or "")
        try:
            data = json.loads(text) if text else {}
        except json.JSONDecodeError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        message = str(data.get("message") or text.strip()[:500] or http_reason or "no message")
        reason = str(data.get("reason") or http_reason or "Unknown")
        details = data.get("details") if isinstance(data.get("details"), dict) else None
        return cls(status, reason, message, details)


# --- client cache -----------------------------------------------------------------------------

_CACHE: dict[tuple[Any, ...], Any] = {}
_LOCK = threading.Lock()


def api_client(cluster: ClusterConfig | None, what: str = "kube") -> Any:
    """A cached `kubernetes.client.ApiClient` for the inventory's cluster, as the worker policy
    reaches it (thread-safe; one per cluster, kubeconfig version and context).

    Raises a PolicyViolation for a cluster the worker does not know or whose kubeconfig runs
    programs without `allow_exec`, and KubeConfigError for a kubeconfig the client rejects.
    """
    rule = cluster_rule(cluster.name if cluster else None, what)
    if rule.in_cluster:
        key: tuple[Any, ...] = (rule.name, "in-cluster")
        data: dict[str, Any] | None = None
    else:
        data = checked_kubeconfig(rule, what)
        digest = json.dumps(data, sort_keys=True, default=str)
        key = (rule.name, str(rule.kubeconfig), rule.context, rule.allow_exec, digest)
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
        made = _build(rule, data)
        # A rewritten kubeconfig replaces the client made from its previous version.
        for stale in [k for k in _CACHE if k[0] == rule.name]:
            _CACHE.pop(stale).close()
        _CACHE[key] = made
        return made


def _build(rule: ClusterRule, data: dict[str, Any] | None) -> Any:
    configuration = k8s.Configuration()
    try:
        if data is None:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            # The data already checked (never the file again), relative paths from its directory.
            assert rule.kubeconfig is not None
            loader = KubeConfigLoader(  # type: ignore[no-untyped-call]
                config_dict=data,
                active_context=rule.context,
                config_base_path=str(rule.kubeconfig.parent),
            )
            loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, ValueError) as exc:
        where = "in-cluster config" if data is None else f"kubeconfig {rule.kubeconfig}"
        context = f" (context {rule.context!r})" if rule.context else ""
        raise KubeConfigError(f"cluster {rule.name!r}: {where}{context} cannot be used: {exc}") from None
    # Transient failures are the caller's to retry (Temporal's retry policy, or a module's
    # own wait loop); urllib3 only retries a refused connection quickly, as a browser would.
    configuration.retries = urllib3.Retry(total=2, connect=2, read=0, status=0, backoff_factor=0.2)
    return k8s.ApiClient(configuration)


# --- JSON over the ApiClient ------------------------------------------------------------------


class Kube:
    """Requests against one cluster; raises ApiStatus for non-2xx answers, Unreachable when the
    server does not answer."""

    def __init__(self, api: Any, name: str = "cluster") -> None:
        self.api = api
        self.name = name

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | None] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        raw: bool = False,
        accept: str | None = None,
    ) -> Any:
        headers = {"Accept": accept or ("application/json" if not raw else "*/*")}
        if body is not None:
            headers["Content-Type"] = content_type
        params = [(k, str(v)) for k, v in (query or {}).items() if v is not None]
        try:
            method_, url, header_params, body_, _ = self.api.param_serialize(
                method=method,
                resource_path=path,
                query_params=params,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(method_, url, header_params, body_, _request_timeout=REQUEST_TIMEOUT)
            data = response.read()
        except ApiException as exc:
            # The REST layer reports TLS and proxy failures as status 0.
            if not exc.status:
                raise Unreachable(f"cannot reach the Kubernetes API at {self.server}: {exc.reason}") from None
            raise ApiStatus.from_body(int(exc.status), exc.body, str(exc.reason or "")) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unreachable(f"cannot reach the Kubernetes API at {self.server}: {_reason(exc)}") from None
        if not 200 <= response.status <= 299:
            raise ApiStatus.from_body(int(response.status), data, str(getattr(response, "reason", "") or ""))
        if raw:
            return data.decode(errors="replace") if isinstance(data, bytes) else str(data or "")
        if not data:
            return {}
        return json.loads(data)

    # --- verbs ----------------------------------------------------------------------------------

    def get(self, path: str, **query: str | int | None) -> Obj:
        result: Obj = self.request("GET", path, query=query)
        return result

    def get_or_none(self, path: str) -> Obj | None:
        try:
            return self.get(path)
        except ApiStatus as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
    ) -> list[Obj]:
        """Every item (following `continue`), or the first `limit` items."""
        items: list[Obj] = []
        for item in self.iterate(path, label_selector=label_selector, field_selector=field_selector):
            items.append(item)
            if limit is not None and len(items) >= limit:
                break
        return items

    def iterate(
        self, path: str, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> Iterator[Obj]:
        token: str | None = None
        while True:
            page = self.get(
                path,
                labelSelector=label_selector or None,
                fieldSelector=field_selector or None,
                limit=LIST_PAGE,
                **{"continue": token},
            )
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return

    def patch(
        self,
        path: str,
        patch: Any,
        patch_type: PatchType = "merge",
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> Obj:
        result: Obj = self.request(
            "PATCH",
            path,
            query={"dryRun": "All" if dry_run else None, "fieldManager": field_manager},
            body=patch,
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )
        return result

    def server_side_apply(
        self, path: str, obj: Obj, *, field_manager: str, force: bool, dry_run: bool = False
    ) -> Obj:
        """PATCH application/apply-patch+yaml, as `kubectl apply --server-side` sends it (JSON is
        YAML; sent as text so the client's serializer leaves it alone)."""
        result: Obj = self.request(
            "PATCH",
            path,
            query={
                "fieldManager": field_manager,
                "force": "true" if force else None,
                "dryRun": "All" if dry_run else None,
            },
            body=json.dumps(obj, separators=(",", ":")),
            content_type="application/apply-patch+yaml",
        )
        return result

    def post(self, path: str, body: Obj, *, dry_run: bool = False, field_manager: str | None = None) -> Obj:
        query = {"dryRun": "All" if dry_run else None, "fieldManager": field_manager}
        result: Obj = self.request("POST", path, query=query, body=body)
        return result

    def delete(self, path: str, body: Obj | None = None) -> Obj:
        result: Obj = self.request("DELETE", path, body=body)
        return result

    def table(self, path: str, **query: str | int | None) -> Obj:
        """A list as the server prints it (`kubectl get`'s columns, meta.k8s.io/v1 Table) with
        `includeObject=None`: for Secrets, name, type and the number of keys, never the data."""
        result: Obj = self.request(
            "GET",
            path,
            query={**query, "includeObject": "None"},
            accept="application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        return result

    def text(self, path: str, **query: str | int | None) -> str:
        result: str = self.request("GET", path, query=query, raw=True)
        return result

    def serves_group(self, group: str) -> bool:
        """Whether the apiserver serves an API group (e.g. kueue.x-k8s.io)."""
        try:
            self.get(f"/apis/{group}")
        except ApiStatus as exc:
            if exc.status == 404:
                return False
            raise
        return True


def _reason(exc: BaseException) -> str:
    inner = getattr(exc, "reason", None)
    text = str(inner or exc)
    for marker in ("Connection refused", "timed out", "Name or service not known", "Connection reset"):
        if marker in text:
            return marker.lower()
    return text


# --- paths ------------------------------------------------------------------------------------
#
# Every name that goes into a request path passes `segment`: checked against the rule the
# apiserver applies to that kind of name (so `n1/../../namespaces/default/secrets/x` is refused
# as a node name before any request, instead of being normalised by the HTTP stack into another
# resource's path), then percent-encoded. InvalidName becomes InvalidArgs in `common`.

NameRule = Literal["label", "subdomain", "segment"]


def segment(value: str, what: str, rule: NameRule = "subdomain") -> str:
    """`value` as one path segment: refused (InvalidName) unless valid as `what` under `rule`
    (namespaces: DNS label; nodes, pods, Jobs, ClusterQueues: DNS subdomain; other kinds:
    a path segment name), then URL-encoded."""
    return quote(check_name(str(value), what, rule), safe="")


def api_base(api_version: str) -> str:
    """`/api/v1` or `/apis/<group>/<version>` for a checked apiVersion."""
    check_api_version(api_version)
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


def namespaced(base: str, plural: str, namespace: str | None, name: str | None = None) -> str:
    """`<base>/[namespaces/<ns>/]<plural>[/<name>]` with both names checked and encoded (names of
    arbitrary kinds follow the path-segment rule; the apiserver checks the kind's own)."""
    where = (
        f"{base}/namespaces/{segment(namespace, 'namespace', 'label')}/{plural}"
        if namespace
        else f"{base}/{plural}"
    )
    return f"{where}/{segment(name, 'object name', 'segment')}" if name else where


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{segment(name, 'node name')}"


def pods_path(namespace: str | None = None) -> str:
    """Pods of one namespace, or of every namespace (None); an empty namespace is refused."""
    if namespace is None:
        return "/api/v1/pods"
    return f"/api/v1/namespaces/{segment(namespace, 'namespace', 'label')}/pods"


def pod_path(namespace: str, name: str) -> str:
    return f"{pods_path(namespace)}/{segment(name, 'pod name')}"


def jobs_path(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{segment(namespace, 'namespace', 'label')}/jobs"


def job_path(namespace: str, name: str) -> str:
    return f"{jobs_path(namespace)}/{segment(name, 'Job name')}"


def pdbs_path(namespace: str | None = None) -> str:
    base = "/apis/policy/v1"
    if namespace is None:
        return f"{base}/poddisruptionbudgets"
    return f"{base}/namespaces/{segment(namespace, 'namespace', 'label')}/poddisruptionbudgets"


KUEUE_GROUP = "kueue.x-k8s.io"


def cluster_queue_path(name: str | None = None) -> str:
    base = f"/apis/{KUEUE_GROUP}/v1beta1/clusterqueues"
    return f"{base}/{segment(name, 'ClusterQueue name')}" if name else base
