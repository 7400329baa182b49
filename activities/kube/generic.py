"""kube.get / kube.patch: any kind the cluster serves, found through API discovery.

Objects leave these modules redacted (`pitstop.kube.redact`): a Secret's values, and Helm
release payloads, never reach the result, the diff or history.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from activities.kube.client import ApiStatus, Kube, api_base, namespaced
from activities.kube.common import kube_for, kube_module
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.kube.diff import comparable, object_diff
from pitstop.kube.redact import redact_object, redact_objects
from pitstop.module_args.kube import (
    GET,
    PATCH,
    GetArgs,
    PatchArgs,
)


@dataclass(frozen=True)
class Resource:
    base: str  # /api/v1 or /apis/<group>/<version>
    plural: str
    namespaced: bool

    def path(self, namespace: str | None, name: str | None = None) -> str:
        """Names checked and encoded (`client.segment`)."""
        return namespaced(self.base, self.plural, namespace if self.namespaced else None, name)


_DISCOVERY: dict[tuple[str, str], dict[str, Resource]] = {}
_LOCK = threading.Lock()


def resource_for(kube: Kube, api_version: str, kind: str) -> Resource:
    base = api_base(api_version)
    key = (kube.server, api_version)
    with _LOCK:
        kinds = _DISCOVERY.get(key)
    if kinds is None:
        try:
            listing = kube.get(base)
        except ApiStatus as exc:
            if exc.status == 404:
                fail(ErrorType.INVALID_ARGS, f"{kube.name} does not serve apiVersion {api_version!r}")
            raise
        kinds = {
            str(r.get("kind")): Resource(base, str(r.get("name")), bool(r.get("namespaced")))
            for r in listing.get("resources") or []
            if "/" not in str(r.get("name"))
        }
        with _LOCK:
            _DISCOVERY[key] = kinds
    found = kinds.get(kind)
    if found is None:
        served = ", ".join(sorted(kinds)) or "none"
        fail(
            ErrorType.INVALID_ARGS, f"{kube.name} serves no kind {kind!r} in {api_version} (kinds: {served})"
        )
    return found


def _label(args: GetArgs | PatchArgs, name: str | None) -> str:
    where = f"{args.namespace}/" if args.namespace else ""
    return f"{args.kind} {where}{name}" if name else f"{args.kind} objects"


@kube_module(GET)
def get(call: ModuleCall, args: GetArgs) -> ModuleResult:
    kube = kube_for(call)
    res = resource_for(kube, args.api_version, args.kind)
    if res.namespaced and args.name and not args.namespace:
        fail(ErrorType.INVALID_ARGS, f"kube.get: {args.kind} is namespaced; give `namespace` with `name`")
    if args.name:
        obj = kube.get_or_none(res.path(args.namespace, args.name))
        if obj is not None:
            obj = redact_object(obj, args.kind)
        found = [obj] if obj is not None else []
        return ModuleResult(
            msg=f"{_label(args, args.name)} {'found' if obj else 'not found'}",
            data={"resource": obj, "exists": obj is not None, "resources": found},
        )
    items = kube.list(
        res.path(args.namespace),
        label_selector=args.label_selector,
        field_selector=args.field_selector,
        limit=args.limit + 1,
    )
    truncated = len(items) > args.limit
    items = redact_objects(items[: args.limit], args.kind)
    return ModuleResult(
        msg=f"{len(items)}{'+' if truncated else ''} {_label(args, None)}",
        data={"resources": items, "count": len(items), "truncated": truncated},
    )


@kube_module(PATCH)
def patch(call: ModuleCall, args: PatchArgs) -> ModuleResult:
    if args.patch_type == "json" and not isinstance(args.patch, list):
        fail(ErrorType.INVALID_ARGS, "kube.patch: a JSON patch (patch_type: json) is a list of operations")
    if args.patch_type != "json" and isinstance(args.patch, list):
        fail(ErrorType.INVALID_ARGS, f"kube.patch: a {args.patch_type} patch is an object, not a list")
    kube = kube_for(call)
    res = resource_for(kube, args.api_version, args.kind)
    if res.namespaced and not args.namespace:
        fail(ErrorType.INVALID_ARGS, f"kube.patch: {args.kind} is namespaced; give `namespace`")
    path = res.path(args.namespace, args.name)
    label = _label(args, args.name)
    before = kube.get_or_none(path)
    if before is None:
        fail(ErrorType.PRECONDITION_FAILED, f"{label} not found in {kube.name}")
    # The server's dry run applies the patch exactly as it would (defaults, strategic lists).
    preview = kube.patch(path, args.patch, args.patch_type, dry_run=True)
    if comparable(before) == comparable(preview):
        return ModuleResult(
            msg=f"{label} already matches the patch", data={"resource": redact_object(before, args.kind)}
        )
    if call.check_mode:
        return ModuleResult(
            changed=True,
            msg=f"would patch {label}",
            diff=object_diff(before, preview, label),
            data={"resource": redact_object(preview, args.kind)},
        )
    after = kube.patch(path, args.patch, args.patch_type)
    return ModuleResult(
        changed=True,
        msg=f"patched {label}",
        diff=object_diff(before, after, label),
        data={"resource": redact_object(after, args.kind)},
    )
