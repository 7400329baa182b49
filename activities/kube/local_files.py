"""Manifest files on the worker, as the worker policy allows modules to read them.

`kube.apply src` and `kube.crd_webhook_check new_crds` name files or directories (relative to
the runbook directory); each named path, and then each file found below a directory, must be
readable under the policy's files rule, judged by its real path: a symlink inside an allowed
directory that points elsewhere is refused like the path it points to.
"""

from __future__ import annotations

from pathlib import Path

from pitstop.contracts import ModuleCall
from pitstop.kube.manifests import manifest_files
from pitstop.policy.files import readable


def allowed_manifest_files(call: ModuleCall, paths: list[str], field: str, *, recursive: bool) -> list[Path]:
    """Every manifest file the paths name, each allowed (PolicyViolation before any is read)."""
    what = f"{call.module}: {field}"
    found: list[Path] = []
    for raw in paths:
        top = readable(raw, run_id=call.run_id, what=what, relative_to="runbook")
        for file in manifest_files(top.path, recursive=recursive):
            found.append(readable(str(file), run_id=call.run_id, what=what, relative_to="runbook").path)
    return found
