"""Where and how to reach one host: from the host's vars and the inventory's `cluster.ssh`.

Ansible's connection variables win over the cluster defaults, as in Ansible:
`ansible_host` (address; default the inventory name), `ansible_port` (default
`cluster.ssh.port`, 22), `ansible_user` (default `cluster.ssh.user`, then the worker's user).
The key (a secret the policy grants as that cluster's `ssh_key`) and the jump host come from
`cluster.ssh`; the nodes' known_hosts is the worker's file for the cluster (worker policy),
or a secret the inventory names in `cluster.ssh.known_hosts_secret`.
"""

from __future__ import annotations

import getpass
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from pitstop.contracts import ModuleCall
from pitstop.module_spec import SecretRef
from pitstop.policy.clusters import cluster_rule
from pitstop.policy.errors import policy_violation
from pitstop.policy.grants import check_grant
from pitstop.policy.load import current_policy
from pitstop.ssh.errors import invalid_args

DEFAULT_CONNECT_TIMEOUT_S = 10.0

_JUMP = re.compile(
    r"^(?:(?P<user>[^@\s]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:@\s\[\]]+))(?::(?P<port>\d+))?$"
)


class JumpHost(BaseModel):
    """A ProxyJump hop, written `user@host:port` (user and port optional)."""

    model_config = ConfigDict(frozen=True)

    host: str
    port: int = 22
    user: str | None = None

    @classmethod
    def parse(cls, spec: str) -> JumpHost:
        match = _JUMP.match(spec.strip())
        port = int(match.group("port")) if match and match.group("port") else 22
        if match is None or not 1 <= port <= 65535:
            raise invalid_args(
                f"cluster.ssh.jump_host {spec!r} is not 'user@host:port' (user and port optional), "
                "e.g. 'ops@bastion.example.com:22'"
            )
        return cls(host=match.group("v6") or match.group("host"), port=port, user=match.group("user"))

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"


class SSHTarget(BaseModel):
    """Everything needed to open (or reuse) an SSH connection to one host."""

    model_config = ConfigDict(frozen=True)

    name: str
    host: str
    port: int = 22
    user: str
    # The inventory's cluster: the secrets' grants are scoped by it.
    cluster: str = ""
    key: SecretRef | None = None
    known_hosts: str | None = None
    known_hosts_secret: SecretRef | None = None
    jump: JumpHost | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH looks up in known_hosts: `host`, or `[host]:port` off port 22."""
        return known_hosts_name(self.host, self.port)

    @property
    def pool_key(self) -> tuple[str, int, str, str, str]:
        """Connections are shared per host, port, user and route; the credentials and host
        keys they were checked with are part of the key, so a call configured differently
        never rides on a connection verified under another configuration."""
        key = f"{self.key.secret}/{self.key.key}" if self.key else ""
        known = (
            f"secret:{self.known_hosts_secret.secret}/{self.known_hosts_secret.key}"
            if self.known_hosts_secret
            else f"file:{self.known_hosts}"
        )
        return (self.host, self.port, self.user, str(self.jump or ""), f"{self.cluster}|{key}|{known}")

    def describe(self) -> str:
        via = f" via {self.jump}" if self.jump else ""
        return f"{self.user}@{self.address}{via}"


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def _var(host_vars: dict[str, Any], *names: str) -> Any:
    for name in names:
        value = host_vars.get(name)
        if value is not None and value != "":
            return value
    return None


def _port(value: Any, host: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if not 1 <= port <= 65535:
        raise invalid_args(f"host {host}: ansible_port {value!r} is not a TCP port (1-65535)")
    return port


def target_for(call: ModuleCall) -> SSHTarget:
    """The SSH target of a module call, from its host vars, the cluster's SSH defaults and the
    worker's known_hosts for the cluster (PolicyViolation when the worker has none)."""
    hv = call.host_vars
    ssh = call.cluster.ssh if call.cluster is not None else None
    port_var = _var(hv, "ansible_port", "ansible_ssh_port")
    rule = cluster_rule(call.cluster.name if call.cluster else None, call.module)
    known_secret = ssh.known_hosts_secret if ssh else None
    if known_secret is None and rule.known_hosts is None:
        raise policy_violation(
            f"{call.module}: this worker has no known_hosts for the nodes of cluster {rule.name!r} "
            f"({rule.origin}), so their host keys cannot be checked",
            fix=f"ask the worker's operator to put it at "
            f"{current_policy().clusters_dir.path / rule.name / 'known_hosts'} or set "
            f"clusters.{rule.name}.known_hosts in PITSTOP_WORKER_POLICY (or name a known_hosts secret "
            "in the inventory's cluster.ssh.known_hosts_secret)",
        )
    # Checked at every call, not only when a connection is opened: a pooled connection made
    # under an earlier grant is not used once the policy no longer allows its key.
    if ssh is not None and ssh.key is not None:
        check_grant(ssh.key.secret, "ssh_key", what=f"{call.module}: cluster.ssh.key", cluster=rule.name)
    if known_secret is not None:
        check_grant(
            known_secret.secret,
            "ssh_known_hosts",
            what=f"{call.module}: cluster.ssh.known_hosts_secret",
            cluster=rule.name,
        )
    return SSHTarget(
        name=call.host,
        host=str(_var(hv, "ansible_host", "ansible_ssh_host") or call.host),
        port=_port(port_var, call.host) if port_var is not None else (ssh.port if ssh else 22),
        user=str(
            _var(hv, "ansible_user", "ansible_ssh_user") or (ssh.user if ssh else None) or getpass.getuser()
        ),
        cluster=rule.name,
        key=ssh.key if ssh else None,
        known_hosts=str(rule.known_hosts) if rule.known_hosts else None,
        known_hosts_secret=known_secret,
        jump=JumpHost.parse(ssh.jump_host) if ssh and ssh.jump_host else None,
    )
