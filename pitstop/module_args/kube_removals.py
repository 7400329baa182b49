"""Args of the modules that clean up after a component upgrade: kube.removals (the plan: what
the previous release shipped and the new one does not) and kube.delete (delete exactly the
planned objects, each only as it was when planned).

`manifests` is on the worker, in kube.apply's layout `<manifests>/<component>/<version>/`,
relative to the runbook directory (PITSTOP_RUNBOOK_DIR) and read under the worker policy's
files rule, as kube.apply reads `src`.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pitstop.module_spec import ArgsT, ModuleArgs, ModuleSpec, RetryDefaults
from pitstop.versions.collect import same_version

# A component becomes one path segment below `manifests`: nothing that climbs out.
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def _segment(value: str, what: str) -> str:
    if not _SEGMENT.match(value) or ".." in value:
        raise ValueError(f"{what} {value!r} is not a directory name (letters, digits, '.', '_', '+', '-')")
    return value


def _version(value: str) -> str:
    """A version as the version inventory reports it (`v0.9.1`, or `calico v3.28.2`): kube.removals
    finds its directory among the component's (pitstop.versions.same_version), so it is never a
    path itself; only what could read as one is refused."""
    if not value.strip() or any(c in value for c in "/\\\0") or value.startswith(".") or len(value) > 128:
        raise ValueError(f"version {value!r} is not a version")
    return value


class ComponentChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    component: str = Field(description="Component key, the directory under `manifests` (e.g. kueue).")
    from_version: str = Field(
        description="The release installed before the upgrade (its manifests' directory)."
    )
    to_version: str = Field(description="The release installed now.")

    @field_validator("component")
    @classmethod
    def _component(cls, value: str) -> str:
        return _segment(value, "component")

    @field_validator("from_version", "to_version")
    @classmethod
    def _versions(cls, value: str) -> str:
        return _version(value)


class RemovalsArgs(ModuleArgs):
    """List the objects each component's previous release shipped and its new release no longer
    ships (by API group, kind, namespace and name), with whether each still exists, whether it is
    still the installer's (managed by `field_manager`, as kube.apply wrote it) and its uid and
    resourceVersion. `data.delete` is what kube.delete may then delete: present, the installer's,
    and of a kind and namespace kube.delete does not refuse. Read-only; runs in check mode too."""

    components: list[ComponentChange | str] = Field(
        description="Each upgraded component: `{component, from_version, to_version}`, or its key alone "
        "with the versions from `versions_before` and `versions_after`. Components whose versions are "
        "equal, or that were not installed before, are skipped."
    )
    versions_before: dict[str, str] = Field(
        default_factory=dict,
        description="Component key -> version before the upgrade (the preflight inventory's `current`).",
    )
    versions_after: dict[str, str] = Field(
        default_factory=dict, description="Component key -> version now (the upgrade's `targets`)."
    )
    manifests: str = Field(
        default="manifests/platform",
        min_length=1,
        description="Directory of `<component>/<version>/` manifests.",
    )
    namespace: str = Field(
        default="default",
        min_length=1,
        description="Namespace of namespaced objects that name none (as kube.apply).",
    )
    recursive: bool = Field(
        default=False, description="Read the version directories recursively (as kube.apply)."
    )
    field_manager: str = Field(
        default="pitstop",
        min_length=1,
        max_length=128,
        description="The field manager kube.apply applied with: an object it manages is the installer's.",
    )
    max_listed: int = Field(default=20, ge=1, le=200, description="Objects named in the message.")

    @field_validator("components")
    @classmethod
    def _keys(cls, value: list[ComponentChange | str]) -> list[ComponentChange | str]:
        for item in value:
            if isinstance(item, str):
                _segment(item, "component")
        return value

    def changes(self) -> tuple[list[ComponentChange], list[str]]:
        """The components whose release changed, and why each other one was skipped."""
        out: list[ComponentChange] = []
        skipped: list[str] = []
        for item in self.components:
            if isinstance(item, str):
                before, after = self.versions_before.get(item), self.versions_after.get(item)
                if not before or not after:
                    which = "versions_before" if not before else "versions_after"
                    skipped.append(f"{item}: not in {which}")
                    continue
                item = ComponentChange(component=item, from_version=before, to_version=after)
            if same_version(item.from_version, item.to_version):
                skipped.append(f"{item.component}: still {item.to_version}")
                continue
            out.append(item)
        return out, skipped


class DeleteTarget(BaseModel):
    """One object to delete, as kube.removals lists it in `data.delete`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: str = Field(alias="apiVersion", min_length=1)
    kind: str = Field(min_length=1)
    namespace: str = Field(default="", description="Empty for cluster-scoped objects.")
    name: str = Field(min_length=1)
    uid: str | None = Field(default=None, description="Delete only the object with this uid.")
    resource_version: str | None = Field(
        default=None,
        alias="resourceVersion",
        description="Delete only if unchanged since this resourceVersion.",
    )

    @model_validator(mode="after")
    def _precondition(self) -> Self:
        if not self.uid and not self.resource_version:
            raise ValueError(
                f"{self.kind} {self.name}: give `uid` and/or `resourceVersion` (from kube.removals): an "
                "object is deleted only as it was when the deletion was planned"
            )
        return self

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


class DeleteArgs(ModuleArgs):
    """Delete exactly the listed objects, each with DeleteOptions preconditions (its uid and/or
    resourceVersion), so that an object recreated or changed since it was listed is not deleted.
    Refused before any request: Namespaces, CustomResourceDefinitions, PersistentVolumes and
    claims, Nodes, and objects in kube-system, kube-public and kube-node-lease unless the worker
    policy allows that namespace for the cluster (clusters.<name>.allow_delete_in). Every object
    is first deleted as a server-side dry run (the apiserver checks RBAC and the preconditions);
    only when all pass are they deleted. An object already gone is ok, not a change. Check mode
    stops after the dry run."""

    objects: list[DeleteTarget] = Field(description="The objects, e.g. `{{ removals.delete }}`.")
    propagation_policy: Literal["Background", "Foreground"] = Field(
        default="Background",
        description="Background (the default, as kubectl's): the object goes at once and the garbage "
        "collector removes its dependents (ReplicaSets, Pods) after it. Foreground: the object stays, "
        "marked deleted, until its blocking dependents are gone.",
    )


def _spec(name: str, model: type[ArgsT], summary: str) -> ModuleSpec[ArgsT]:
    return ModuleSpec(
        name=name,
        args_model=model,
        summary=summary,
        supports_check_mode=True,
        start_to_close=timedelta(minutes=5),
        heartbeat_timeout=timedelta(seconds=60),
        retry=RetryDefaults(),
    )


REMOVALS = _spec(
    "kube.removals",
    RemovalsArgs,
    "List objects a component's previous release shipped and its new release does not (the removal plan).",
)
DELETE = _spec(
    "kube.delete",
    DeleteArgs,
    "Delete exactly the listed objects, each only if its uid/resourceVersion still match (dry run first).",
)

SPECS: list[ModuleSpec[Any]] = [REMOVALS, DELETE]
