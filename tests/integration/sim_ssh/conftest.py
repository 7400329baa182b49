"""Fixtures for the simulated nodes' SSH endpoints: a rehearsal cluster started with
`ssh=True`, its generated inventory, and module calls aimed at its nodes through the
worker's real SSH pool (strict host keys against the generated known_hosts)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.runbook import load_inventory
from pitstop.runbook.inventory import Inventory
from pitstop.secrets import DIR_ENV
from pitstop.ssh import close_all
from pitstop_sim import SimCluster, SimConfig, parse_scenario
from tests.policy_site import PolicyLayer

NODE = "gpu-node-001"
OTHER = "gpu-node-002"
# Reboots take 1 real second (20 simulated), a flash half a second unless a test slows it.
SCENARIO = """
cluster:
  nodes: 2
  domains: 2
  gpus_per_node: 4
  firmware_version: "96.00.89.00.01"
  node_overrides:
    gpu-node-002: {gpu_product: NVIDIA-A100-SXM4-40GB, firmware_version: "92.00.45.00.06"}
timing:
  time_scale: 20
  reboot_seconds: 20
  firmware_flash_seconds: 10
"""


@dataclass
class SimNodes:
    sim: SimCluster
    inventory: Inventory
    policy: PolicyLayer
    heartbeats: list[Any] = field(default_factory=list)

    def call(
        self,
        module: str,
        args: dict[str, Any],
        *,
        host: str = NODE,
        run_id: str = "run-1",
        task_path: str = "stage/0/task/0",
        check_mode: bool = False,
        known_hosts: Path | None = None,
    ) -> ModuleCall:
        cluster = self.inventory.cluster
        assert cluster is not None and cluster.ssh is not None
        if known_hosts is not None:
            # Other host keys are another cluster to the worker: its operator registers them.
            name = f"{cluster.name}-{known_hosts.name.replace('.', '-')}"
            self.policy.cluster(name, known_hosts=known_hosts)
            cluster = cluster.model_copy(update={"name": name})
        return ModuleCall(
            module=module,
            host=host,
            args=args,
            check_mode=check_mode,
            run_id=run_id,
            task_path=task_path,
            host_vars=self.inventory.hostvars(host),
            cluster=cluster,
        )

    def run(self, activity_fn: Callable[[ModuleCall], ModuleResult], call: ModuleCall) -> ModuleResult:
        """Run a module activity as a worker would (heartbeats recorded)."""
        env = ActivityEnvironment()
        env.on_heartbeat = lambda *details: self.heartbeats.append(details)
        return env.run(activity_fn, call)

    def firmware_image(self, version: str) -> Path:
        path = self.sim.ssh_files.directory / f"image-{version}.bin"
        path.write_bytes(f"FIRMWARE {version}\n".encode() + bytes(range(256)) * 16)
        return path


@pytest.fixture
def start_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_policy: PolicyLayer
) -> Iterator[Callable[..., SimNodes]]:
    """`start_nodes(extra_scenario_yaml="")` -> a running cluster with SSH endpoints, registered
    with the worker (its known_hosts), its client key granted as the cluster's SSH key."""
    running: list[SimCluster] = []
    worker_policy.allow_read(tmp_path)  # firmware images the tests write next to the cluster

    def start(extra: str = "") -> SimNodes:
        text = textwrap.dedent(SCENARIO) + textwrap.dedent(extra)
        directory = tmp_path / f"sim-{len(running)}"
        sim = SimCluster(
            SimConfig(
                scenario=parse_scenario(text, "scenario.yaml"),
                kubeconfig=directory / "kubeconfig",
                ssh=True,
                cluster_name=f"sim-{len(running)}",
            )
        )
        sim.start()
        running.append(sim)
        sim.register()
        worker_policy.grant("sim-ssh-key", "ssh_key")
        # The client key is the secret `sim-ssh-key` in this directory.
        monkeypatch.setenv(DIR_ENV, str(sim.ssh_secrets_dir))
        return SimNodes(sim, load_inventory(sim.inventory_path), worker_policy)

    yield start
    close_all()
    for sim in running:
        sim.stop()


@pytest.fixture
def nodes(start_nodes: Callable[..., SimNodes]) -> SimNodes:
    return start_nodes()
