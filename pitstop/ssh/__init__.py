"""SSH for pitstop's modules: targets from the inventory, a pooled and strictly verified
paramiko connection per host, command execution with bounded output, and the remote
protocol the modules speak (`pitstop.ssh.protocol`).

The names below load on first use: validating a runbook needs only `protocol` (for module
arguments) and must not pay for importing paramiko (~0.1 s of every CLI command).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pitstop.ssh.connect import Connection, open_connection
    from pitstop.ssh.errors import ChannelLost
    from pitstop.ssh.execute import CommandResult, run_command
    from pitstop.ssh.pool import SSHPool, close_all, default_pool
    from pitstop.ssh.target import JumpHost, SSHTarget, target_for

_WHERE = {
    "Connection": "connect",
    "open_connection": "connect",
    "ChannelLost": "errors",
    "CommandResult": "execute",
    "run_command": "execute",
    "SSHPool": "pool",
    "close_all": "pool",
    "default_pool": "pool",
    "JumpHost": "target",
    "SSHTarget": "target",
    "target_for": "target",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'pitstop.ssh' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pitstop.ssh.{where}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ChannelLost",
    "CommandResult",
    "Connection",
    "JumpHost",
    "SSHPool",
    "SSHTarget",
    "close_all",
    "default_pool",
    "open_connection",
    "run_command",
    "target_for",
]
