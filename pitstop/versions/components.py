"""The component table of the platform inventory (`runbooks/compat/components.yaml`): every
component key, the version inventory row it belongs to, where its version is read, how it is
rolled back.

The keys are fixed by the design (`pitstop.compat.components`: inventory rows, targets, matrices
and compat checks all use them); the file says how to detect each one and must list exactly
these keys, in this order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from ruamel.yaml.error import YAMLError

from pitstop.compat.components import COMPONENT_KEYS, COMPONENT_ROWS, ROW_OF
from pitstop.compat.matrix import compat_dir
from pitstop.runbook.errors import suggest
from pitstop.safe_yaml import safe_load_file

COMPONENTS_FILE = "components.yaml"

# Row label -> component keys, in the order of docs/upgrade-process.md "Version inventory" (shared with
# compat.check).
ROWS = COMPONENT_ROWS


class ComponentTableError(ValueError):
    """components.yaml is unreadable or does not match the design's component keys."""


def unknown_keys_message(keys: Sequence[str], what: str) -> str | None:
    """A message naming unknown component keys with a suggestion, or None when all are known."""
    unknown = [k for k in keys if k not in COMPONENT_KEYS]
    if not unknown:
        return None
    parts = []
    for key in unknown:
        near = suggest(key, COMPONENT_KEYS)
        parts.append(f"{key!r}" + (f" (did you mean {near!r}?)" if near else ""))
    return f"unknown component key(s) in {what}: {', '.join(parts)}; valid keys: {', '.join(COMPONENT_KEYS)}"


# --- detection sources -----------------------------------------------------------------------


class _Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApiserverSource(_Source):
    """The apiserver's `/version` gitVersion."""

    source: Literal["apiserver"]


class ControlPlaneSource(_Source):
    """kube-system pods labelled `component=<component>` (kubeadm static pods): image tag."""

    source: Literal["control_plane"]
    component: str


class NodeInfoSource(_Source):
    source: Literal["node_info"]
    field: str


class NodeLabelSource(_Source):
    """The first present of `labels`, or the present `join` labels joined with dots."""

    source: Literal["node_label"]
    labels: list[str] = Field(default_factory=list)
    join: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_form(self) -> NodeLabelSource:
        if bool(self.labels) == bool(self.join):
            raise ValueError("a node_label source gives either `labels` or `join`")
        return self


class SshFactSource(_Source):
    """A key (dotted path, list indexes allowed) of the registered `ssh.facts` results."""

    source: Literal["ssh_fact"]
    fact: str
    prefix: str = ""


class PackageSource(_Source):
    """An installed Debian package from the SSH facts, shown as `v<upstream version>`."""

    source: Literal["package"]
    package: str


class ImagePattern(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    repositories: list[str] = Field(min_length=1)
    product: str | None = None
    tag_pattern: str | None = Field(default=None, description="Regex whose group 1 is the version.")


class ImageSource(_Source):
    source: Literal["image"]
    images: list[ImagePattern] = Field(min_length=1)


class HelmSource(_Source):
    source: Literal["helm"]
    charts: list[str] = Field(min_length=1)


class AnnotationSource(_Source):
    source: Literal["annotation"]
    key: str


class DriverCudaSource(_Source):
    """The highest CUDA level each node's GPU driver runs: the newest release of the `matrix`
    (CUDA level -> minimum driver) whose minimum the node's driver meets."""

    source: Literal["driver_cuda"]
    matrix: str = "cuda"


Source = Annotated[
    ApiserverSource
    | ControlPlaneSource
    | NodeInfoSource
    | NodeLabelSource
    | SshFactSource
    | PackageSource
    | ImageSource
    | HelmSource
    | AnnotationSource
    | DriverCudaSource,
    Field(discriminator="source"),
]
NODE_SOURCES = (NodeInfoSource, NodeLabelSource, SshFactSource, PackageSource)


class Component(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    row: str
    detect: list[Source] = Field(min_length=1)
    rollback: str = Field(min_length=1)
    nodes: Literal["all", "gpu"] = "all"
    absent: str = "not deployed"
    matrix: str | None = None
    policy: str | None = None
    # The acceptance checks (docs/upgrade-process.md "Acceptance by layer", `layer/check`) that
    # exercise this component: their outcome is its validation state when the inventory is given
    # an acceptance result.
    validated_by: list[str] = Field(default_factory=list)


class ComponentTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    components: list[Component]

    @model_validator(mode="after")
    def _checks_exist(self) -> ComponentTable:
        from pitstop.acceptance.probes import BY_KEY

        for component in self.components:
            for check in component.validated_by:
                if check not in BY_KEY:
                    hint = suggest(check, list(BY_KEY))
                    raise ValueError(
                        f"component {component.key}: validated_by names {check!r}, which is not an "
                        f"acceptance check{f' (did you mean {hint!r}?)' if hint else ''}"
                    )
        return self

    @model_validator(mode="after")
    def _matches_the_design(self) -> ComponentTable:
        keys = [c.key for c in self.components]
        if tuple(keys) != COMPONENT_KEYS:
            missing = [k for k in COMPONENT_KEYS if k not in keys]
            extra = [k for k in keys if k not in COMPONENT_KEYS]
            raise ValueError(
                "components must list exactly the design's keys in the version inventory's order"
                + (f"; missing: {', '.join(missing)}" if missing else "")
                + (f"; unknown: {', '.join(extra)}" if extra else "")
                + ("" if missing or extra else f"; expected order: {', '.join(COMPONENT_KEYS)}")
            )
        for component in self.components:
            if component.row != ROW_OF[component.key]:
                raise ValueError(
                    f"component {component.key!r} is in row {component.row!r}; "
                    f"its version inventory row is {ROW_OF[component.key]!r}"
                )
        return self

    def get(self, key: str) -> Component:
        return next(c for c in self.components if c.key == key)


_TABLE = TypeAdapter(ComponentTable)


def parse_components(data: Any, where: str = COMPONENTS_FILE) -> ComponentTable:
    try:
        return _TABLE.validate_python(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {str(e['msg']).removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise ComponentTableError(f"{where}: {problems}") from None


def load_components(root: Path | None = None) -> ComponentTable:
    """The table from `<compat dir>/components.yaml` (PITSTOP_COMPAT_DIR, else
    `$PITSTOP_RUNBOOK_DIR/compat`)."""
    path = (compat_dir() if root is None else root) / COMPONENTS_FILE
    try:
        data = safe_load_file(path)
    except OSError as exc:
        raise ComponentTableError(
            f"{path}: cannot read the component table ({exc.strerror}); set PITSTOP_COMPAT_DIR or "
            "PITSTOP_RUNBOOK_DIR (it lives in <runbook dir>/compat)"
        ) from None
    except YAMLError as exc:
        raise ComponentTableError(f"{path}: not valid YAML: {exc}") from None
    return parse_components(data, str(path))
