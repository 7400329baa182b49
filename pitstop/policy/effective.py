"""The policy a worker runs under: the file's rules with every default resolved to an absolute
path, URL or grant, each with where it came from (a `file:line`, an environment variable, a
registered cluster directory or the built-in default) so `--show-policy` can say so."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from pitstop.policy.model import Purpose

BUILT_IN = "built-in default"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Dir(_Frozen):
    """A directory (or file) of a files rule, resolved (symlinks followed)."""

    path: Path
    origin: str
    # In the deny list: refused for writes only (Python's own directories may be read).
    writes_only: bool = False


class ClusterRule(_Frozen):
    """How this worker reaches one cluster it is allowed to act on."""

    name: str
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False
    allow_exec: bool = False
    known_hosts: Path | None = None
    # Protected namespaces kube.delete may delete in (pitstop.kube.removals.PROTECTED_NAMESPACES).
    allow_delete_in: tuple[str, ...] = ()
    origin: str


class S3Rule(_Frozen):
    endpoint: str  # normalized: "aws" or scheme://host:port
    shown: str  # as the operator wrote it
    buckets: tuple[str, ...]
    origin: str


class EtcdRule(_Frozen):
    endpoint: str  # normalized scheme://host:port
    shown: str
    origin: str


class HttpRule(_Frozen):
    endpoint: str  # normalized scheme://host:port
    shown: str
    origin: str


class PrometheusRule(_Frozen):
    endpoint: str  # normalized scheme://host:port of a Prometheus or an Alertmanager
    shown: str
    origin: str


class Grant(_Frozen):
    """A secret bound to one purpose (and optionally to clusters or endpoints)."""

    name: str
    purpose: Purpose
    clusters: tuple[str, ...] | None = None
    endpoints: tuple[str, ...] | None = None  # normalized
    origin: str


class WorkerPolicy(_Frozen):
    """Everything the worker allows modules to touch; anything else is refused."""

    source: Path | None  # None: no policy file, built-in defaults only
    source_origin: str
    home: Dir
    runbook_dir: Dir
    work_root: Dir  # each run writes under work_root/<run>
    # False: a request may only name runbooks in runbook_dir, never carry its own.
    runbooks_from_requests: bool = True
    runbooks_origin: str = BUILT_IN
    read: tuple[Dir, ...] = ()
    write: tuple[Dir, ...] = ()
    denied: tuple[Dir, ...] = ()
    clusters_dir: Dir
    clusters: dict[str, ClusterRule] = {}
    s3: tuple[S3Rule, ...] = ()
    etcd: tuple[EtcdRule, ...] = ()
    http: tuple[HttpRule, ...] = ()
    prometheus: tuple[PrometheusRule, ...] = ()
    secrets: dict[str, Grant] = {}

    @property
    def described_source(self) -> str:
        return str(self.source) if self.source is not None else "built-in defaults (no policy file)"
