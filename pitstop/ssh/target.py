"""Where and how to reach one host: from the host's vars and the inventory's `cluster.ssh`.

Ansible's connection variables win over the cluster defaults, as in Ansible:
`ansible_host` (address; default the inventory name), `ansible_port` (default
`cluster.ssh.port`, 22), `ansible_user` (default `cluster.ssh.user`, then the worker's user).
The key, known_hosts and jump host come from `cluster.ssh`.
"""

from __future__ import annotations

import getpass
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pitstop.contracts import ModuleCall
from pitstop.modules import SecretRef
from pitstop.ssh.errors import invalid_args

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
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
        return (self.host, self.port, self.user, str(self.jump or ""), f"{key}|{known}")

    def describe(self) -> str:
        via = f" via {self.jump}" if self.jump else ""
        return f"{self.user}@{self.address}{via}"


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def worker_path(path: str) -> Path:
    """A path on the worker: absolute, `~`-relative, or relative to PITSTOP_RUNBOOK_DIR."""
    expanded = Path(path).expanduser()
    if expanded.is_absolute():
        return expanded
    return Path(os.environ.get("PITSTOP_RUNBOOK_DIR", "runbooks")) / expanded


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
    """The SSH target of a module call, from its host vars and the cluster's SSH defaults."""
    hv = call.host_vars
    ssh = call.cluster.ssh if call.cluster is not None else None
    port_var = _var(hv, "ansible_port", "ansible_ssh_port")
    known = ssh.known_hosts if ssh and ssh.known_hosts else None
    return SSHTarget(
        name=call.host,
        host=str(_var(hv, "ansible_host", "ansible_ssh_host") or call.host),
        port=_port(port_var, call.host) if port_var is not None else (ssh.port if ssh else 22),
        user=str(
            _var(hv, "ansible_user", "ansible_ssh_user") or (ssh.user if ssh else None) or getpass.getuser()
        ),
        key=ssh.key if ssh else None,
        known_hosts=str(worker_path(known)) if known else None,
        known_hosts_secret=ssh.known_hosts_secret if ssh else None,
        jump=JumpHost.parse(ssh.jump_host) if ssh and ssh.jump_host else None,
    )
