"""The worker policy file as the operator writes it (`PITSTOP_WORKER_POLICY`, YAML).

Every key is optional; what is left out keeps the safe default (see docs/policy.md):

```yaml
files:
  read: [/srv/firmware]          # besides the runbook directory and the run's work directory
  write: []                      # besides the run's work directory
  work_dir: /var/lib/pitstop/work
runbooks:
  from_requests: true            # false: only runbooks from the worker's runbook directory
clusters_dir: /etc/pitstop/clusters
clusters:
  prod: {kubeconfig: /etc/pitstop/prod.kubeconfig, context: prod, known_hosts: /etc/pitstop/prod.known_hosts}
s3:
  endpoints:
    - {url: aws, buckets: [acme-etcd-backups]}
etcd:
  endpoints: [https://10.0.0.11:2379]
prometheus:
  endpoints: [http://prometheus.monitoring:9090, http://alertmanager.monitoring:9093]
secrets:
  fleet-ssh-key: {purpose: ssh_key, clusters: [prod]}
  backup-s3: {purpose: s3_credentials, endpoints: [aws]}
  etcd-client: {purpose: etcd_tls}
```
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Purpose = Literal["ssh_key", "ssh_known_hosts", "s3_credentials", "etcd_tls", "prometheus_token"]
PURPOSES: tuple[Purpose, ...] = (
    "ssh_key",
    "ssh_known_hosts",
    "s3_credentials",
    "etcd_tls",
    "prometheus_token",
)
PURPOSE_WORDS: dict[str, str] = {
    "ssh_key": "the SSH key of a cluster's nodes",
    "ssh_known_hosts": "the known_hosts of a cluster's nodes",
    "s3_credentials": "S3 credentials",
    "etcd_tls": "etcd TLS material",
    "prometheus_token": "the bearer token of a Prometheus or Alertmanager endpoint",
}
# The same rule as secret names (pitstop.secrets): they become file and variable names.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FilesSection(_Section):
    read: list[str] = Field(
        default_factory=list,
        description="Directories modules may read from, besides the runbook directory and the run's "
        "work directory.",
    )
    write: list[str] = Field(
        default_factory=list,
        description="Directories modules may write to, besides the run's work directory.",
    )
    work_dir: str | None = Field(
        default=None,
        description="Where each run gets its own work directory (default: $PITSTOP_HOME/work).",
    )


class ClusterSection(_Section):
    kubeconfig: str | None = Field(default=None, description="Kubeconfig file of the cluster, on the worker.")
    context: str | None = Field(default=None, description="Context in it (default: its current-context).")
    in_cluster: bool = Field(
        default=False, description="Use the worker pod's service account instead of a kubeconfig."
    )
    allow_exec: bool = Field(
        default=False,
        description="Allow kubeconfig users with an `exec` or `auth-provider` plugin (they run programs).",
    )
    known_hosts: str | None = Field(default=None, description="known_hosts file of the cluster's nodes.")
    allow_delete_in: list[str] = Field(
        default_factory=list,
        description="Protected namespaces (kube-system, kube-public, kube-node-lease) in which "
        "kube.delete may delete objects on this cluster; it refuses them otherwise.",
    )

    @model_validator(mode="after")
    def _one_way_in(self) -> Self:
        if self.in_cluster and (self.kubeconfig or self.context):
            raise ValueError("give `kubeconfig` (and `context`) or `in_cluster: true`, not both")
        return self


class S3EndpointSection(_Section):
    url: str = Field(
        description="`aws` (AWS's own endpoints) or the endpoint URL, e.g. https://minio.internal:9000."
    )
    buckets: list[str] = Field(
        min_length=1, description="Buckets modules may use there; shell-style patterns (`pitstop-*`) work."
    )


class S3Section(_Section):
    endpoints: list[S3EndpointSection] = Field(default_factory=list)


class EtcdSection(_Section):
    endpoints: list[str] = Field(
        default_factory=list, description="etcd client URLs modules may connect to (scheme://host:port)."
    )


class HttpSection(_Section):
    endpoints: list[str] = Field(
        default_factory=list,
        description="http(s) endpoints (scheme://host:port) modules may send requests to: container and "
        "model registries dr.http_check probes.",
    )


class PrometheusSection(_Section):
    endpoints: list[str] = Field(
        default_factory=list,
        description="Prometheus and Alertmanager endpoints (scheme://host:port) prom.query and "
        "prom.alerts may query; a URL's path (a route prefix, a proxy path) is the runbook's.",
    )


class GrantSection(_Section):
    purpose: Purpose = Field(description="What the secret may be used as: " + ", ".join(PURPOSES) + ".")
    clusters: list[str] | None = Field(
        default=None, description="ssh_key / ssh_known_hosts: only for these clusters (default: any)."
    )
    endpoints: list[str] | None = Field(
        default=None,
        description="s3_credentials / etcd_tls / prometheus_token: only for these endpoints (default: any "
        "the policy allows).",
    )

    @model_validator(mode="after")
    def _scope_fits_purpose(self) -> Self:
        if self.clusters is not None and self.purpose not in ("ssh_key", "ssh_known_hosts"):
            raise ValueError(f"`clusters` scopes ssh_key and ssh_known_hosts grants, not {self.purpose}")
        if self.endpoints is not None and self.purpose not in (
            "s3_credentials",
            "etcd_tls",
            "prometheus_token",
        ):
            raise ValueError(
                f"`endpoints` scopes s3_credentials, etcd_tls and prometheus_token grants, not {self.purpose}"
            )
        return self


class RunbooksSection(_Section):
    from_requests: bool = Field(
        default=True,
        description="Run runbooks a request carries (the CLI sends the runbook, its task files and the "
        "inventory as a bundle). false: only runbooks from the worker's runbook directory "
        "(PITSTOP_RUNBOOK_DIR), e.g. a reviewed git checkout.",
    )


class PolicyFile(_Section):
    version: Literal[1] = 1
    files: FilesSection = Field(default_factory=FilesSection)
    runbooks: RunbooksSection = Field(default_factory=RunbooksSection)
    clusters_dir: str | None = Field(
        default=None,
        description="Directory of registered clusters: <name>/kubeconfig and <name>/known_hosts "
        "(default: $PITSTOP_HOME/clusters).",
    )
    clusters: dict[str, ClusterSection] = Field(default_factory=dict)
    s3: S3Section = Field(default_factory=S3Section)
    etcd: EtcdSection = Field(default_factory=EtcdSection)
    http: HttpSection = Field(default_factory=HttpSection)
    prometheus: PrometheusSection = Field(default_factory=PrometheusSection)
    secrets: dict[str, GrantSection] = Field(default_factory=dict)

    @field_validator("clusters", "secrets")
    @classmethod
    def _names(cls, value: dict[str, object]) -> dict[str, object]:
        for name in value:
            if not NAME.match(name) or ".." in name:
                raise ValueError(f"{name!r} is not a valid name; use letters, digits, '.', '_' and '-'")
        return value
