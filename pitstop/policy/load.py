"""Find, read and validate the worker policy; resolve its defaults.

Which file: `$PITSTOP_WORKER_POLICY` when set (it must exist), else
`$PITSTOP_HOME/worker-policy.yaml` when present (what `pitstop dev up` writes for the embedded
stack), else none: the built-in defaults alone. Errors are `PolicyError` with
`file:line:column: message`, so a worker can refuse to start with one line an operator can act on.

Activities call `current_policy()`: the same, cached until the file or the environment it
depends on changes, raising a PolicyViolation (not a PolicyError) when the file went bad.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pitstop.policy.effective import BUILT_IN, ClusterRule, Dir, EtcdRule, Grant, S3Rule, WorkerPolicy
from pitstop.policy.errors import POLICY_ENV, PolicyError, policy_violation
from pitstop.policy.model import (
    ClusterSection,
    EtcdSection,
    FilesSection,
    GrantSection,
    PolicyFile,
    S3EndpointSection,
    S3Section,
)
from pitstop.policy.urls import normalize_endpoint

DEFAULT_FILE_NAME = "worker-policy.yaml"
HOME_ENV = "PITSTOP_HOME"
RUNBOOK_DIR_ENV = "PITSTOP_RUNBOOK_DIR"
SECRETS_DIR_ENV = "PITSTOP_SECRETS_DIR"
# Never readable or writable by a module, whatever a rule says.
SYSTEM_DENIED = ("/proc", "/sys", "/dev")
HOME_DENIED = (".ssh", ".kube", ".aws", ".gnupg", ".docker", ".config", ".local", ".netrc")


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
        return _resolve(PolicyFile(), None, why, None, environ)
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
        return _resolve(parsed, path.resolve(), why, root, environ)
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
    sections: dict[str, type[BaseModel]] = {"files": FilesSection, "s3": S3Section, "etcd": EtcdSection}
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


# --- resolving ---------------------------------------------------------------------------------


class _Resolver:
    def __init__(self, source: Path | None, root: Any, environ: Mapping[str, str]) -> None:
        self.source = source
        self.root = root  # the YAML document's root Node, None without a file
        self.environ = environ
        self.base = source.parent if source is not None else Path.cwd()
        self.user_home = Path(environ.get("HOME") or Path.home()).expanduser().resolve()

    def origin(self, *loc: str | int) -> str:
        if self.root is None or self.source is None:
            return BUILT_IN
        line, _ = self.root.child(*loc).pos(key=True)
        return f"{self.source}:{line}"

    def error(self, message: str, *loc: str | int) -> PolicyError:
        if self.root is None:
            return PolicyError(message)
        return PolicyError(f"{self.root.child(*loc).error(message)}; fix the worker policy")

    def path(self, raw: str, *loc: str | int) -> Path:
        expanded = Path(raw).expanduser()
        if not expanded.is_absolute():
            expanded = self.base / expanded
        return Path(os.path.realpath(expanded))

    def root_dir(self, raw: str, what: str, *loc: str | int) -> Dir:
        path = self.path(raw, *loc)
        self.check_root(path, what, *loc)
        return Dir(path=path, origin=self.origin(*loc))

    def check_root(self, path: Path, what: str, *loc: str | int) -> None:
        if path == Path("/"):
            raise self.error(f"{what}: / would let modules reach every file; name a directory for them", *loc)
        if path == self.user_home or path in self.user_home.parents:
            raise self.error(
                f"{what}: {path} holds the worker user's home directory ({self.user_home}); name a "
                "directory for pitstop's files instead",
                *loc,
            )

    def env_dir(self, name: str, default: str) -> tuple[Path, str]:
        raw = self.environ.get(name)
        origin = name if raw else f"{BUILT_IN} (./{default})"
        return Path(os.path.realpath(Path(raw or default).expanduser())), origin


def _resolve(
    parsed: PolicyFile, source: Path | None, why: str, root: Any, environ: Mapping[str, str]
) -> WorkerPolicy:
    r = _Resolver(source, root, environ)
    home_path, home_origin = r.env_dir(HOME_ENV, ".pitstop")
    runbook_path, runbook_origin = r.env_dir(RUNBOOK_DIR_ENV, "runbooks")
    for path, name in ((runbook_path, RUNBOOK_DIR_ENV), (home_path, HOME_ENV)):
        if path == Path("/") or path == r.user_home or path in r.user_home.parents:
            raise PolicyError(
                f"{name}={path}: modules would reach the whole home directory or filesystem; point it "
                "at a directory of its own"
            )
    files = parsed.files
    work_root = (
        r.root_dir(files.work_dir, "files.work_dir", "files", "work_dir")
        if files.work_dir
        else Dir(path=home_path / "work", origin=f"{BUILT_IN} (${HOME_ENV}/work)")
    )
    clusters_dir = (
        Dir(path=r.path(parsed.clusters_dir, "clusters_dir"), origin=r.origin("clusters_dir"))
        if parsed.clusters_dir
        else Dir(path=home_path / "clusters", origin=f"{BUILT_IN} (${HOME_ENV}/clusters)")
    )
    read = tuple(r.root_dir(p, "files.read", "files", "read", i) for i, p in enumerate(files.read))
    write = tuple(r.root_dir(p, "files.write", "files", "write", i) for i, p in enumerate(files.write))

    clusters: dict[str, ClusterRule] = {}
    for name, section in parsed.clusters.items():
        at = ("clusters", name)
        clusters[name] = ClusterRule(
            name=name,
            kubeconfig=r.path(section.kubeconfig, *at, "kubeconfig") if section.kubeconfig else None,
            context=section.context,
            in_cluster=section.in_cluster,
            allow_exec=section.allow_exec,
            known_hosts=r.path(section.known_hosts, *at, "known_hosts") if section.known_hosts else None,
            origin=r.origin(*at),
        )

    s3: list[S3Rule] = []
    for i, endpoint in enumerate(parsed.s3.endpoints):
        try:
            normalized = normalize_endpoint(endpoint.url)
        except ValueError as exc:
            raise r.error(f"s3.endpoints: {exc}", "s3", "endpoints", i, "url") from None
        s3.append(
            S3Rule(
                endpoint=normalized,
                shown=endpoint.url,
                buckets=tuple(endpoint.buckets),
                origin=r.origin("s3", "endpoints", i),
            )
        )
    etcd: list[EtcdRule] = []
    for i, url in enumerate(parsed.etcd.endpoints):
        try:
            normalized = normalize_endpoint(url)
        except ValueError as exc:
            raise r.error(f"etcd.endpoints: {exc}", "etcd", "endpoints", i) from None
        if normalized == "aws":
            raise r.error(
                "etcd.endpoints: 'aws' is an S3 endpoint, not an etcd client URL", "etcd", "endpoints", i
            )
        etcd.append(EtcdRule(endpoint=normalized, shown=url, origin=r.origin("etcd", "endpoints", i)))

    secrets: dict[str, Grant] = {}
    for name, grant in parsed.secrets.items():
        endpoints: tuple[str, ...] | None = None
        if grant.endpoints is not None:
            rules = s3 if grant.purpose == "s3_credentials" else etcd
            known = {rule.endpoint for rule in rules}
            where = "s3.endpoints" if grant.purpose == "s3_credentials" else "etcd.endpoints"
            listed = []
            for i, url in enumerate(grant.endpoints):
                loc = ("secrets", name, "endpoints", i)
                try:
                    normalized = normalize_endpoint(url)
                except ValueError as exc:
                    raise r.error(f"secrets.{name}.endpoints: {exc}", *loc) from None
                if normalized not in known:
                    raise r.error(
                        f"secrets.{name}.endpoints: {url} is not in {where}, so the secret could "
                        f"never be used there; add it to {where} or remove it here",
                        *loc,
                    )
                listed.append(normalized)
            endpoints = tuple(listed)
        secrets[name] = Grant(
            name=name,
            purpose=grant.purpose,
            clusters=tuple(grant.clusters) if grant.clusters is not None else None,
            endpoints=endpoints,
            origin=r.origin("secrets", name),
        )

    denied: list[Dir] = [Dir(path=Path(p), origin=f"{BUILT_IN} (system)") for p in SYSTEM_DENIED]
    denied += [
        Dir(path=r.user_home / name, origin=f"{BUILT_IN} (the worker user's credentials)")
        for name in HOME_DENIED
    ]
    denied += [
        Dir(path=path, origin=f"{BUILT_IN} (the worker's Python installation)", writes_only=True)
        for path in _python_dirs()
    ]
    secrets_dir = environ.get(SECRETS_DIR_ENV)
    if secrets_dir:
        denied.append(Dir(path=Path(os.path.realpath(secrets_dir)), origin=f"{SECRETS_DIR_ENV} (secrets)"))
    denied.append(clusters_dir.model_copy(update={"origin": "clusters_dir (cluster credentials)"}))
    if source is not None:
        denied.append(Dir(path=source, origin="the policy file itself"))
    for rule in clusters.values():
        for held in (rule.kubeconfig, rule.known_hosts):
            if held is not None:
                denied.append(Dir(path=held, origin=f"clusters.{rule.name} (cluster credentials)"))
    return WorkerPolicy(
        source=source,
        source_origin=why,
        home=Dir(path=home_path, origin=home_origin),
        runbook_dir=Dir(path=runbook_path, origin=runbook_origin),
        work_root=work_root,
        read=read,
        write=write,
        denied=tuple(denied),
        clusters_dir=clusters_dir,
        clusters=clusters,
        s3=tuple(s3),
        etcd=tuple(etcd),
        secrets=secrets,
    )


def _python_dirs() -> list[Path]:
    """Where Python finds code: a file written there (a `.pth`) would run in the next process."""
    found = {sys.prefix, sys.base_prefix, site.getusersitepackages(), *site.getsitepackages()}
    found.update(sysconfig.get_paths().values())
    dirs = sorted({Path(os.path.realpath(p)) for p in found if p})
    return [d for d in dirs if not any(other in d.parents for other in dirs)]
