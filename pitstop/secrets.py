"""Resolve `SecretRef`s inside activities: environment first, then files.

A reference `{secret: lab-ssh-key}` is looked up, in order, as
  1. the environment variable `PITSTOP_SECRET_LAB_SSH_KEY` (upper-cased, `-` and `.` → `_`;
     with `key: cert` → `PITSTOP_SECRET_LAB_SSH_KEY_CERT`);
  2. the file `$PITSTOP_SECRETS_DIR/lab-ssh-key` (with a key: `$PITSTOP_SECRETS_DIR/lab-ssh-key/cert`),
     which is how Kubernetes mounts a Secret as a volume.
Values are returned to the caller only: never logged, never put in errors or results.

Every lookup names its purpose (`ssh_key`, `ssh_known_hosts`, `s3_credentials`, `etcd_tls`)
and, where it matters, the cluster or endpoints it is for; the worker policy must grant the
secret for exactly that (`pitstop.policy.grants`), or the lookup is refused as a
PolicyViolation before the secret is read. Each value handed out is recorded in the running
activity's scope so that the worker scrubs it from the activity's error, result and log lines
(`pitstop.policy.scrub`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from pitstop.module_spec import SecretRef
from pitstop.policy.effective import WorkerPolicy
from pitstop.policy.grants import check_grant
from pitstop.policy.model import Purpose
from pitstop.policy.scrub import record_secret

ENV_PREFIX = "PITSTOP_SECRET_"
DIR_ENV = "PITSTOP_SECRETS_DIR"

# Names become file names and environment variable names: no separators, no `..`.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SecretNotFound(LookupError):
    """The secret is in none of the places pitstop looks; the message lists them."""


def _describe(ref: SecretRef) -> str:
    return f"secret {ref.secret!r}" + (f" (key {ref.key!r})" if ref.key else "")


def env_var_name(ref: SecretRef) -> str:
    parts = [ref.secret, *([ref.key] if ref.key else [])]
    return ENV_PREFIX + "_".join(re.sub(r"[-.]", "_", p).upper() for p in parts)


def secret_file(ref: SecretRef, directory: Path) -> Path:
    return directory / ref.secret / ref.key if ref.key else directory / ref.secret


def resolve_secret(
    ref: SecretRef,
    purpose: Purpose,
    *,
    what: str,
    cluster: str | None = None,
    endpoints: list[str] | None = None,
    environ: Mapping[str, str] | None = None,
    policy: WorkerPolicy | None = None,
) -> str:
    """The secret's value, once the policy grants it for `purpose` (PolicyViolation otherwise);
    SecretNotFound names every place looked at when it is missing. `what` names the field
    (e.g. "storage.upload: access_key_id") in messages; `endpoints` are normalized URLs."""
    env = os.environ if environ is None else environ
    for part, kind in ((ref.secret, "name"), (ref.key, "key")):
        if part is not None and (not _NAME.match(part) or ".." in part):
            raise SecretNotFound(
                f"{_describe(ref)}: invalid secret {kind} {part!r}; use letters, digits, '.', '_' and '-'"
            )
    check_grant(ref.secret, purpose, what=what, cluster=cluster, endpoints=endpoints, policy=policy)
    var = env_var_name(ref)
    if var in env:
        return _handed_out(ref, env[var])
    tried = [f"environment variable {var}"]
    directory = env.get(DIR_ENV)
    if directory:
        path = secret_file(ref, Path(directory))
        if path.is_file():
            return _handed_out(ref, path.read_text())
        tried.append(f"file {path}")
    else:
        tried.append(f"a file under ${DIR_ENV} (not set)")
    raise SecretNotFound(f"{_describe(ref)} not found: looked for {' and '.join(tried)}")


def _handed_out(ref: SecretRef, value: str) -> str:
    record_secret(ref.secret, value)
    return value
