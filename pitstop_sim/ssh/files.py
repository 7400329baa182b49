"""Files a worker needs to reach the simulated nodes, written next to the kubeconfig:

known_hosts            `[127.0.0.1]:PORT ssh-ed25519 AAAA...`, one line per node
secrets/sim-ssh-key    the client's private key (OpenSSH format, 0600): the secret
                       `{secret: sim-ssh-key}` once PITSTOP_SECRETS_DIR points at `secrets/`
inventory.yaml         the nodes as an inventory: a `cluster:` block (the cluster's name, SSH
                       user and key; the worker holds its kubeconfig and known_hosts once the
                       cluster is registered with it) and hosts with ansible_host/ansible_port,
                       failure_domain and node_name, in group `gpu` and one group per domain;
                       control-plane nodes (scenarios with a `platform:`) in group
                       `control_plane`, outside `gpu`; `gpu_fleet` (the GPU nodes) and
                       `gpu_canary` (the first of them), the groups the shipped runbooks use
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

KEY_SECRET = "sim-ssh-key"
CLUSTER_NAME = "pitstop-sim"
ALL_NODES_GROUP = "gpu"
CONTROL_PLANE_GROUP = "control_plane"


@dataclass(frozen=True)
class SshFiles:
    directory: Path

    @property
    def known_hosts(self) -> Path:
        return self.directory / "known_hosts"

    @property
    def secrets_dir(self) -> Path:
        return self.directory / "secrets"

    @property
    def client_key(self) -> Path:
        return self.secrets_dir / KEY_SECRET

    @property
    def inventory(self) -> Path:
        return self.directory / "inventory.yaml"


@dataclass(frozen=True)
class InventoryHost:
    name: str
    port: int
    domain: str
    role: str = "gpu"
    gpu_product: str = ""
    gpus: int = 1


def _replace(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, mode)
    tmp.replace(path)


def write_known_hosts(path: Path, lines: list[str]) -> Path:
    _replace(path, "".join(f"{line}\n" for line in lines))
    return path


def group_name(domain: str) -> str:
    """Inventory group names are identifiers: `zone-a` -> `zone_a`."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", domain)
    return name if name and not name[0].isdigit() else f"domain_{name}"


def inventory(
    hosts: list[InventoryHost],
    *,
    user: str,
    bind_host: str,
    cluster_name: str = CLUSTER_NAME,
    task_queue: str | None = None,
) -> dict[str, Any]:
    domains: dict[str, dict[str, Any]] = {}
    control_plane: dict[str, Any] = {}
    for host in hosts:
        if host.role == "control-plane":
            members = control_plane
        else:
            members = domains.setdefault(group_name(host.domain), {"hosts": {}})["hosts"]
        members[host.name] = {
            "ansible_host": bind_host,
            "ansible_port": host.port,
            "failure_domain": host.domain,
            "node_name": host.name,
        }
        if host.role != "control-plane" and host.gpu_product:
            members[host.name]["gpu_product"] = host.gpu_product
    cluster: dict[str, Any] = {"name": cluster_name}
    if task_queue:
        # The cluster's own worker polls it (docs/deployment.md, "A worker per cluster").
        cluster["task_queue"] = task_queue
    cluster["ssh"] = {"user": user, "key": {"secret": KEY_SECRET}}
    children: dict[str, Any] = {ALL_NODES_GROUP: {"children": domains}}
    gpu = sorted((h for h in hosts if h.role != "control-plane" and h.gpus > 0), key=lambda h: h.name)
    # Nodes without GPUs: the system/CPU pool (the upgrade's node-components stage names it).
    system = sorted(h.name for h in hosts if h.role != "control-plane" and h.gpus == 0)
    children["system_pool"] = {"hosts": dict.fromkeys(system)}
    if gpu:
        # The groups the shipped runbooks use: the fleet, and as canaries its first node of each
        # GPU product (the upgrade widens only to products a canary stood for).
        canaries = {h.gpu_product: h.name for h in reversed(gpu)}
        children["gpu_fleet"] = {"hosts": {h.name: None for h in gpu}}
        children["gpu_canary"] = {"hosts": dict.fromkeys(sorted(canaries.values()))}
    if control_plane:
        children[CONTROL_PLANE_GROUP] = {"hosts": control_plane}
    return {"cluster": cluster, "all": {"children": children}}


def write_inventory(
    path: Path,
    hosts: list[InventoryHost],
    *,
    user: str,
    bind_host: str,
    cluster_name: str = CLUSTER_NAME,
    task_queue: str | None = None,
) -> Path:
    buffer = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    # Keep the order written: `cluster:` first, hosts in node order.
    yaml.representer.sort_base_mapping_type_on_output = False
    yaml.dump(
        inventory(hosts, user=user, bind_host=bind_host, cluster_name=cluster_name, task_queue=task_queue),
        buffer,
    )
    header = (
        "# The rehearsal cluster's nodes, reachable over SSH (written by pitstop sim; ports change\n"
        "# at every start). The worker finds the key as secret "
        f"'{KEY_SECRET}' with\n#   export PITSTOP_SECRETS_DIR={path.parent.resolve() / 'secrets'}\n"
        f"# and reaches cluster '{cluster_name}' once it is registered with the worker (pitstop sim\n"
        "# serve does that; see docs/policy.md).\n"
    )
    _replace(path, header + buffer.getvalue())
    return path
