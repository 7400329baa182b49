"""kube.apply: server-side apply of manifests (the default), or client-side apply as `kubectl
apply` does it (see pitstop.kube.apply).

Objects go in order: Namespaces, then CustomResourceDefinitions (waiting until their kinds are
served), then the rest as written. Server-side, each object is one apply PATCH; the answer is
compared with the object before it to say "created", "configured" or "unchanged". Client-side,
each is created when absent, otherwise patched with the three-way patch kubectl would send; an
empty patch leaves it alone ("unchanged"). Either way a second apply reports changed=false.
Check mode asks the server for a dry run of every write; objects whose Namespace or CRD is
itself only being dry-run are reported without one.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from activities.kube.client import ApiStatus, Kube
from activities.kube.common import api_errors, beat, kube_for, kube_module, pause
from activities.kube.discovery import ApiResource, Discovery
from activities.kube.local_files import allowed_manifest_files
from pitstop.contracts import ModuleCall, ModuleResult, bound_text
from pitstop.errors import ErrorType, fail
from pitstop.kube.apply import apply_patch, with_last_applied
from pitstop.kube.diff import comparable, object_diff
from pitstop.kube.manifests import Manifest, ManifestError, load_manifests, parse_documents
from pitstop.kube.objects import Obj
from pitstop.module_args.kube_upgrade import APPLY, ApplyArgs

CRD_KIND = ("apiextensions.k8s.io", "CustomResourceDefinition")


def _order(manifest: Manifest) -> int:
    if manifest.kind == "Namespace" and manifest.api_version == "v1":
        return 0
    if manifest.kind == CRD_KIND[1] and manifest.api_version.startswith(f"{CRD_KIND[0]}/"):
        return 1
    return 2


def read_manifests(args: ApplyArgs, call: ModuleCall) -> list[Manifest]:
    try:
        if args.src is not None:
            files = allowed_manifest_files(call, args.src, "src", recursive=args.recursive)
            manifests = load_manifests(files)
        else:
            manifests = []
            for index, doc in enumerate(args.definition or []):
                manifests.extend(parse_documents_of(doc, index))
    except ManifestError as exc:
        fail(ErrorType.INVALID_ARGS, f"kube.apply: {exc}")
    if not manifests:
        where = ", ".join(args.src) if args.src is not None else "definition"
        fail(ErrorType.INVALID_ARGS, f"kube.apply: {where}: the manifests hold no objects")
    return sorted(manifests, key=_order)


def parse_documents_of(doc: dict[str, Any], index: int) -> list[Manifest]:
    # An inline definition goes through the same checks (List items, required fields) as a file.
    return parse_documents(json.dumps(doc), f"definition[{index}]")


def _crd_kinds(manifests: list[Manifest]) -> dict[tuple[str, str], bool]:
    """(apiVersion, kind) the batch's CRDs will serve -> whether that kind is namespaced."""
    out: dict[tuple[str, str], bool] = {}
    for m in manifests:
        if _order(m) != 1:
            continue
        spec = m.obj.get("spec") or {}
        kind = str((spec.get("names") or {}).get("kind") or "")
        for version in spec.get("versions") or []:
            out[(f"{spec.get('group')}/{version.get('name')}", kind)] = spec.get("scope") != "Cluster"
    return out


class Applier:
    def __init__(self, kube: Kube, args: ApplyArgs, check_mode: bool, batch: list[Manifest]) -> None:
        self.kube = kube
        self.args = args
        self.check_mode = check_mode
        self.discovery = Discovery(kube)
        self.pending_kinds = _crd_kinds(batch)
        self.pending_namespaces: set[str] = set()  # created in this (dry) run only
        self.objects: list[Obj] = []
        self.diffs: list[str] = []

    def check_kinds(self, manifests: list[Manifest]) -> None:
        """Refuse unknown kinds before writing anything (kinds of this batch's CRDs excepted)."""
        for manifest in manifests:
            if (manifest.api_version, manifest.kind) not in self.pending_kinds:
                self.resource(manifest)

    def resource(self, manifest: Manifest) -> ApiResource | None:
        """The served resource, None when only a CRD dry-run in this batch would serve it."""
        found = self.discovery.find(manifest.api_version, manifest.kind)
        if found is not None:
            return found
        key = (manifest.api_version, manifest.kind)
        if key in self.pending_kinds:
            if self.check_mode:
                return None
            found = self._wait_served(manifest)
            if found is not None:
                return found
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"kube.apply: {manifest.where}: {manifest.kind} in {manifest.api_version} is still not "
                f"served {self.args.wait_established_seconds:g}s after its CRD was applied",
            )
        served = self.discovery.kinds(manifest.api_version)
        if served is None:
            fail(
                ErrorType.INVALID_ARGS,
                f"kube.apply: {manifest.where}: {self.kube.name} does not serve apiVersion "
                f"{manifest.api_version!r} (kind {manifest.kind}); is its CRD installed?",
            )
        fail(
            ErrorType.INVALID_ARGS,
            f"kube.apply: {manifest.where}: {self.kube.name} serves no kind {manifest.kind!r} in "
            f"{manifest.api_version} (kinds: {', '.join(sorted(served)) or 'none'})",
        )

    def _wait_served(self, manifest: Manifest) -> ApiResource | None:
        deadline = time.monotonic() + self.args.wait_established_seconds
        while True:
            self.discovery.forget(manifest.api_version)
            found = self.discovery.find(manifest.api_version, manifest.kind)
            if found is not None or time.monotonic() >= deadline:
                return found
            pause(0.5, {"waiting_for": f"{manifest.kind} in {manifest.api_version}"})

    def apply(self, manifest: Manifest) -> None:
        res = self.resource(manifest)
        obj = dict(manifest.obj)
        metadata = dict(obj.get("metadata") or {})
        namespaced = (
            res.namespaced if res is not None else self.pending_kinds[(manifest.api_version, manifest.kind)]
        )
        if namespaced:
            metadata["namespace"] = metadata.get("namespace") or self.args.namespace
        else:
            # The server drops it; keeping it would make every later apply look like a change.
            metadata.pop("namespace", None)
        obj["metadata"] = metadata
        namespace = str(metadata.get("namespace") or "")
        name = str(metadata["name"])
        label = f"{manifest.kind} {namespace + '/' if namespace else ''}{name}"
        entry: Obj = {"kind": manifest.kind, "apiVersion": manifest.api_version, "namespace": namespace}
        entry.update(name=name, source=manifest.where)
        if res is None or (namespaced and namespace in self.pending_namespaces):
            # Dry run only: what it depends on is not there to dry-run against.
            entry["action"] = "created"
            self.objects.append(entry)
            return
        if self.args.server_side:
            self._apply_server_side(res, obj, entry, label, manifest)
            return
        with api_errors(f"kube.apply: {manifest.where}: {label}"):
            live = self.kube.get_or_none(res.path(namespace, name))
            if live is None:
                created = self.kube.post(
                    res.path(namespace),
                    with_last_applied(obj),
                    dry_run=self.check_mode,
                    field_manager=CSA_MANAGER,
                )
                entry["action"] = "created"
                self.diffs.append(object_diff({}, created, label))
                if manifest.kind == "Namespace" and self.check_mode:
                    self.pending_namespaces.add(name)
            else:
                patch, patch_type = apply_patch(obj, live)
                if not patch:
                    entry["action"] = "unchanged"
                else:
                    after = self.kube.patch(
                        res.path(namespace, name),
                        patch,
                        "strategic" if patch_type == "strategic" else "merge",
                        dry_run=self.check_mode,
                        field_manager=CSA_MANAGER,
                    )
                    entry["action"] = "configured"
                    self.diffs.append(object_diff(live, after, label))
        if _order(manifest) == 1 and not self.check_mode:
            spec = obj.get("spec") or {}
            for version in spec.get("versions") or []:
                self.discovery.forget(f"{spec.get('group')}/{version.get('name')}")
        self.objects.append(entry)

    def _apply_server_side(
        self, res: ApiResource, obj: Obj, entry: Obj, label: str, manifest: Manifest
    ) -> None:
        """PATCH application/apply-patch+yaml as field manager `field_manager`: the apiserver merges,
        prunes what this manager applied before and no longer does, and refuses (409) to change
        fields another manager owns unless `force_conflicts`."""
        namespace, name = entry["namespace"], entry["name"]
        what = f"kube.apply: {manifest.where}: {label}"
        path = res.path(namespace, name)
        with api_errors(what):
            live = self.kube.get_or_none(path)
            try:
                after = self._send(path, obj, force=self.args.force_conflicts)
            except ApiStatus as exc:
                owners = conflicting_managers(exc)
                if owners is None:
                    raise
                if live is None or not owners <= CLIENT_SIDE_MANAGERS or not client_side_entries(live):
                    fail(
                        ErrorType.PRECONDITION_FAILED,
                        f"{what}: {exc.message}\nThese fields belong to another manager. Leave them out "
                        "of the manifest, or set `force_conflicts: true` to take them over.",
                    )
                # Only client-side apply's own record stands in the way: take it over, as
                # kubectl's csaupgrade does, and apply again. A dry run shows what that would do.
                if self.check_mode:
                    after = self._send(path, obj, force=True)
                else:
                    self._adopt_client_side_fields(path, live)
                    after = self._send(path, obj, force=self.args.force_conflicts)
            if not self.check_mode and client_side_entries(after):
                # The next apply prunes what the client-side ones set and this one no longer does.
                self._adopt_client_side_fields(path, after)
        before = live or {}
        changed = comparable(_spec_and_meta(before)) != comparable(_spec_and_meta(after))
        entry["action"] = "created" if live is None else "configured" if changed else "unchanged"
        if live is None or changed:
            self.diffs.append(object_diff(before, after, label))
        if _order(manifest) == 1 and not self.check_mode:
            spec = obj.get("spec") or {}
            for version in spec.get("versions") or []:
                self.discovery.forget(f"{spec.get('group')}/{version.get('name')}")
        self.objects.append(entry)

    def _send(self, path: str, obj: Obj, *, force: bool) -> Obj:
        return self.kube.server_side_apply(
            path, obj, field_manager=self.args.field_manager, force=force, dry_run=self.check_mode
        )

    def _adopt_client_side_fields(self, path: str, live: Obj) -> None:
        """Objects applied client-side (by pitstop before, or by kubectl) are owned by the Update
        manager `kubectl-client-side-apply` (or pitstop's); a server-side apply conflicts with it
        on every field it changes and would never prune what it set. As kubectl's csaupgrade
        does, its fields move to this manager's Apply entry, with the resourceVersion as a
        precondition."""
        for attempt in range(ADOPT_ATTEMPTS):
            entries = (live.get("metadata") or {}).get("managedFields") or []
            csa = client_side_entries(live)
            if not csa:
                return
            upgraded = upgrade_managed_fields(entries, csa, self.args.field_manager)
            version = live["metadata"]["resourceVersion"]
            patch = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": version},
                {"op": "replace", "path": "/metadata/managedFields", "value": upgraded},
            ]
            try:
                self.kube.patch(path, patch, "json")
                return
            except ApiStatus as exc:
                # Someone wrote the object since it was read (a controller's status update is
                # enough): its managedFields may have moved too, so read it again and redo the
                # move from what is there now, as a conflict retry does.
                moved = exc.status == 409 or (
                    exc.status == 422 and "/metadata/resourceVersion" in exc.message
                )
                if not moved or attempt == ADOPT_ATTEMPTS - 1:
                    raise
            current = self.kube.get_or_none(path)
            if current is None:
                return
            live = current


# Reads and moves of a client-side apply record before giving up on an object that keeps changing.
ADOPT_ATTEMPTS = 5
# The Update managers of client-side apply: kubectl's, and pitstop's (`server_side: false`).
CSA_MANAGER = "pitstop-client-side-apply"
CLIENT_SIDE_MANAGERS = frozenset({"kubectl-client-side-apply", CSA_MANAGER})
_CONFLICT_WITH = re.compile(r'^conflict with "([^"]+)"')


def client_side_entries(obj: Obj) -> list[Obj]:
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    return [
        e
        for e in entries
        if e.get("manager") in CLIENT_SIDE_MANAGERS
        and e.get("operation") == "Update"
        and not e.get("subresource")
    ]


def conflicting_managers(exc: ApiStatus) -> set[str] | None:
    """The managers a server-side apply conflicted with (from the 409's causes, as
    `conflict with "<manager>" [with subresource ...] using <apiVersion>`); None when the error is
    not an apply conflict. A manager behind a subresource never counts as client-side apply."""
    if exc.status != 409 or not exc.message.startswith("Apply failed"):
        return None
    out: set[str] = set()
    for cause in exc.causes:
        text = str(cause.get("message") or "")
        found = _CONFLICT_WITH.match(text)
        if found is None or "with subresource" in text:
            out.add(text or "?")
        else:
            out.add(found.group(1))
    return out or {"?"}


def upgrade_managed_fields(entries: list[Obj], csa: list[Obj], manager: str) -> list[Obj]:
    """managedFields with the client-side entries' fields merged into `manager`'s Apply entry."""
    fields: Obj = {}
    for entry in csa:
        fields = merge_fields(fields, entry.get("fieldsV1") or {})
    out = [e for e in entries if e not in csa]
    mine = next((e for e in out if e.get("manager") == manager and e.get("operation") == "Apply"), None)
    if mine is None:
        template = csa[0]
        mine = {**template, "manager": manager, "operation": "Apply", "fieldsV1": {}}
        out.append(mine)
    mine["fieldsV1"] = merge_fields(mine.get("fieldsV1") or {}, fields)
    return out


def merge_fields(a: Obj, b: Obj) -> Obj:
    out = dict(a)
    for key, value in b.items():
        out[key] = merge_fields(out.get(key) or {}, value or {}) if key in out else value
    return out


def _spec_and_meta(obj: Obj) -> Obj:
    # What an apply can change: everything but the status (the apiserver ignores it on apply).
    return {k: v for k, v in obj.items() if k != "status"}


@kube_module(APPLY)
def apply(call: ModuleCall, args: ApplyArgs) -> ModuleResult:
    manifests = read_manifests(args, call)
    kube = kube_for(call)
    applier = Applier(kube, args, call.check_mode, manifests)
    with api_errors("kube.apply: API discovery"):
        applier.check_kinds(manifests)
    for number, manifest in enumerate(manifests):
        beat({"applied": number, "of": len(manifests)})
        applier.apply(manifest)
    counts: dict[str, int] = {}
    for entry in applier.objects:
        counts[entry["action"]] = counts.get(entry["action"], 0) + 1
    changed = any(entry["action"] != "unchanged" for entry in applier.objects)
    summary = ", ".join(f"{n} {action}" for action, n in sorted(counts.items()))
    prefix = "would apply" if call.check_mode and changed else "applied"
    lines = [f"{e['kind'].lower()}/{e['name']}{_in(e['namespace'])} {e['action']}" for e in applier.objects]
    return ModuleResult(
        changed=changed,
        msg=f"{prefix} {len(applier.objects)} objects: {summary}",
        stdout=bound_text("\n".join(lines)),
        diff=bound_text("\n".join(d for d in applier.diffs if d)) or None,
        data={"objects": applier.objects, "counts": counts},
    )


def _in(namespace: str) -> str:
    return f" ({namespace})" if namespace else ""
