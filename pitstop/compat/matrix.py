"""Vendor support matrices as data: load them, and ask whether a combination is supported.

A matrix (`runbooks/compat/<component>.yaml`) lists a vendor's releases and, per release, the
versions of other components it supports. "Installable is not supported": a combination listed
under `installable:` works but the vendor does not support it, and is still refused.

Version specs (in `supports`, `installable`, `upgrade_from`): `1.29-1.31` (inclusive range at
the precision written), `>=550`, `<1.32`, `>=1.29,<1.32` (all must hold), `550.*` or `1.31`
(prefix), `*` (any). A spec may start with a product name (`Ubuntu 22.04`, `containerd 1.6-1.7`,
`cri-o`): the value must name that product and, when a version follows, match it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator
from ruamel.yaml.error import YAMLError

from pitstop.compat.skew import SkewPolicy
from pitstop.compat.versions import Version, VersionError, parse_version, try_parse_version
from pitstop.safe_yaml import safe_load_file

SKEW_POLICY_FILE = "kubernetes-skew.yaml"
# Files under the compat directory that hold other tables, never a vendor matrix.
NOT_MATRICES = frozenset({SKEW_POLICY_FILE, "kubernetes-removed-apis.yaml", "components.yaml"})

NO_MATRIX_SOURCE = "no vendor matrix"

# What inventories report for a component that is not there; never judged against a matrix.
ABSENT = frozenset({"", "not deployed", "not declared", "unknown", "none"})


class MatrixError(ValueError):
    """A matrix file is unreadable or malformed; the message names the file and the key."""


def compat_dir() -> Path:
    """Where compat data lives: PITSTOP_COMPAT_DIR, else `$PITSTOP_RUNBOOK_DIR/compat`."""
    explicit = os.environ.get("PITSTOP_COMPAT_DIR")
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("PITSTOP_RUNBOOK_DIR", "runbooks")).expanduser() / "compat"


# --- version specs ---------------------------------------------------------------------------

_COMPARISON = re.compile(r"^(>=|<=|==|!=|>|<)\s*(.+)$")
# "Ubuntu 22.04", "containerd 1.6-1.7", "cri-o": a product name, then an optional version spec.
_PRODUCT = re.compile(r"^([A-Za-z][^<>=!*\d]*?)\s*((?:[<>=!*]|v?\d).*)?$")


@dataclass(frozen=True)
class VersionSpec:
    """One accepted-versions spec as written in a matrix, compiled for matching."""

    text: str
    product: str | None
    clauses: tuple[tuple[str, Version], ...]  # (operator, bound); empty = any version

    def matches(self, value: str) -> bool:
        """Whether a reported version (e.g. `v1.31.2`, `containerd://1.7.20`) meets this spec."""
        if self.product is not None and not _names_product(value, self.product):
            return False
        if not self.clauses:
            return True
        version = try_parse_version(_after_product(value, self.product))
        if version is None:
            return False
        return all(_holds(op, version, bound) for op, bound in self.clauses)


def parse_spec(text: str) -> VersionSpec:
    """Compile a spec; `ValueError` naming the spec when it cannot be read."""
    spec = str(text).strip()
    if not spec:
        raise ValueError("empty version spec")
    product: str | None = None
    rest = spec
    named = _PRODUCT.match(spec)
    if named is not None and not re.match(r"^v\d", spec):
        product, rest = named.group(1).strip().lower(), (named.group(2) or "").strip()
    clauses: list[tuple[str, Version]] = []
    if rest and rest != "*":
        for part in rest.split(","):
            clauses.extend(_clauses(part.strip(), spec))
    return VersionSpec(text=spec, product=product, clauses=tuple(clauses))


def _clauses(part: str, spec: str) -> list[tuple[str, Version]]:
    try:
        comparison = _COMPARISON.match(part)
        if comparison is not None:
            return [(comparison.group(1), _bound(comparison.group(2)))]
        if "-" in part:
            low, _, high = part.partition("-")
            lower, upper = _bound(low), _bound(high)
            if lower > upper:
                raise VersionError(f"range {part!r} runs backwards")
            return [(">=", lower), ("<=", upper)]
        return [("prefix", _bound(part.removesuffix(".*").removesuffix(".x")))]
    except VersionError as exc:
        raise ValueError(
            f"cannot read version spec {spec!r}: write a range '1.29-1.31', a bound '>=550', "
            f"a prefix '550.*' or a version '1.31' ({exc})"
        ) from None


def _bound(text: str) -> Version:
    text = text.strip()
    if not re.fullmatch(r"v?\d+(\.\d+)*(\.[x*])?", text):
        raise VersionError(f"{text!r} is not a version")
    return parse_version(text.removesuffix(".x").removesuffix(".*"))


def _holds(op: str, version: Version, bound: Version) -> bool:
    # Compare at the precision the bound was written in: "<=1.31" accepts 1.31.9.
    actual = Version(parts=_truncated(version, bound), raw=version.raw, prerelease=None)
    if op == "prefix" or op == "==":
        return actual == bound
    if op == "!=":
        return actual != bound
    if op == ">=":
        return actual >= bound
    if op == ">":
        return actual > bound
    if op == "<=":
        return actual <= bound
    return actual < bound


def _truncated(version: Version, bound: Version) -> tuple[int, ...]:
    parts = version.parts + (0,) * max(0, len(bound.parts) - len(version.parts))
    return parts[: len(bound.parts)]


def _names_product(value: str, product: str) -> bool:
    return _normalise(product) in _normalise(value)


def _normalise(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _after_product(value: str, product: str | None) -> str:
    if product is None:
        return value
    lowered = value.lower()
    index = lowered.find(product)
    return value[index + len(product) :] if index >= 0 else value


# --- matrix model ----------------------------------------------------------------------------


def _listify(value: object) -> object:
    if value is None:
        return []
    if isinstance(value, str | int | float):
        return [str(value)]
    return value


def _listify_mapping(value: object) -> object:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(key): _listify(specs) for key, specs in value.items()}
    return value


def _check_spec(spec: str) -> str:
    parse_spec(spec)
    return spec


# A spec checked where it is written, so a loading error names its exact key and index.
SpecText = Annotated[str, AfterValidator(_check_spec)]


class Release(BaseModel):
    """One vendor release line (`v24.9.x`) or exact release (`v24.9.1`) and what it supports."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(description="Release; matched on major.minor unless an exact entry exists.")
    supports: dict[str, list[SpecText]] = Field(
        default_factory=dict, description="Component key -> version specs the vendor supports."
    )
    installable: dict[str, list[SpecText]] = Field(
        default_factory=dict,
        description="Component key -> specs that install and run but are NOT supported (still refused).",
    )
    upgrade_from: list[SpecText] = Field(
        default_factory=list, description="Versions an upgrade to this release may start from (any if empty)."
    )
    source: str | None = Field(default=None, description="Release-specific source (release notes).")
    notes: str | None = None

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int | float) else value

    @field_validator("version")
    @classmethod
    def _version_parses(cls, value: str) -> str:
        parse_version(value.removesuffix(".x"))
        return value

    @field_validator("supports", "installable", mode="before")
    @classmethod
    def _lists(cls, value: object) -> object:
        return _listify_mapping(value)

    @field_validator("upgrade_from", mode="before")
    @classmethod
    def _from_list(cls, value: object) -> object:
        return _listify(value)

    @property
    def parsed(self) -> Version:
        return parse_version(self.version.removesuffix(".x"))

    @property
    def is_line(self) -> bool:
        """`v24.9.x` (or `v24.9`) covers the whole release line."""
        return self.version.endswith(".x") or len(self.parsed.parts) <= 2

    def source_or(self, default: str) -> str:
        return self.source or default


class Matrix(BaseModel):
    """A vendor's support matrix for one component, with where it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    component: str
    title: str
    source: str
    retrieved: str
    notes: str | None = None
    releases: list[Release] = Field(min_length=1)

    @field_validator("retrieved", mode="before")
    @classmethod
    def _date_text(cls, value: object) -> object:
        return str(value) if value is not None and not isinstance(value, str) else value

    def release_for(self, version: str) -> Release | None:
        """The entry for `version`: exact, else the nearest listed patch below it, else its line."""
        wanted = try_parse_version(version)
        if wanted is None:
            return None
        exact = [release for release in self.releases if not release.is_line and release.parsed == wanted]
        if exact:
            return exact[0]
        same_line = [release for release in self.releases if release.parsed.minor_key() == wanted.minor_key()]
        # The nearest known patch at or below the version, else the entry for the whole line.
        below = [release for release in same_line if not release.is_line and release.parsed <= wanted]
        if below:
            return max(below, key=lambda release: release.parsed)
        lines = [release for release in same_line if release.is_line]
        return lines[0] if lines else None

    def known_versions(self) -> list[str]:
        return [release.version for release in self.releases]


# --- support lookups -------------------------------------------------------------------------

SupportStatus = Literal["supported", "installable", "unsupported", "unknown"]


class SupportFinding(BaseModel):
    """The verdict on one dimension of a combination (a component the release lists)."""

    model_config = ConfigDict(frozen=True)

    rule: str
    dimension: str
    value: str | None
    status: SupportStatus
    message: str


class Support(BaseModel):
    """Whether the vendor supports `component` at `version` in the given context.

    `supported` is None when no matrix covers the component; `rule` is the first failing rule
    (or the matrix rule when all hold); `reasons` are messages a person can act on.
    """

    model_config = ConfigDict(frozen=True)

    component: str
    version: str
    supported: bool | None
    source: str
    rule: str
    reasons: list[str] = Field(default_factory=list)
    findings: list[SupportFinding] = Field(default_factory=list)
    title: str | None = None


def matrix_rule(component: str, dimension: str) -> str:
    return f"matrix/{component}/{dimension}"


def support_for(
    matrices: Mapping[str, Matrix],
    component: str,
    version: str,
    context: Mapping[str, str],
    *,
    upgrade_from: str | None = None,
) -> Support:
    """Check `component` at `version` against its vendor matrix, given the other versions.

    `context` maps component keys to the versions they will run next to (the target state);
    keys the release does not mention are not judged. `upgrade_from` is the version the
    component is upgraded from, checked against the release's `upgrade_from` specs.
    """
    matrix = matrices.get(component)
    if matrix is None:
        return Support(
            component=component,
            version=version,
            supported=None,
            source=NO_MATRIX_SOURCE,
            rule=matrix_rule(component, "none"),
            reasons=[f"no vendor matrix covers {component}; its support is not checked"],
        )
    release = matrix.release_for(version)
    if release is None:
        rule = matrix_rule(component, "release")
        message = (
            f"{component} {version} is not in the {matrix.title} matrix (known: "
            f"{', '.join(matrix.known_versions())}); pick a listed release or add this one to "
            f"the matrix from {matrix.source}"
        )
        finding = SupportFinding(
            rule=rule, dimension="release", value=version, status="unknown", message=message
        )
        return Support(
            component=component,
            version=version,
            supported=False,
            source=matrix.source,
            rule=rule,
            reasons=[message],
            findings=[finding],
            title=matrix.title,
        )
    source = release.source_or(matrix.source)
    judged = [
        _dimension(component, version, release, key, context.get(key), source) for key in release.supports
    ]
    findings = [finding for finding in judged if finding is not None]
    if upgrade_from is not None and release.upgrade_from:
        findings.append(_upgrade_path(component, version, release, upgrade_from, source))
    failing = [finding for finding in findings if finding.status != "supported"]
    return Support(
        component=component,
        version=version,
        supported=not failing,
        source=source,
        rule=failing[0].rule if failing else matrix_rule(component, "release"),
        reasons=[finding.message for finding in failing],
        findings=findings,
        title=matrix.title,
    )


def _dimension(
    component: str, version: str, release: Release, key: str, value: str | None, source: str
) -> SupportFinding | None:
    if value is None or value.strip().lower() in ABSENT:
        return None  # not part of this plan: nothing to judge
    rule = matrix_rule(component, key)
    supported = release.supports.get(key, [])
    if any(parse_spec(spec).matches(value) for spec in supported):
        return SupportFinding(
            rule=rule,
            dimension=key,
            value=value,
            status="supported",
            message=f"{component} {version} supports {key} {value}",
        )
    if any(parse_spec(spec).matches(value) for spec in release.installable.get(key, [])):
        return SupportFinding(
            rule=rule,
            dimension=key,
            value=value,
            status="installable",
            message=(
                f"{component} {version} installs with {key} {value} but the vendor does not support "
                f"that combination (supported: {', '.join(supported)}) (rule {rule}, {source})"
            ),
        )
    return SupportFinding(
        rule=rule,
        dimension=key,
        value=value,
        status="unsupported",
        message=(
            f"{component} {version} does not support {key} {value} (supported: "
            f"{', '.join(supported) or 'none listed'}) (rule {rule}, {source})"
        ),
    )


def _upgrade_path(component: str, version: str, release: Release, start: str, source: str) -> SupportFinding:
    rule = matrix_rule(component, "upgrade-from")
    if any(parse_spec(spec).matches(start) for spec in release.upgrade_from):
        return SupportFinding(
            rule=rule,
            dimension="upgrade-from",
            value=start,
            status="supported",
            message=f"{component} {start} → {version} is a supported upgrade path",
        )
    return SupportFinding(
        rule=rule,
        dimension="upgrade-from",
        value=start,
        status="unsupported",
        message=(
            f"{component} {start} → {version} is not a supported upgrade path (upgrade from "
            f"{', '.join(release.upgrade_from)} only; go through an intermediate release) "
            f"(rule {rule}, {source})"
        ),
    )


# --- loading ---------------------------------------------------------------------------------


def _read_yaml(path: Path) -> Any:
    try:
        return safe_load_file(path)
    except (OSError, YAMLError) as exc:
        raise MatrixError(f"{path}: cannot read compat data: {exc}") from None


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{_location(error['loc'])}: {error['msg'].removeprefix('Value error, ')}" for error in exc.errors()
    )


def load_skew_policy(root: Path | None = None) -> SkewPolicy:
    """The Version Skew Policy rules (`kubernetes-skew.yaml` under `root`, default `compat_dir()`)."""
    path = (compat_dir() if root is None else root) / SKEW_POLICY_FILE
    if not path.is_file():
        raise MatrixError(
            f"{path}: the Kubernetes version skew rules are missing; set PITSTOP_COMPAT_DIR to the "
            "directory holding kubernetes-skew.yaml"
        )
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise MatrixError(f"{path}: the skew policy is a mapping with title, source, retrieved and rules")
    try:
        return SkewPolicy.model_validate(data)
    except ValidationError as exc:
        raise MatrixError(f"{path}: {_problems(exc)}") from None


def load_matrix(path: Path) -> Matrix:
    """Load one matrix file; `MatrixError` naming the file and the key that is wrong."""
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise MatrixError(f"{path}: a vendor matrix is a mapping with component, source and releases")
    try:
        return Matrix.model_validate(data)
    except ValidationError as exc:
        raise MatrixError(f"{path}: {_problems(exc)}") from None


def load_matrices(root: Path | None = None) -> dict[str, Matrix]:
    """Every vendor matrix under `root` (default `compat_dir()`), keyed by component."""
    directory = compat_dir() if root is None else root
    if not directory.is_dir():
        raise MatrixError(
            f"{directory}: compat data directory not found; set PITSTOP_COMPAT_DIR or "
            "PITSTOP_RUNBOOK_DIR (the matrices live in <runbook dir>/compat)"
        )
    matrices: dict[str, Matrix] = {}
    origin: dict[str, Path] = {}
    for path in sorted(directory.glob("*.yaml")):
        if path.name in NOT_MATRICES:
            continue
        matrix = load_matrix(path)
        if matrix.component in matrices:
            raise MatrixError(
                f"{path}: component {matrix.component!r} already has a matrix in {origin[matrix.component]}"
            )
        matrices[matrix.component] = matrix
        origin[matrix.component] = path
    return matrices
