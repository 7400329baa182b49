"""kube.removals: the removal plan after a component upgrade (read-only).

For each `{component, from_version, to_version}` it reads both releases' manifests from
`<manifests>/<component>/<version>/` the way kube.apply reads `src` (the worker policy's files
rule, then the same loader), and lists the objects the old release shipped and the new one does
not (pitstop.kube.removals). Each is then looked up: gone already, or present with its uid and
resourceVersion (kube.delete's preconditions) and whether kube.apply is still its manager. What
kube.delete would refuse is listed too, as kept, with the reason: the plan a person approves
shows everything that stays behind, not only what goes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from activities.kube.apply import CSA_MANAGER
from activities.kube.client import ApiStatus, Kube
from activities.kube.common import api_errors, beat, kube_for, kube_module
from activities.kube.discovery import ApiResource, Discovery
from activities.kube.local_files import allowed_manifest_files
from pitstop.contracts import ModuleCall, ModuleResult, bound_text
from pitstop.errors import ErrorType, fail
from pitstop.kube.manifests import Manifest, ManifestError, load_manifests
from pitstop.kube.objects import Obj
from pitstop.kube.removals import (
    NEVER_DELETED,
    ObjectKey,
    Scope,
    crd_scopes,
    group_of,
    refusal,
    removed_objects,
)
from pitstop.module_args.kube_removals import REMOVALS, ComponentChange, RemovalsArgs
from pitstop.policy.clusters import cluster_rule
from pitstop.policy.files import readable
from pitstop.versions.collect import same_version


class Removal(BaseModel):
    """One row of the plan: an object the new release no longer ships."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    component: str
    from_version: str
    to_version: str
    api_version: str = Field(alias="apiVersion")
    kind: str
    namespace: str
    name: str
    source: str  # file and document of the old release it came from
    state: Literal["present", "gone"]
    uid: str = ""
    resource_version: str = Field(default="", alias="resourceVersion")
    installer: bool = False  # kube.apply (field manager `field_manager`) manages it
    managers: list[str] = Field(default_factory=list)
    action: Literal["delete", "keep", "none"]
    reason: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"

    def target(self) -> dict[str, Any]:
        """The row as kube.delete takes it (DeleteTarget)."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
        }


def version_dir(call: ModuleCall, args: RemovalsArgs, component: str, version: str) -> str:
    """`<manifests>/<component>/<dir>` of a version: the directory named so, else the one that is the
    same version (`calico v3.28.2` as the version inventory reports it is `v3.28.2`). The
    component's directory is read under the worker policy, as kube.apply reads `src`."""
    top = f"{args.manifests.rstrip('/')}/{component}"
    base = readable(top, run_id=call.run_id, what="kube.removals: manifests", relative_to="runbook").path
    try:
        names = sorted(child.name for child in base.iterdir() if child.is_dir())
    except OSError as exc:
        fail(ErrorType.INVALID_ARGS, f"kube.removals: {component}: {top}: cannot list it: {exc.strerror}")
    if version in names:
        return version
    same = [name for name in names if same_version(name, version)]
    if len(same) != 1:
        fail(
            ErrorType.INVALID_ARGS,
            f"kube.removals: {component} {version}: {'no' if not same else 'more than one'} directory of "
            f"that version in {top} (there: {', '.join(names) or 'none'}); the manifests of both releases "
            "are needed to tell what the new one no longer ships",
        )
    return same[0]


def release(call: ModuleCall, args: RemovalsArgs, component: str, version: str) -> list[Manifest]:
    where = f"{args.manifests.rstrip('/')}/{component}/{version_dir(call, args, component, version)}"
    try:
        files = allowed_manifest_files(call, [where], "manifests", recursive=args.recursive)
        return load_manifests(files)
    except ManifestError as exc:
        fail(ErrorType.INVALID_ARGS, f"kube.removals: {component} {version}: {exc}")


def find_kind(discovery: Discovery, api_version: str, kind: str) -> ApiResource | None:
    """The resource serving `kind` at `api_version`, else at another version of its group: an old
    release may name a version the cluster no longer serves for an object it still stores."""
    found = discovery.find(api_version, kind)
    group = group_of(api_version)
    if found is not None or not group:
        return found
    try:
        listing = discovery.kube.get(f"/apis/{group}")
    except ApiStatus as exc:
        if exc.status == 404:
            return None
        raise
    for version in listing.get("versions") or []:
        other = str(version.get("groupVersion") or "")
        if other and other != api_version and (found := discovery.find(other, kind)) is not None:
            return found
    return None


def managers_of(obj: Obj) -> list[str]:
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    return sorted({str(e.get("manager") or "") for e in entries if e.get("manager")})


class Planner:
    def __init__(self, kube: Kube, args: RemovalsArgs, allowed_namespaces: tuple[str, ...]) -> None:
        self.kube = kube
        self.args = args
        self.allowed = allowed_namespaces
        self.discovery = Discovery(kube)
        self.mine = {args.field_manager, CSA_MANAGER}

    def scope(self, batch: list[Manifest]) -> Scope:
        crds = crd_scopes(batch)

        def namespaced(m: Manifest) -> bool | None:
            served = find_kind(self.discovery, m.api_version, m.kind)
            if served is not None:
                return served.namespaced
            return crds.get((group_of(m.api_version), m.kind))

        return namespaced

    def plan(self, change: ComponentChange, old: list[Manifest], new: list[Manifest]) -> list[Removal]:
        rows: list[Removal] = []
        scope = self.scope(old + new)
        for key, manifest in removed_objects(old, new, scope, self.args.namespace):
            beat({"looking_up": key.label})
            rows.append(self.row(change, key, manifest))
        return rows

    def row(self, change: ComponentChange, key: ObjectKey, manifest: Manifest) -> Removal:
        base: dict[str, Any] = {
            "component": change.component,
            "from_version": change.from_version,
            "to_version": change.to_version,
            "apiVersion": manifest.api_version,
            "kind": key.kind,
            "namespace": key.namespace,
            "name": key.name,
            "source": manifest.where,
        }
        with api_errors(f"kube.removals: {key.label}"):
            served = find_kind(self.discovery, manifest.api_version, manifest.kind)
            live = None if served is None else self.kube.get_or_none(served.path(key.namespace, key.name))
        if live is None:
            why = (
                "already gone"
                if served is not None
                else f"already gone ({manifest.api_version} is not served)"
            )
            return Removal(**base, state="gone", action="none", reason=why)
        meta = live.get("metadata") or {}
        managers = managers_of(live)
        installer = bool(self.mine & set(managers))
        present: dict[str, Any] = {
            **base,
            "state": "present",
            "uid": str(meta.get("uid") or ""),
            "resourceVersion": str(meta.get("resourceVersion") or ""),
            "installer": installer,
            "managers": managers,
        }
        refused = refusal(key, self.allowed)
        if refused is not None:
            if (key.group, key.kind) not in NEVER_DELETED:
                refused += " the worker policy does not open to kube.delete (clusters.<name>.allow_delete_in)"
            return Removal(**present, action="keep", reason=f"kept: {refused}")
        if meta.get("deletionTimestamp"):
            return Removal(**present, action="none", reason="already being deleted")
        if not installer:
            who = ", ".join(managers) or "no field manager"
            return Removal(
                **present,
                action="keep",
                reason=f"kept: not applied by {self.args.field_manager} (managed by {who})",
            )
        return Removal(**present, action="delete", reason="the new release no longer ships it")


def line(row: Removal) -> str:
    return (
        f"{row.label} ({row.component} {row.from_version} -> {row.to_version}): {row.action} - {row.reason}"
    )


@kube_module(REMOVALS)
def removals(call: ModuleCall, args: RemovalsArgs) -> ModuleResult:
    changes, skipped = args.changes()
    # Every file is read (and allowed by the policy) before the cluster is asked anything.
    releases = [
        (c, release(call, args, c.component, c.from_version), release(call, args, c.component, c.to_version))
        for c in changes
    ]
    allowed = cluster_rule(call.cluster.name if call.cluster else None, "kube.removals").allow_delete_in
    planner = Planner(kube_for(call), args, allowed)
    with api_errors("kube.removals: API discovery"):
        rows = [row for change, old, new in releases for row in planner.plan(change, old, new)]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.action] = counts.get(row.action, 0) + 1
    to_delete = [row for row in rows if row.action == "delete"]
    if rows:
        msg = (
            f"{len(rows)} objects the new releases no longer ship: {len(to_delete)} to delete, "
            f"{counts.get('keep', 0)} kept, {counts.get('none', 0)} already gone"
        )
        shown = [line(r) for r in rows[: args.max_listed]]
        if len(rows) > args.max_listed:
            shown.append(f"... and {len(rows) - args.max_listed} more")
        msg += "\n" + "\n".join(shown)
    else:
        names = ", ".join(f"{c.component} {c.from_version} -> {c.to_version}" for c in changes)
        msg = "nothing to remove: the new releases ship every object the old ones did"
        msg += f" ({names or 'no changes'})"
    return ModuleResult(
        changed=False,
        msg=msg,
        stdout=bound_text("\n".join(line(r) for r in rows)),
        data={
            "removals": [r.model_dump(by_alias=True) for r in rows],
            "delete": [r.target() for r in to_delete],
            "counts": counts,
            "components": [c.model_dump() for c in changes],
            "skipped": skipped,
        },
    )
