"""API versions Kubernetes stops serving, from `<compat dir>/kubernetes-removed-apis.yaml`.

The table is data copied from the Kubernetes Deprecated API Migration Guide; `removed_by` answers
"can a manifest with this apiVersion/kind still be applied on the target version?".
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ValidationError, field_validator
from ruamel.yaml.error import YAMLError

from pitstop.compat.matrix import compat_dir
from pitstop.safe_yaml import safe_load_file

REMOVED_APIS_FILE = "kubernetes-removed-apis.yaml"
_MINOR = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?$")


class DeprecationDataError(ValueError):
    """The removed-API table cannot be read; the message names the file and the row."""


class TargetVersionError(ValueError):
    """A target Kubernetes version that is not `v1.31`, `1.31` or `v1.31.2`."""


def kube_minor_of(text: str) -> tuple[int, int]:
    """`(1, 31)` for `v1.31.2`, `1.31` or `v1.31`; TargetVersionError for anything else."""
    match = _MINOR.match(str(text).strip())
    if match is None:
        raise TargetVersionError(
            f"target Kubernetes version {text!r} is not a version: expected v1.31, 1.31 or v1.31.2"
        )
    return (int(match.group(1)), int(match.group(2)))


class RemovedApi(BaseModel):
    apiVersion: str  # the manifest field's name
    kind: str
    removed_in: str
    replacement: str = ""
    notes: str = ""
    source: str

    @field_validator("removed_in", mode="before")
    @classmethod
    def _version_text(cls, value: object) -> object:
        # YAML reads 1.30 as a float; "1.3" would then be wrong, so insist on quoted text.
        if isinstance(value, float):
            raise ValueError(f"write removed_in as a quoted string (got {value!r})")
        kube_minor_of(str(value))
        return value

    @property
    def removed_minor(self) -> tuple[int, int]:
        return kube_minor_of(self.removed_in)

    def advice(self) -> str:
        if self.replacement:
            return f"use {self.replacement}"
        return self.notes or "no replacement API"


class RemovedApis(BaseModel):
    title: str = "Kubernetes removed API versions"
    source: str
    retrieved: str = ""
    removed: list[RemovedApi]

    def kinds(self) -> frozenset[str]:
        """Every kind some row names: objects of other kinds can never use a removed API."""
        return frozenset(row.kind for row in self.removed)

    def removed_by(self, api_version: str, kind: str, target_version: str) -> RemovedApi | None:
        """The row when `api_version`/`kind` is no longer served on `target_version`."""
        target = kube_minor_of(target_version)
        for row in self.removed:
            if row.apiVersion == api_version and row.kind == kind and row.removed_minor <= target:
                return row
        return None


def load_removed_apis(root: Path | None = None) -> RemovedApis:
    path = (compat_dir() if root is None else root) / REMOVED_APIS_FILE
    try:
        data = safe_load_file(path)
    except OSError as exc:
        raise DeprecationDataError(
            f"{path}: cannot read the removed-API table ({exc.strerror}); set PITSTOP_COMPAT_DIR "
            "or PITSTOP_RUNBOOK_DIR"
        ) from None
    except YAMLError as exc:
        raise DeprecationDataError(f"{path}: not valid YAML: {exc}") from None
    try:
        return RemovedApis.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise DeprecationDataError(f"{path}: {problems}") from None


def removed_by(
    api_version: str, kind: str, target_version: str, table: RemovedApis | None = None
) -> RemovedApi | None:
    """Module-level convenience over the table in the compat directory."""
    return (table or load_removed_apis()).removed_by(api_version, kind, target_version)
