"""kube.get / kube.patch: any kind the cluster serves, found through API discovery."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from activities._args import parse_args
from activities.kube.client import ApiStatus, Kube
from activities.kube.common import fail, kube_for, kube_module
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.kube.diff import object_diff
from pitstop.module_args.kube import GetArgs, PatchArgs


@dataclass(frozen=True)
class Resource:
    base: str  # /api/v1 or /apis/<group>/<version>
    plural: str
    namespaced: bool

    def path(self, namespace: str | None, name: str | None = None) -> str:
        where = (
            f"{self.base}/namespaces/{namespace}/{self.plural}"
            if self.namespaced and namespace
            else (f"{self.base}/{self.plural}")
        )
        return f"{where}/{name}" if name else where


_DISCOVERY: dict[tuple[str, str], dict[str, Resource]] = {}
_LOCK = threading.Lock()


def resource_for(kube: Kube, api_version: str, kind: str) -> Resource:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    key = (kube.server, api_version)
    with _LOCK:
        kinds = _DISCOVERY.get(key)
    if kinds is None:
        try:
            listing = kube.get(base)
        except ApiStatus as exc:
            if exc.status == 404:
                fail("InvalidArgs", f"{kube.name} does not serve apiVersion {api_version!r}")
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
        fail("InvalidArgs", f"{kube.name} serves no kind {kind!r} in {api_version} (kinds: {served})")
    return found


def _label(args: GetArgs | PatchArgs, name: str | None) -> str:
    where = f"{args.namespace}/" if args.namespace else ""
    return f"{args.kind} {where}{name}" if name else f"{args.kind} objects"


@kube_module("kube.get")
def get(call: ModuleCall) -> ModuleResult:
    args = parse_args(GetArgs, call)
    kube = kube_for(call)
    res = resource_for(kube, args.api_version, args.kind)
    if res.namespaced and args.name and not args.namespace:
        fail("InvalidArgs", f"kube.get: {args.kind} is namespaced; give `namespace` with `name`")
    if args.name:
        obj = kube.get_or_none(res.path(args.namespace, args.name))
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
    items = items[: args.limit]
    return ModuleResult(
        msg=f"{len(items)}{'+' if truncated else ''} {_label(args, None)}",
        data={"resources": items, "count": len(items), "truncated": truncated},
    )


@kube_module("kube.patch")
def patch(call: ModuleCall) -> ModuleResult:
    args = parse_args(PatchArgs, call)
    if args.patch_type == "json" and not isinstance(args.patch, list):
        fail("InvalidArgs", "kube.patch: a JSON patch (patch_type: json) is a list of operations")
    if args.patch_type != "json" and isinstance(args.patch, list):
        fail("InvalidArgs", f"kube.patch: a {args.patch_type} patch is an object, not a list")
    kube = kube_for(call)
    res = resource_for(kube, args.api_version, args.kind)
    if res.namespaced and not args.namespace:
        fail("InvalidArgs", f"kube.patch: {args.kind} is namespaced; give `namespace`")
    path = res.path(args.namespace, args.name)
    label = _label(args, args.name)
    before = kube.get_or_none(path)
    if before is None:
        fail("PreconditionFailed", f"{label} not found in {kube.name}")
    # The server's dry run applies the patch exactly as it would (defaults, strategic lists).
    preview = kube.patch(path, args.patch, args.patch_type, dry_run=True)
    diff = object_diff(before, preview, label)
    if not diff:
        return ModuleResult(msg=f"{label} already matches the patch", data={"resource": before})
    if call.check_mode:
        return ModuleResult(changed=True, msg=f"would patch {label}", diff=diff, data={"resource": preview})
    after = kube.patch(path, args.patch, args.patch_type)
    return ModuleResult(
        changed=True, msg=f"patched {label}", diff=object_diff(before, after, label), data={"resource": after}
    )
