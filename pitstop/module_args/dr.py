"""Args of the `dr.*` modules: the recovery items beyond etcd (issue 19, runbooks/dr-readiness.yaml).

Backups go to S3-compatible storage through `activities/storage.py`'s streamed, SHA-256
verified upload, under `<prefix>/<cluster>/<item>/<YYYY>/<MM>/<DD>/<cluster>-<what>-<UTC time>.<ext>`.
What crosses into history is names, sizes, hashes and dates: never a private key's bytes.
"""

from __future__ import annotations

import posixpath
import re
from datetime import timedelta
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pitstop.module_args.storage import STORAGE_RETRY, S3Args, _blank_is_none
from pitstop.module_spec import ModuleArgs, ModuleSpec

DEFAULT_PREFIX = "dr-backups"
KUBERNETES_DIR = "/etc/kubernetes"
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


def _under_kubernetes_dir(path: str) -> str:
    """A path below /etc/kubernetes, given relative to it: the only node files these modules read
    (a hostile runbook cannot point them at /root/.ssh or /etc/shadow)."""
    normal = posixpath.normpath(path)
    if path.startswith("/") or normal.startswith("..") or not _PLAIN.match(normal):
        raise ValueError(
            f"{path!r} must be a plain path relative to {KUBERNETES_DIR} (no '..', no leading '/')"
        )
    return normal


class BackupS3Args(S3Args):
    cluster: str = Field(min_length=1, description="Cluster name: the folder of its backups.")
    prefix: str = Field(default=DEFAULT_PREFIX, description="Key prefix above the cluster name.")
    sse: Literal["AES256", "aws:kms"] | None = Field(default=None, description="Server-side encryption.")
    kms_key_id: str | None = Field(default=None, description="KMS key for `sse: aws:kms`.")
    create_bucket: bool = Field(default=False, description="Create the bucket when missing (embedded stack).")
    verify: Literal["read", "checksum"] = Field(
        default="read",
        description="After upload: read the object back and hash it, or compare the store's checksum.",
    )

    @field_validator("kms_key_id", "sse", mode="before")
    @classmethod
    def _blank_optional(cls, value: object) -> object:
        return _blank_is_none(value)

    @field_validator("cluster", "prefix")
    @classmethod
    def _key_part(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]*", value) or ".." in value:
            raise ValueError(f"{value!r} may hold only letters, digits, '.', '_', '-' and '/' (no '..')")
        return value.strip("/")

    @model_validator(mode="after")
    def _kms(self) -> Self:
        if self.kms_key_id is not None and self.sse != "aws:kms":
            raise ValueError("kms_key_id needs `sse: aws:kms`")
        return self


class PkiBackupArgs(BackupS3Args):
    paths: list[str] = Field(
        default_factory=lambda: ["pki"],
        description="What to archive, relative to /etc/kubernetes (directories whole); missing ones are "
        "reported.",
    )
    kubeadm_files: bool = Field(
        default=True,
        description="Also archive /etc/kubernetes/kubeadm*.yaml (the config the node was set up with).",
    )
    kubeadm_configmap: bool = Field(
        default=True,
        description="Also archive the ConfigMap kube-system/kubeadm-config (ClusterConfiguration), read "
        "from the API.",
    )
    become: bool = Field(default=True, description="Read as root (`sudo -n`): the keys are 0600 root.")
    timeout_seconds: int = Field(
        default=300, ge=10, le=3600, description="Limit for reading the node's files."
    )

    @field_validator("paths")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        return [_under_kubernetes_dir(p) for p in value]


class CertExpiryArgs(ModuleArgs):
    pki_dir: str = Field(default="pki", description="Directory of certificates, relative to /etc/kubernetes.")
    min_days: int = Field(default=30, ge=0, le=3650, description="Certificates expiring sooner are reported.")
    on_expiring: Literal["fail", "warn"] = Field(
        default="fail",
        description="`fail` the task when a certificate expires within min_days, or only `warn`.",
    )
    become: bool = Field(default=True, description="Read as root (`sudo -n`).")

    @field_validator("pki_dir")
    @classmethod
    def _dir(cls, value: str) -> str:
        return _under_kubernetes_dir(value)


class KindRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    api_version: str = Field(description="e.g. kueue.x-k8s.io/v1beta1")
    kind: str = Field(description="e.g. ClusterQueue")

    @field_validator("kind")
    @classmethod
    def _not_secret_bearing(cls, value: str) -> str:
        # An export is YAML in a bucket: a Secret's values (or a ServiceAccount token's) would
        # be written there in clear, whatever the runbook meant. Back them up with the secret store.
        if value in ("Secret", "ServiceAccountToken", "TokenRequest"):
            raise ValueError(f"{value} objects are never exported (their values would be stored in clear)")
        return value


DEFAULT_KINDS: list[dict[str, str]] = [
    {"api_version": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue"},
    {"api_version": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue"},
    {"api_version": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor"},
    {"api_version": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass"},
    {"api_version": "scheduling.k8s.io/v1", "kind": "PriorityClass"},
    {"api_version": "v1", "kind": "ResourceQuota"},
    {"api_version": "v1", "kind": "LimitRange"},
    {"api_version": "networking.k8s.io/v1", "kind": "NetworkPolicy"},
]


class ExportObjectsArgs(BackupS3Args):
    kinds: list[KindRef] = Field(
        default_factory=lambda: [KindRef.model_validate(k) for k in DEFAULT_KINDS],
        description="Kinds to export (Kueue queues and flavors, priority classes, quotas, limit ranges, "
        "network policies by default); a kind the cluster does not serve is reported as not installed.",
    )
    include_system_priority_classes: bool = Field(
        default=False, description="Also export system-cluster-critical / system-node-critical."
    )


class HttpTarget(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="What the endpoint is (`container registry`).")
    url: str = Field(
        default="",
        description="http(s) URL; its scheme://host:port must be in policy http.endpoints. Empty: not "
        "configured.",
    )
    kind: Literal["oci_registry", "http", "tls"] = Field(
        default="http",
        description="`oci_registry`: GET <url>/v2/, reachable on 200 or 401 (OCI distribution spec); "
        "`http`: GET <url>, reachable on any status below 500; `tls`: the https URL's name resolves "
        "and its server certificate covers the name and lasts `cert_min_days` more (no request sent).",
    )

    @field_validator("url", mode="before")
    @classmethod
    def _strip(cls, value: object) -> object:
        return value.strip() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _tls_is_https(self) -> Self:
        # The policy allowed scheme://host:port; a handshake on another port (an http URL's
        # default 80 vs 443) would reach a server it did not allow.
        # (A template is judged once rendered: the activity parses its arguments again.)
        rendered = "{{" not in self.url
        if self.kind == "tls" and self.url and rendered and not self.url.lower().startswith("https://"):
            raise ValueError(f"target {self.name!r}: a tls check needs an https:// URL, got {self.url!r}")
        return self


class HttpCheckArgs(ModuleArgs):
    targets: list[HttpTarget] = Field(
        description="Endpoints to check; an empty URL is reported unconfigured."
    )
    timeout_seconds: float = Field(default=10.0, gt=0, le=120, description="Per request.")
    fail_on_unreachable: bool = Field(
        default=False, description="Fail the task when any target is unreachable."
    )
    cert_min_days: int = Field(
        default=30, ge=0, le=3650, description="`tls` targets: a certificate expiring sooner is not ok."
    )


class GitopsSourceArgs(ModuleArgs):
    namespace: str | None = Field(default=None, description="Only this namespace (default: all).")


class ReportItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item: str = Field(min_length=1, description="Recovery item (`etcd snapshot`).")
    verified: bool = Field(description="Whether this run verified it.")
    evidence: str = Field(default="", description="What shows it (object key + sha256, expiry date...).")
    why: str = Field(default="", description="Why it is unverified (not configured, not checkable yet...).")

    @field_validator("verified", mode="before")
    @classmethod
    def _truthy(cls, value: object) -> object:
        # A `when`-skipped task's registered value renders as "" or None: not verified.
        if value in ("", None):
            return False
        return value


class ReportArgs(ModuleArgs):
    title: str = Field(default="DR readiness", description="Heading of the table.")
    items: list[ReportItem] = Field(min_length=1, description="One row per recovery item.")
    fail_on_unverified: list[str] = Field(
        default_factory=list, description="Items that must be verified; the task fails naming them."
    )


PKI_BACKUP: ModuleSpec[PkiBackupArgs] = ModuleSpec(
    name="dr.pki_backup",
    args_model=PkiBackupArgs,
    summary="Archive a control-plane node's /etc/kubernetes/pki and kubeadm config (node files over SSH, "
    "the kubeadm-config ConfigMap) to S3, SHA-256 verified; returns file names, sizes and hashes only.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=30),
    heartbeat_timeout=timedelta(minutes=2),
    retry=STORAGE_RETRY,
)
CERT_EXPIRY: ModuleSpec[CertExpiryArgs] = ModuleSpec(
    name="dr.cert_expiry",
    args_model=CertExpiryArgs,
    summary="notAfter of every certificate (*.crt, public only) under /etc/kubernetes/pki on the node; "
    "fails or warns when one expires within min_days.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=5),
    local="always",
)
EXPORT_OBJECTS: ModuleSpec[ExportObjectsArgs] = ModuleSpec(
    name="dr.export_objects",
    args_model=ExportObjectsArgs,
    summary="Queue and policy objects (Kueue, PriorityClasses, quotas, limit ranges, network policies) "
    "cleaned of status and server fields, as one YAML document set in S3, SHA-256 verified.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=15),
    heartbeat_timeout=timedelta(minutes=2),
    retry=STORAGE_RETRY,
)
HTTP_CHECK: ModuleSpec[HttpCheckArgs] = ModuleSpec(
    name="dr.http_check",
    args_model=HttpCheckArgs,
    summary="Reachability of HTTP endpoints (an OCI registry's /v2/, a model registry) the worker policy "
    "allows (http.endpoints); unconfigured ones are reported, not contacted.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=5),
    local="always",
)
GITOPS_SOURCE: ModuleSpec[GitopsSourceArgs] = ModuleSpec(
    name="dr.gitops_source",
    args_model=GitopsSourceArgs,
    summary="The GitOps source at its deployed revision: Flux GitRepository/Kustomization or Argo CD "
    "Application status; `found: false` when no GitOps controller's CRDs are served.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=5),
    local="always",
)
REPORT: ModuleSpec[ReportArgs] = ModuleSpec(
    name="dr.report",
    args_model=ReportArgs,
    summary="The DR readiness table: each recovery item verified (with evidence) or unverified (with why).",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=1),
    local="always",
)

SPECS: list[ModuleSpec[Any]] = [PKI_BACKUP, CERT_EXPIRY, EXPORT_OBJECTS, HTTP_CHECK, GITOPS_SOURCE, REPORT]
