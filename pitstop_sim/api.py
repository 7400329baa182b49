"""The verbs of the Kubernetes API over the object store, independent of HTTP.

`KubeApi` answers get/list/create/update/patch/delete, the Eviction, Scale, Binding and log
subresources, with the apiserver's semantics (admission, resourceVersion preconditions,
dry run, graceful pod deletion, PDB-checked eviction) and its errors. `http.py` maps HTTP
requests onto it; `SimCluster` calls it directly for in-process use.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from yaml import YAMLError, safe_load

from pitstop.kube.objects import (
    annotations_of,
    controller_of,
    is_terminating,
    meta,
    name_of,
    pod_is_finished,
    pod_is_ready,
    pod_node,
    pod_phase,
)
from pitstop.kube.selectors import selector_requirements
from pitstop_sim import admission, ssa
from pitstop_sim.clock import rfc3339
from pitstop_sim.context import SimContext
from pitstop_sim.controllers.gc import FOREGROUND_DELETION
from pitstop_sim.disruption import compute_status, pdb_selects
from pitstop_sim.errors import (
    PROPAGATION_POLICIES,
    ApiError,
    already_exists,
    bad_request,
    conflict,
    invalid,
    invalid_delete_options,
    method_not_allowed,
    namespace_not_found,
    not_found,
    precondition_failed,
    unsupported_media_type,
)
from pitstop_sim.models import PdbViolation
from pitstop_sim.objects import DEFAULT_CONTAINER_ANNOTATION, GENERATE_NAME_ATTEMPTS, redraw_suffix
from pitstop_sim.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from pitstop_sim.resources import ResourceType, crd_resource_type
from pitstop_sim.selectors import parse_field_selector, parse_label_selector, selector_string
from pitstop_sim.store import ListResult, ObjectExists, ObjectMissing, VersionConflict, clone

Obj = dict[str, Any]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
# Content type of a PATCH -> how it applies (server-side apply, apply-patch+yaml: `API.apply`).
PATCHERS: dict[str, Callable[[Any, Any], Any]] = {
    JSON_PATCH: json_patch,
    MERGE_PATCH: merge_patch,
    STRATEGIC_PATCH: strategic_merge_patch,
}

EVICTION_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


@dataclass
class ListPage:
    result: ListResult
    continue_token: str | None


def _schema(rt: ResourceType) -> ssa.Schema:
    return ssa.Schema(custom=rt.custom)


def _without_nulls(value: Any) -> Any:
    # An applied null means "not set" once the apiserver decodes it into the typed object.
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def eviction_refused(pdb_name: str, status: Obj) -> ApiError:
    """The apiserver's 429 for an eviction its PDB does not allow (kubectl drain retries these)."""
    cause = (
        f"The disruption budget {pdb_name} needs {status['desiredHealthy']} healthy pods "
        f"and has {status['currentHealthy']} currently"
    )
    return ApiError(
        429,
        "TooManyRequests",
        EVICTION_REFUSED,
        {"causes": [{"reason": "DisruptionBudget", "message": cause}]},
    )


def success_status(code: int = 200, details: Obj | None = None) -> Obj:
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if details:
        body["details"] = details
    return body


class KubeApi:
    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx

    # --- reads ----------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self.ctx.store.get(rt.storage, namespace if rt.namespaced else None, name)
        if obj is None:
            raise not_found(rt, name)
        return obj

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListPage:
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, rt)
        start_after = _decode_continue(continue_token) if continue_token else None
        result = self.ctx.store.list(
            rt.storage,
            namespace if rt.namespaced else None,
            labels=labels,
            fields=fields,
            start_after=start_after,
            limit=limit if limit and limit > 0 else None,
        )
        token = _encode_continue(result.next_key, result.resource_version) if result.next_key else None
        return ListPage(result, token)

    # --- writes ---------------------------------------------------------------------------------

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Any,
        *,
        dry_run: bool = False,
        manager: str | None = None,
        managed: builtins.list[Obj] | None = None,
    ) -> Obj:
        """`manager`: the field manager of a client's request (its fields are recorded in
        managedFields); `managed`: managedFields already computed (server-side apply)."""
        if rt.namespaced:
            in_body = (body.get("metadata") or {}).get("namespace") if isinstance(body, dict) else None
            self._require_namespace(namespace or in_body or "default", creating=True)
        obj = admission.prepare_create(rt, body, namespace, self.ctx.rng)
        obj["metadata"].pop("managedFields", None)
        if managed:
            obj["metadata"]["managedFields"] = managed
        elif manager:
            obj = ssa.update(None, obj, manager=manager, api_version=rt.api_version, schema=_schema(rt))
        if rt.kind == "Namespace" and obj["metadata"]["name"] in ("",):
            raise invalid(rt, "", [("metadata.name", "FieldValueRequired", "Required value")])
        if dry_run:
            if (
                self.ctx.store.get(rt.storage, obj["metadata"].get("namespace"), obj["metadata"]["name"])
                is not None
            ):
                raise already_exists(rt, obj["metadata"]["name"])
            obj["metadata"]["resourceVersion"] = ""
            return obj
        generated = isinstance(body, dict) and not (body.get("metadata") or {}).get("name")
        stored = self._store_new(rt, obj, retry=GENERATE_NAME_ATTEMPTS if generated else 1)
        if rt.kind == "CustomResourceDefinition":
            self._serve_crd(stored)
        self.ctx.poke()
        return stored

    def _store_new(self, rt: ResourceType, obj: Obj, *, retry: int) -> Obj:
        """Create; a name from generateName that is taken is drawn again (RetryGenerateName)."""
        for attempt in range(retry):
            try:
                return self.ctx.store.create(rt.storage, obj)
            except ObjectExists:
                if attempt + 1 == retry:
                    break
                obj["metadata"]["name"] = redraw_suffix(obj["metadata"]["name"], self.ctx.rng)
        raise already_exists(rt, obj["metadata"]["name"])

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        manager: str | None = None,
        managed: builtins.list[Obj] | None = None,
        managed_through: str = "",
    ) -> Obj:
        """`managed_through`: the subresource (`scale`) a manager's change came through."""
        old = self.get(rt, namespace, name)
        new = admission.prepare_update(rt, old, body, subresource)
        # managedFields a client leaves out are carried over; ones it sends replace the record
        # (how `kubectl apply --server-side` moves client-side ownership to itself), and `[{}]`
        # clears it, as the apiserver's field manager does.
        new_meta = new.setdefault("metadata", {})
        sent = new_meta.get("managedFields")
        if managed is not None:
            new_meta["managedFields"] = managed
        elif sent:
            try:
                new_meta["managedFields"] = ssa.checked_managed_fields(sent)
            except ValueError as exc:
                raise bad_request(str(exc)) from None
        elif "managedFields" in meta(old):
            new_meta["managedFields"] = meta(old)["managedFields"]
        if not new_meta.get("managedFields"):
            new_meta.pop("managedFields", None)
        if manager and subresource is None and managed is None:
            new = ssa.update(
                old,
                new,
                manager=manager,
                api_version=rt.api_version,
                schema=_schema(rt),
                subresource=managed_through,
            )
            if not new["metadata"].get("managedFields"):
                new["metadata"].pop("managedFields", None)
        expect = (new.get("metadata") or {}).get("resourceVersion") or None
        if expect and expect != meta(old).get("resourceVersion"):
            raise conflict(rt, name)
        if dry_run:
            return new
        if new == old:
            return old
        try:
            stored = self.ctx.store.update(rt.storage, new, expect_rv=expect)
        except VersionConflict:
            raise conflict(rt, name) from None
        if is_terminating(stored) and not (meta(stored).get("finalizers") or []) and rt.kind != "Pod":
            # The last finalizer went away: the deletion completes now.
            self._remove(rt, stored)
            return stored
        if rt.kind == "CustomResourceDefinition":
            self._serve_crd(stored)
        self.ctx.poke()
        return stored

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        body: bytes,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        manager: str | None = None,
        force: bool = False,
    ) -> Obj:
        kind = content_type.split(";")[0].strip().lower()
        if kind == APPLY_PATCH:
            if subresource is not None:
                raise method_not_allowed()
            return self.apply(rt, namespace, name, body, manager=manager, force=force, dry_run=dry_run)[0]
        patcher = PATCHERS.get(kind)
        if patcher is None:
            raise unsupported_media_type(content_type or "<none>")
        if kind == STRATEGIC_PATCH and rt.custom:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            )
        try:
            patch = json.loads(body or b"null")
        except json.JSONDecodeError as exc:
            raise bad_request(f"error decoding patch: {exc}") from None
        old = self.get(rt, namespace, name)
        current = clone(old)
        try:
            if kind != JSON_PATCH and not isinstance(patch, dict):
                raise bad_request("patch body must be a JSON object")
            patched = patcher(current, patch)
        except PatchError as exc:
            raise ApiError(
                422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
            ) from None
        if not isinstance(patched, dict):
            raise bad_request("patch must produce an object")
        rv_in_patch = (
            (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
        )
        patched.setdefault("metadata", {})["resourceVersion"] = rv_in_patch or meta(old).get(
            "resourceVersion"
        )
        return self.update(
            rt, namespace, name, patched, subresource=subresource, dry_run=dry_run, manager=manager
        )

    def apply(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: bytes,
        *,
        manager: str | None,
        force: bool,
        dry_run: bool,
    ) -> tuple[Obj, bool]:
        """Server-side apply (PATCH application/apply-patch+yaml): create or merge, owning the
        fields of the applied configuration as `manager`; 409 on fields other managers own."""
        if not manager:
            raise bad_request(
                "PATCH, application/apply-patch+yaml: fieldManager is required for apply requests"
            )
        try:
            config = safe_load((body or b"").decode())
        except (YAMLError, UnicodeDecodeError) as exc:
            raise bad_request(f"error decoding YAML: {exc}") from None
        if not isinstance(config, dict):
            raise bad_request("the body of an apply request must be an object")
        config_meta = config.get("metadata")
        if not isinstance(config_meta, dict):
            raise bad_request("metadata must be an object")
        if config_meta.get("managedFields") is not None:
            raise bad_request("metadata.managedFields must be nil")
        if config.get("apiVersion") != rt.api_version or config.get("kind") != rt.kind:
            raise bad_request(
                f"the API version and kind in the data ({config.get('apiVersion')}, {config.get('kind')}) "
                f"do not match the expected ({rt.api_version}, {rt.kind})"
            )
        if config_meta.get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({config_meta.get('name')}) does not match the name on the URL "
                f"({name})"
            )
        config = {k: v for k, v in _without_nulls(config).items() if k != "status"}
        config["metadata"] = {**config.get("metadata", {}), "name": name}
        live = self.ctx.store.get(rt.storage, namespace if rt.namespaced else None, name)
        try:
            new = ssa.apply(
                live or {},
                config,
                manager=manager,
                api_version=rt.api_version,
                force=force,
                schema=_schema(rt),
            )
        except ssa.ApplyConflict as exc:
            details = {"causes": exc.causes()}
            raise ApiError(409, "Conflict", str(exc), details) from None
        managed = new["metadata"].pop("managedFields", [])
        if live is None:
            return self.create(rt, namespace, new, dry_run=dry_run, managed=managed), True
        return self.update(rt, namespace, name, new, dry_run=dry_run, managed=managed), False

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        options: Obj | None = None,
        *,
        dry_run: bool = False,
        via_eviction: bool = False,
    ) -> Obj:
        options = options or {}
        _validate_delete_options(options)
        # DeleteOptions.dryRun in the body counts as the query's: kubectl sends it there.
        dry_run = dry_run or "All" in (options.get("dryRun") or [])
        obj = self.get(rt, namespace, name)
        # storage.Preconditions.Check: a precondition that is given (even empty) must match; the
        # UID first. A server-side dry run checks them too, then writes nothing.
        pre = options.get("preconditions") or {}
        for field, key in (("UID", "uid"), ("ResourceVersion", "resourceVersion")):
            if pre.get(key) is not None and pre[key] != meta(obj).get(key, ""):
                raise precondition_failed(rt, namespace, name, field, pre[key], meta(obj).get(key, ""))
        if dry_run:
            return obj
        if options.get("propagationPolicy") == "Orphan" or options.get("orphanDependents") is True:
            self._orphan_dependents(obj)
        if rt.kind == "Pod":
            return self._delete_pod(rt, obj, options, via_eviction)
        if rt.kind == "Namespace":
            return self._delete_namespace(rt, obj)
        if options.get("propagationPolicy") == "Foreground":
            return self._delete_foreground(rt, obj)
        if meta(obj).get("finalizers"):
            if is_terminating(obj):
                return obj
            marked = clone(obj)
            marked["metadata"]["deletionTimestamp"] = rfc3339()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            return self.ctx.store.update(rt.storage, marked)
        return self._remove(rt, obj)

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        options: Obj | None = None,
        dry_run: bool = False,
    ) -> builtins.list[Obj]:
        page = self.list(rt, namespace, label_selector=label_selector, field_selector=field_selector)
        out = []
        for obj in page.result.items:
            try:
                out.append(
                    self.delete(rt, meta(obj).get("namespace"), name_of(obj), options, dry_run=dry_run)
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return out

    # --- pods -----------------------------------------------------------------------------------

    def _delete_pod(self, rt: ResourceType, pod: Obj, options: Obj, via_eviction: bool) -> Obj:
        spec = pod.get("spec") or {}
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        covered = bool(self.pdbs_covering(pod)) if not via_eviction else False
        was_healthy = pod_is_ready(pod) and not is_terminating(pod)
        immediate = (
            grace == 0
            or not pod_node(pod)
            or pod_is_finished(pod)
            or self.ctx.scenario.timing.pod_termination_seconds <= 0
        )
        if immediate:
            result = self._remove(rt, pod)
        elif is_terminating(pod):
            result = pod
        else:
            marked = clone(pod)
            marked["metadata"]["deletionTimestamp"] = rfc3339(
                datetime.now(UTC) + timedelta(seconds=int(grace))
            )
            marked["metadata"]["deletionGracePeriodSeconds"] = int(grace)
            result = self.ctx.store.update(rt.storage, marked)
            self.ctx.poke()
        # Recorded after the pod is gone or terminating, so a drain that emptied the node counts.
        if not via_eviction:
            self.ctx.recorder.deletion(pod, forced=covered or grace == 0)
            if was_healthy and covered:
                self._check_violation(pod, via="delete")
        return result

    def evict(self, namespace: str, name: str, body: Any, *, dry_run: bool = False) -> Obj:
        """POST pods/{name}/eviction: delete the pod unless a PDB forbids it (429 DisruptionBudget)."""
        pods = self.ctx.rt("", "pods")
        if body is not None and not isinstance(body, dict):
            raise bad_request("the body of the request must be an Eviction object")
        body = body or {}
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise bad_request(f"name in URL does not match name in Eviction object ({body_name} != {name})")
        pod = self.get(pods, namespace, name)
        options = body.get("deleteOptions") or {}
        pdbs = self.pdbs_covering(pod)
        ignore_pdb = pod_is_finished(pod) or pod_phase(pod) == "Pending" or is_terminating(pod)
        if not ignore_pdb and len(pdbs) > 1:
            raise ApiError(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, "
                "which the eviction subresource does not support.",
            )
        pdb_name: str | None = None
        if pdbs and not ignore_pdb:
            pdb = pdbs[0]
            pdb_name = name_of(pdb)
            status = self.live_pdb_status(pdb)
            unhealthy_ok = not pod_is_ready(pod) and (
                (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
                or status["currentHealthy"] >= status["desiredHealthy"]
            )
            if not unhealthy_ok:
                if status["disruptionsAllowed"] <= 0:
                    self.ctx.recorder.eviction(pod, "refused", pdb_name)
                    raise eviction_refused(pdb_name, status)
                if not dry_run:
                    self._take_disruption(pdb, status, name)
        if dry_run:
            self.ctx.recorder.eviction(pod, "dry-run", pdb_name)
            return success_status(201)
        self.delete(pods, namespace, name, options, via_eviction=True)
        self.ctx.recorder.eviction(pod, "evicted", pdb_name)
        if pdbs and pod_is_ready(pod):
            self._check_violation(pod, via="eviction")
        return success_status(201)

    def pdbs_covering(self, pod: Obj) -> builtins.list[Obj]:
        ns = meta(pod).get("namespace")
        items = self.ctx.store.list("poddisruptionbudgets", ns).items
        return [pdb for pdb in items if pdb_selects(pdb, pod)]

    def live_pdb_status(self, pdb: Obj) -> Obj:
        """The PDB's status computed now from the pods it selects (what the controller converges to)."""
        ns = meta(pdb).get("namespace")
        try:
            requirements = selector_requirements((pdb.get("spec") or {}).get("selector"))
        except ValueError:
            requirements = None
        pods = (
            self.ctx.store.list("pods", ns, labels=requirements or []).items
            if requirements is not None
            else []
        )
        key = f"{ns}/{name_of(pdb)}"
        return compute_status(
            pdb,
            pods,
            self.scale_of,
            never_allow=key in self.ctx.pdbs_never_allow,
            now_ts=datetime.now(UTC).timestamp(),
        )

    def scale_of(self, pod: Obj) -> int | None:
        ref = controller_of(pod)
        if ref is None:
            return None
        ns = meta(pod).get("namespace")
        if ref.get("kind") == "ReplicaSet":
            rs = self.ctx.store.get("replicasets", ns, ref["name"])
            if rs is None:
                return None
            parent = controller_of(rs)
            if parent is not None and parent.get("kind") == "Deployment":
                deploy = self.ctx.store.get("deployments", ns, parent["name"])
                if deploy is not None:
                    return int((deploy.get("spec") or {}).get("replicas", 1))
            return int((rs.get("spec") or {}).get("replicas", 1))
        if ref.get("kind") == "StatefulSet":
            sts = self.ctx.store.get("statefulsets", ns, ref["name"])
            return int((sts.get("spec") or {}).get("replicas", 1)) if sts else None
        return None

    def _take_disruption(self, pdb: Obj, status: Obj, pod_name: str) -> None:
        updated = clone(pdb)
        new_status = clone(status)
        new_status["disruptionsAllowed"] = status["disruptionsAllowed"] - 1
        disrupted = dict(new_status.get("disruptedPods") or {})
        disrupted[pod_name] = rfc3339()
        new_status["disruptedPods"] = disrupted
        updated["status"] = new_status
        self.ctx.store.update("poddisruptionbudgets", updated)

    def _check_violation(self, pod: Obj, *, via: Any) -> None:
        for pdb in self.pdbs_covering(pod):
            status = self.live_pdb_status(pdb)
            if status["currentHealthy"] < status["desiredHealthy"]:
                self.ctx.recorder.violation(
                    PdbViolation(
                        t=round(self.ctx.clock.now(), 3),
                        pdb=f"{meta(pdb).get('namespace')}/{name_of(pdb)}",
                        pod=f"{meta(pod).get('namespace')}/{name_of(pod)}",
                        node=pod_node(pod) or None,
                        via=via,
                        current_healthy=status["currentHealthy"],
                        desired_healthy=status["desiredHealthy"],
                    )
                )

    def pod_log(
        self,
        namespace: str,
        name: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
        timestamps: bool = False,
        previous: bool = False,
    ) -> str:
        pod = self.get(self.ctx.rt("", "pods"), namespace, name)
        containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if container is None:
            default = annotations_of(pod).get(DEFAULT_CONTAINER_ANNOTATION)
            if default in containers:
                container = default
            elif len(containers) == 1:
                container = containers[0]
            else:
                raise bad_request(
                    f"a container name must be specified for pod {name}, "
                    f"choose one of: [{' '.join(map(str, containers))}]"
                )
        if container not in containers:
            raise bad_request(f"container {container} is not valid for pod {name}")
        if previous:
            raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        if pod_phase(pod) == "Pending":
            reason = "ContainerCreating" if pod_node(pod) else "PodInitializing"
            raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        text = self.ctx.logs.get(meta(pod).get("uid", ""), "")
        lines = text.splitlines(keepends=True)
        if timestamps:
            stamp = (pod.get("status") or {}).get("startTime") or rfc3339()
            stamp = stamp.replace("Z", ".000000000Z")
            lines = [f"{stamp} {line}" for line in lines]
        if tail_lines is not None and tail_lines >= 0:
            lines = lines[-tail_lines:] if tail_lines else []
        out = "".join(lines)
        if limit_bytes is not None and limit_bytes > 0:
            out = out.encode()[:limit_bytes].decode(errors="ignore")
        return out

    def bind(self, namespace: str, name: str, body: Any) -> Obj:
        pods = self.ctx.rt("", "pods")
        pod = self.get(pods, namespace, name)
        target = (body or {}).get("target") or {}
        node = target.get("name")
        if not node:
            raise invalid(pods, name, [("target.name", "FieldValueRequired", "Required value")])
        if pod_node(pod):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": '
                f'pod {name} is already assigned to node "{pod_node(pod)}"',
            )
        bound = clone(pod)
        bound["spec"]["nodeName"] = node
        self.ctx.store.update("pods", bound)
        self.ctx.poke()
        return success_status(201)

    # --- scale ------------------------------------------------------------------------------------

    def get_scale(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.get(rt, namespace, name)
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": meta(obj).get("uid"),
                "resourceVersion": meta(obj).get("resourceVersion"),
                "creationTimestamp": meta(obj).get("creationTimestamp"),
            },
            "spec": {"replicas": spec.get("replicas", 1)},
            "status": {
                "replicas": status.get("replicas", 0),
                "selector": selector_string(spec.get("selector")).replace("<none>", ""),
            },
        }

    def update_scale(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        scale: Obj,
        *,
        dry_run: bool = False,
        manager: str | None = None,
    ) -> Obj:
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise invalid(
                rt,
                name,
                [
                    (
                        "spec.replicas",
                        "FieldValueInvalid",
                        f"Invalid value: {replicas!r}: must be greater than or equal to 0",
                    )
                ],
            )
        obj = clone(self.get(rt, namespace, name))
        obj["spec"]["replicas"] = replicas
        self.update(rt, namespace, name, obj, dry_run=dry_run, manager=manager, managed_through="scale")
        return self.get_scale(rt, namespace, name)

    def patch_scale(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        body: bytes,
        *,
        dry_run: bool = False,
        manager: str | None = None,
    ) -> Obj:
        current = self.get_scale(rt, namespace, name)
        kind = content_type.split(";")[0].strip().lower()
        try:
            patch = json.loads(body or b"null")
            if kind == JSON_PATCH:
                patched = json_patch(current, patch)
            elif kind in (MERGE_PATCH, STRATEGIC_PATCH):
                patched = merge_patch(current, patch)
            else:
                raise unsupported_media_type(content_type)
        except (json.JSONDecodeError, PatchError) as exc:
            raise bad_request(f"error decoding patch: {exc}") from None
        return self.update_scale(rt, namespace, name, patched, dry_run=dry_run, manager=manager)

    # --- helpers --------------------------------------------------------------------------------

    def _require_namespace(self, namespace: str, *, creating: bool) -> None:
        ns = self.ctx.store.get("namespaces", None, namespace)
        if ns is None:
            raise namespace_not_found(namespace)
        if creating and is_terminating(ns):
            raise ApiError(
                403,
                "Forbidden",
                f"unable to create new content in namespace {namespace} because it is being terminated",
                {"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]},
            )

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        try:
            gone = self.ctx.store.delete(rt.storage, meta(obj).get("namespace"), name_of(obj))
        except ObjectMissing:
            raise not_found(rt, name_of(obj)) from None
        if rt.kind == "CustomResourceDefinition":
            for served in crd_resource_type(obj):
                self.ctx.registry.remove(served.group, served.version, served.plural)
        self.ctx.poke()
        return gone

    def _delete_foreground(self, rt: ResourceType, obj: Obj) -> Obj:
        """propagationPolicy Foreground: the object stays, with a deletionTimestamp and the
        `foregroundDeletion` finalizer, until the garbage collector has deleted the dependents
        that block it (ownerReferences with blockOwnerDeletion); then the collector removes it."""
        finalizers = list(meta(obj).get("finalizers") or [])
        if is_terminating(obj) and FOREGROUND_DELETION in finalizers:
            return obj
        marked = clone(obj)
        marked["metadata"].setdefault("deletionTimestamp", rfc3339())
        marked["metadata"].setdefault("deletionGracePeriodSeconds", 0)
        if FOREGROUND_DELETION not in finalizers:
            marked["metadata"]["finalizers"] = [*finalizers, FOREGROUND_DELETION]
        stored = self.ctx.store.update(rt.storage, marked)
        self.ctx.poke()
        return stored

    def _delete_namespace(self, rt: ResourceType, ns: Obj) -> Obj:
        if is_terminating(ns):
            return ns
        marked = clone(ns)
        marked["metadata"]["deletionTimestamp"] = rfc3339()
        marked["status"] = {"phase": "Terminating"}
        stored = self.ctx.store.update(rt.storage, marked)
        self.ctx.poke()
        return stored

    def _orphan_dependents(self, owner: Obj) -> None:
        uid = meta(owner).get("uid", "")
        for storage, dependent in self.ctx.store.dependents(uid):
            freed = clone(dependent)
            refs = [r for r in freed["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                freed["metadata"]["ownerReferences"] = refs
            else:
                freed["metadata"].pop("ownerReferences", None)
            self.ctx.store.update(storage, freed)

    def _serve_crd(self, crd: Obj) -> None:
        try:
            served = crd_resource_type(crd)
        except (KeyError, TypeError):
            return
        for rt in served:
            self.ctx.registry.add(rt)
        storage = [v["name"] for v in (crd.get("spec") or {}).get("versions") or [] if v.get("storage")]
        stored = list((crd.get("status") or {}).get("storedVersions") or [])
        if stored and storage and storage[0] not in stored:
            # A new storage version: objects written from now on are stored in it too.
            recorded = clone(crd)
            recorded["status"]["storedVersions"] = [*stored, storage[0]]
            crd = self.ctx.store.update("customresourcedefinitions", recorded)
        if served and not any(
            c.get("type") == "Established" for c in (crd.get("status") or {}).get("conditions") or []
        ):
            established = clone(crd)
            names = (crd.get("spec") or {}).get("names") or {}
            established["status"] = {
                "acceptedNames": names,
                "storedVersions": [
                    v["name"] for v in (crd.get("spec") or {}).get("versions") or [] if v.get("storage")
                ],
                "conditions": [
                    {
                        "type": "NamesAccepted",
                        "status": "True",
                        "reason": "NoConflicts",
                        "message": "no conflicts found",
                        "lastTransitionTime": rfc3339(),
                    },
                    {
                        "type": "Established",
                        "status": "True",
                        "reason": "InitialNamesAccepted",
                        "message": "the initial names have been accepted",
                        "lastTransitionTime": rfc3339(),
                    },
                ],
            }
            self.ctx.store.update("customresourcedefinitions", established)


def _encode_continue(key: str, rv: int) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": key}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> str:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded))
        return str(data["start"])
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise bad_request("continue key is not valid: invalid continue token") from None


def _validate_delete_options(options: Obj) -> None:
    """ValidateDeleteOptions, as the DELETE handler runs it before the object is looked up."""
    policy = options.get("propagationPolicy")
    causes: list[tuple[str, str, str]] = []
    if policy is not None and options.get("orphanDependents") is not None:
        causes.append(
            (
                "propagationPolicy",
                "FieldValueInvalid",
                f'Invalid value: "{policy}": orphanDependents and deletionPropagation cannot be both set',
            )
        )
    if policy is not None and policy not in PROPAGATION_POLICIES:
        supported = ", ".join(f'"{p}"' for p in (*PROPAGATION_POLICIES, "nil"))
        causes.append(
            (
                "propagationPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{policy}": supported values: {supported}',
            )
        )
    for value in options.get("dryRun") or []:
        if value != "All":
            causes.append(
                ("dryRun", "FieldValueNotSupported", f'Unsupported value: "{value}": supported values: "All"')
            )
    if causes:
        raise invalid_delete_options(causes)
