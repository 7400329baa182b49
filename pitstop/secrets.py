"""Resolve `SecretRef`s inside activities: environment first, then files.

A reference `{secret: lab-ssh-key}` is looked up, in order, as
  1. the environment variable `PITSTOP_SECRET_LAB_SSH_KEY` (upper-cased, `-` and `.` → `_`;
     with `key: cert` → `PITSTOP_SECRET_LAB_SSH_KEY_CERT`);
  2. the file `$PITSTOP_SECRETS_DIR/lab-ssh-key` (with a key: `$PITSTOP_SECRETS_DIR/lab-ssh-key/cert`),
     which is how Kubernetes mounts a Secret as a volume.
Values are returned to the caller only: never logged, never put in errors or results.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from pitstop.modules import SecretRef

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


def resolve_secret(ref: SecretRef, environ: Mapping[str, str] | None = None) -> str:
    """The secret's value; SecretNotFound names every place looked at when it is missing."""
    env = os.environ if environ is None else environ
    for part, what in ((ref.secret, "name"), (ref.key, "key")):
        if part is not None and (not _NAME.match(part) or ".." in part):
            raise SecretNotFound(
                f"{_describe(ref)}: invalid secret {what} {part!r}; use letters, digits, '.', '_' and '-'"
            )
    var = env_var_name(ref)
    if var in env:
        return env[var]
    tried = [f"environment variable {var}"]
    directory = env.get(DIR_ENV)
    if directory:
        path = secret_file(ref, Path(directory))
        if path.is_file():
            return path.read_text()
        tried.append(f"file {path}")
    else:
        tried.append(f"a file under ${DIR_ENV} (not set)")
    raise SecretNotFound(f"{_describe(ref)} not found: looked for {' and '.join(tried)}")
