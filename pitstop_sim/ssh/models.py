"""Data of the simulated nodes' SSH endpoints that crosses a boundary: per-node faults (scenario
`faults.ssh`, `POST /_sim/nodes/{node}/ssh`) and what an endpoint reports about itself."""

from __future__ import annotations

from pydantic import BaseModel, Field

from pitstop_sim.models import Strict


class SshDrop(Strict):
    """Drop the node's SSH connection while a matching command runs.

    The command still runs on the node (a flash keeps flashing); only the client loses the
    connection, before the command's exit status reaches it.
    """

    command: str = Field(
        default="*",
        min_length=1,
        description=(
            "Part of the command as the node runs it (after `sudo -n`/`timeout` are unwrapped), "
            "e.g. 'pitstop-fwupdate --apply'; '*' matches any command."
        ),
    )
    count: int = Field(default=1, ge=1, description="Drop this many matching commands, then serve normally.")
    after_seconds: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Simulated seconds into the command before the drop; a command that ends sooner loses "
            "its exit status instead."
        ),
    )

    def matches(self, command: str) -> bool:
        return self.command == "*" or self.command in command


class SshNodeFaults(Strict):
    """How one node's SSH endpoint misbehaves (all off by default)."""

    flash_seconds: float | None = Field(
        default=None,
        ge=0,
        description=(
            "How long the firmware updater runs here (simulated seconds; default "
            "timing.firmware_flash_seconds)."
        ),
    )
    flash_fails: bool = Field(
        default=False, description="The updater fails (exit 3, nothing staged) after running."
    )
    drops: list[SshDrop] = Field(default_factory=list, description="Connection drops mid-command.")


class SshEndpointInfo(BaseModel):
    """`GET /_sim/nodes/{node}/ssh`: where a node's SSH endpoint listens and what it is doing."""

    node: str
    host: str
    port: int
    up: bool = Field(description="False while the node is rebooting (connections are refused).")
    host_key_type: str
    host_key_fingerprint: str = Field(description="SHA256 fingerprint, as `ssh-keygen -lf` prints it.")
    connections: int = Field(description="Open SSH connections.")
    commands: int = Field(description="Commands run since the cluster started.")
    running: list[str] = Field(description="Processes running on the node (`pid command`).")
    drops_injected: int = 0
    faults: SshNodeFaults
