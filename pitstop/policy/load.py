"""Find, read and validate the worker policy (its defaults are resolved in `resolve.py`).

Which file: `$PITSTOP_WORKER_POLICY` when set (it must exist), else
`$PITSTOP_HOME/worker-policy.yaml` when present (what `pitstop dev up` writes for the embedded
stack), else none: the built-in defaults alone. Errors are `PolicyError` with
`file:line:column: message`, so a worker can refuse to start with one line an operator can act on.

Activities call `current_policy()`: the same, cached until the file or the environment it
depends on changes, raising a PolicyViolation (not a PolicyError) when the file went bad.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pitstop.policy.effective import BUILT_IN, WorkerPolicy
from pitstop.policy.errors import POLICY_ENV, PolicyError, policy_violation
from pitstop.policy.model import (
    ClusterSection,
    EtcdSection,
    FilesSection,
    GrantSection,
    HttpSection,
    PolicyFile,
    PrometheusSection,
    S3EndpointSection,
    S3Section,
)
from pitstop.policy.resolve import HOME_ENV, RUNBOOK_DIR_ENV, SECRETS_DIR_ENV, resolve

DEFAULT_FILE_NAME = "worker-policy.yaml"


def policy_file(environ: Mapping[str, str] = os.environ) -> tuple[Path | None, str]:
    """(the policy file to read or None, why that one)."""
    explicit = environ.get(POLICY_ENV)
    if explicit:
        return Path(explicit).expanduser(), POLICY_ENV
    candidate = Path(environ.get(HOME_ENV) or ".pitstop") / DEFAULT_FILE_NAME
    if candidate.is_file():
        return candidate, f"${HOME_ENV}/{DEFAULT_FILE_NAME}"
    return None, BUILT_IN


def load_policy(environ: Mapping[str, str] = os.environ) -> WorkerPolicy:
    """The effective policy, or PolicyError naming file:line:column and the fix."""
    path, why = policy_file(environ)
    if path is None:
        return resolve(PolicyFile(), None, why, None, environ)
    # Imported here: the YAML loader with positions lives with the runbook language.
    from pitstop.runbook._checks import require_mapping, validate_model
    from pitstop.runbook._yaml import load_yaml
    from pitstop.runbook.errors import RunbookError

    try:
        doc = load_yaml(path)
        root = doc.root()
        if doc.data is None:
            parsed = PolicyFile()
        else:
            require_mapping(root, "a worker policy")
            _check_keys(root)
            parsed = validate_model(PolicyFile, doc.data, root, "the worker policy")
        return resolve(parsed, path.resolve(), why, root, environ)
    except RunbookError as exc:
        hint = f" (set by {POLICY_ENV})" if why == POLICY_ENV and exc.message == "file not found" else ""
        raise PolicyError(f"{exc}{hint}; fix the worker policy") from None


def _check_keys(root: Any) -> None:
    """Unknown keys anywhere in the file, each at its line with the nearest valid key."""
    from pitstop.runbook._checks import field_keys

    def check(node: Any, model: type[BaseModel], what: str) -> None:
        if isinstance(node.value, dict):
            node.check_keys(field_keys(model), what)

    def each(node: Any, model: type[BaseModel], what: str) -> None:
        value = node.value
        items = (
            value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
        )
        for key, _ in items:
            check(node.child(key), model, f"{what} {key!r}" if isinstance(key, str) else what)

    check(root, PolicyFile, "the worker policy")
    sections: dict[str, type[BaseModel]] = {
        "files": FilesSection,
        "s3": S3Section,
        "etcd": EtcdSection,
        "http": HttpSection,
        "prometheus": PrometheusSection,
    }
    for key, model in sections.items():
        if root.has(key):
            check(root.child(key), model, key)
    if root.has("clusters"):
        each(root.child("clusters"), ClusterSection, "cluster")
    if root.has("secrets"):
        each(root.child("secrets"), GrantSection, "secret")
    if root.has("s3") and isinstance(root.child("s3").value, dict) and root.child("s3").has("endpoints"):
        each(root.child("s3", "endpoints"), S3EndpointSection, "s3.endpoints item")


_cache: dict[tuple[Any, ...], WorkerPolicy] = {}
_cache_lock = threading.Lock()
_KEY_ENV = (POLICY_ENV, HOME_ENV, RUNBOOK_DIR_ENV, SECRETS_DIR_ENV, "HOME")


def current_policy(environ: Mapping[str, str] = os.environ) -> WorkerPolicy:
    """The policy modules are checked against (cached while its inputs are unchanged).

    A policy file that became invalid after the worker started refuses every check with a
    PolicyViolation naming the file and line, until the operator fixes it.
    """
    path, _ = policy_file(environ)
    stamp: tuple[Any, ...] = ()
    if path is not None:
        try:
            stat = path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        except OSError:
            stamp = ("missing",)
    key = (str(path), stamp, *(environ.get(name) for name in _KEY_ENV))
    with _cache_lock:
        found = _cache.get(key)
    if found is not None:
        return found
    try:
        policy = load_policy(environ)
    except PolicyError as exc:
        raise policy_violation(
            f"the worker's policy is invalid: {exc}", fix="the worker's operator must fix it"
        ) from None
    with _cache_lock:
        if len(_cache) > 16:
            _cache.clear()
        _cache[key] = policy
    return policy
