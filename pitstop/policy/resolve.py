"""Turn the operator's policy file into the effective policy: every default resolved to an
absolute path (symlinks followed), URL or grant, each with where it came from; rules that would
reach everything (`/`, the worker user's home) and grants that could never apply are refused
with the file's line."""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pitstop.policy.effective import (
    BUILT_IN,
    ClusterRule,
    Dir,
    EtcdRule,
    Grant,
    HttpRule,
    PrometheusRule,
    S3Rule,
    WorkerPolicy,
)
from pitstop.policy.errors import PolicyError
from pitstop.policy.model import PolicyFile
from pitstop.policy.urls import normalize_endpoint

HOME_ENV = "PITSTOP_HOME"
RUNBOOK_DIR_ENV = "PITSTOP_RUNBOOK_DIR"
SECRETS_DIR_ENV = "PITSTOP_SECRETS_DIR"
# Never readable or writable by a module, whatever a rule says.
SYSTEM_DENIED = ("/proc", "/sys", "/dev")
HOME_DENIED = (".ssh", ".kube", ".aws", ".gnupg", ".docker", ".config", ".local", ".netrc")


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


def resolve(
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
    clusters = _clusters(r, parsed)
    s3 = _s3_rules(r, parsed)
    etcd = _etcd_rules(r, parsed)
    prometheus = _prometheus_rules(r, parsed)
    secrets = _secrets(r, parsed, s3, etcd, prometheus)
    return WorkerPolicy(
        source=source,
        source_origin=why,
        home=Dir(path=home_path, origin=home_origin),
        runbook_dir=Dir(path=runbook_path, origin=runbook_origin),
        work_root=work_root,
        runbooks_from_requests=parsed.runbooks.from_requests,
        runbooks_origin=r.origin("runbooks", "from_requests")
        if "runbooks" in parsed.model_fields_set
        else BUILT_IN,
        read=read,
        write=write,
        denied=_denied(r, source, clusters_dir, clusters),
        clusters_dir=clusters_dir,
        clusters=clusters,
        s3=tuple(s3),
        etcd=tuple(etcd),
        http=tuple(_http_rules(r, parsed)),
        prometheus=tuple(prometheus),
        secrets=secrets,
    )


def _clusters(r: _Resolver, parsed: PolicyFile) -> dict[str, ClusterRule]:
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
            allow_delete_in=tuple(section.allow_delete_in),
            origin=r.origin(*at),
        )
    return clusters


def _s3_rules(r: _Resolver, parsed: PolicyFile) -> list[S3Rule]:
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
    return s3


def _etcd_rules(r: _Resolver, parsed: PolicyFile) -> list[EtcdRule]:
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
    return etcd


def _http_rules(r: _Resolver, parsed: PolicyFile) -> list[HttpRule]:
    rules: list[HttpRule] = []
    for i, url in enumerate(parsed.http.endpoints):
        try:
            normalized = normalize_endpoint(url)
        except ValueError as exc:
            raise r.error(f"http.endpoints: {exc}", "http", "endpoints", i) from None
        if normalized == "aws":
            raise r.error("http.endpoints: give scheme://host:port, not 'aws'", "http", "endpoints", i)
        rules.append(HttpRule(endpoint=normalized, shown=url, origin=r.origin("http", "endpoints", i)))
    return rules


def _prometheus_rules(r: _Resolver, parsed: PolicyFile) -> list[PrometheusRule]:
    rules: list[PrometheusRule] = []
    for i, url in enumerate(parsed.prometheus.endpoints):
        loc = ("prometheus", "endpoints", i)
        try:
            normalized = normalize_endpoint(url)
        except ValueError as exc:
            raise r.error(f"prometheus.endpoints: {exc}", *loc) from None
        if normalized == "aws":
            raise r.error("prometheus.endpoints: give scheme://host:port, not 'aws'", *loc)
        rules.append(PrometheusRule(endpoint=normalized, shown=url, origin=r.origin(*loc)))
    return rules


def _secrets(
    r: _Resolver,
    parsed: PolicyFile,
    s3: list[S3Rule],
    etcd: list[EtcdRule],
    prometheus: list[PrometheusRule] | None = None,
) -> dict[str, Grant]:
    secrets: dict[str, Grant] = {}
    for name, grant in parsed.secrets.items():
        endpoints: tuple[str, ...] | None = None
        if grant.endpoints is not None:
            # Each endpoint-scoped purpose is scoped against its own section's endpoints.
            by_purpose: dict[str, tuple[str, list[S3Rule] | list[EtcdRule] | list[PrometheusRule]]] = {
                "s3_credentials": ("s3.endpoints", s3),
                "etcd_tls": ("etcd.endpoints", etcd),
                "prometheus_token": ("prometheus.endpoints", prometheus or []),
            }
            where, rules = by_purpose[grant.purpose]
            known = {rule.endpoint for rule in rules}
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
    return secrets


def _denied(
    r: _Resolver, source: Path | None, clusters_dir: Dir, clusters: dict[str, ClusterRule]
) -> tuple[Dir, ...]:
    """What no rule opens: system directories, the worker user's credentials, its Python
    installation (writes), the secrets directory, cluster credentials and the policy file."""
    denied: list[Dir] = [Dir(path=Path(p), origin=f"{BUILT_IN} (system)") for p in SYSTEM_DENIED]
    denied += [
        Dir(path=r.user_home / name, origin=f"{BUILT_IN} (the worker user's credentials)")
        for name in HOME_DENIED
    ]
    denied += [
        Dir(path=path, origin=f"{BUILT_IN} (the worker's Python installation)", writes_only=True)
        for path in _python_dirs()
    ]
    secrets_dir = r.environ.get(SECRETS_DIR_ENV)
    if secrets_dir:
        denied.append(Dir(path=Path(os.path.realpath(secrets_dir)), origin=f"{SECRETS_DIR_ENV} (secrets)"))
    denied.append(clusters_dir.model_copy(update={"origin": "clusters_dir (cluster credentials)"}))
    if source is not None:
        denied.append(Dir(path=source, origin="the policy file itself"))
    for rule in clusters.values():
        for held in (rule.kubeconfig, rule.known_hosts):
            if held is not None:
                denied.append(Dir(path=held, origin=f"clusters.{rule.name} (cluster credentials)"))
    return tuple(denied)


def _python_dirs() -> list[Path]:
    """Where Python finds code: a file written there (a `.pth`) would run in the next process."""
    found = {sys.prefix, sys.base_prefix, site.getusersitepackages(), *site.getsitepackages()}
    found.update(sysconfig.get_paths().values())
    dirs = sorted({Path(os.path.realpath(p)) for p in found if p})
    return [d for d in dirs if not any(other in d.parents for other in dirs)]
