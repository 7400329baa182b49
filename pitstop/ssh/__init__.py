"""SSH for pitstop's modules: targets from the inventory, a pooled and strictly verified
paramiko connection per host, command execution with bounded output, and the remote
protocol the modules speak (`pitstop.ssh.protocol`).
"""

from pitstop.ssh.connect import Connection, open_connection
from pitstop.ssh.errors import ChannelLost
from pitstop.ssh.execute import CommandResult, run_command
from pitstop.ssh.pool import SSHPool, close_all, default_pool
from pitstop.ssh.target import JumpHost, SSHTarget, target_for

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
