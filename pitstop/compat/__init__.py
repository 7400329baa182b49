"""Compatibility of an upgrade plan: Kubernetes version skew rules and vendor support matrices.

Pure evaluation lives here (no cluster access); `activities/compat.py` loads the data files
under `compat_dir()` (`runbooks/compat/`) and formats the verdict of `compat.check`.

  versions.py    parse_version / Version / kube_minor: versions as components print them
  skew.py        the Version Skew Policy rules over the states an upgrade passes through
  matrix.py      vendor matrices: load_matrices, support_for, compat_dir, load_skew_policy
  check.py       evaluate(): skew + matrices over current -> target, the compat.check verdict
  components.py  the component keys of the inventory rows (docs/upgrade-process.md "Version inventory")
"""

from pitstop.compat.check import CompatVerdict, SkewFacts, evaluate
from pitstop.compat.components import COMPONENT_KEYS, COMPONENT_ROWS
from pitstop.compat.matrix import (
    Matrix,
    MatrixError,
    Release,
    Support,
    compat_dir,
    load_matrices,
    load_skew_policy,
    support_for,
)
from pitstop.compat.skew import ClusterVersions, SkewPolicy, SkewReport, check_upgrade
from pitstop.compat.versions import Version, VersionError, kube_minor, parse_version, try_parse_version

__all__ = [
    "COMPONENT_KEYS",
    "COMPONENT_ROWS",
    "ClusterVersions",
    "CompatVerdict",
    "Matrix",
    "MatrixError",
    "Release",
    "SkewFacts",
    "SkewPolicy",
    "SkewReport",
    "Support",
    "Version",
    "VersionError",
    "check_upgrade",
    "compat_dir",
    "evaluate",
    "kube_minor",
    "load_matrices",
    "load_skew_policy",
    "parse_version",
    "support_for",
    "try_parse_version",
]
