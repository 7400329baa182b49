"""kube.apply: client-side apply of manifests, as `kubectl apply` does it (see pitstop.kube.apply).

Objects go in order: Namespaces, then CustomResourceDefinitions (waiting until their kinds are
served), then the rest as written. Each is created when absent, otherwise patched with the
three-way patch kubectl would send; an empty patch leaves it alone ("unchanged"), which makes a
second apply report changed=false. Check mode asks the server for a dry run of every write;
objects whose Namespace or CRD is itself only being dry-run are reported without one.
"""

from __future__ import annotations

import json
import time
from typing import Any

from activities.kube.client import Kube
from activities.kube.common import api_errors, beat, kube_for, kube_module, pause
from activities.kube.discovery import ApiResource, Discovery
from activities.kube.local_files import allowed_manifest_files
from pitstop.contracts import ModuleCall, ModuleResult, bound_text
from pitstop.errors import ErrorType, fail
from pitstop.kube.apply import apply_patch, with_last_applied
from pitstop.kube.diff import object_diff
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
        with api_errors(f"kube.apply: {manifest.where}: {label}"):
            live = self.kube.get_or_none(res.path(namespace, name))
            if live is None:
                created = self.kube.post(res.path(namespace), with_last_applied(obj), dry_run=self.check_mode)
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
                    )
                    entry["action"] = "configured"
                    self.diffs.append(object_diff(live, after, label))
        if _order(manifest) == 1 and not self.check_mode:
            spec = obj.get("spec") or {}
            for version in spec.get("versions") or []:
                self.discovery.forget(f"{spec.get('group')}/{version.get('name')}")
        self.objects.append(entry)


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
