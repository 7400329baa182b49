"""DR readiness fixtures: a rehearsal cluster with a kubeadm control-plane node (its PKI on the
node's file system, SSH as the worker reaches it), Kueue serving queues, and the session's moto
S3 server with a fresh bucket per test."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from temporalio.testing import ActivityEnvironment

from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.runbook import load_inventory
from pitstop.runbook.inventory import Inventory
from pitstop.secrets import DIR_ENV
from pitstop.ssh import close_all
from pitstop_sim import SimCluster, SimConfig, parse_scenario

# The engine fixtures (a worker with every registered activity, `run` a runbook to its end).
from tests.integration.engine.conftest import engine_worker, run, start_run  # noqa: F401

# What a worker next to moto has (any credentials, no AWS endpoint of its own): the etcd
# tests' autouse fixture, the same here.
from tests.integration.etcd.conftest import aws_env  # noqa: F401
from tests.policy_site import PolicyLayer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

CP = "cp-001"
GPU = "gpu-node-001"
SCENARIO = """
cluster:
  nodes: 2
  domains: 1
  gpus_per_node: 4
  kueue: true
workloads:
  cluster_queues:
    - name: gpu-cluster-queue
      local_queues: [{name: training, namespace: training}]
platform:
  kubernetes_version: v1.30.6
  control_plane: {nodes: 1, name_prefix: cp-}
"""


@pytest.fixture
def bucket(s3_client: S3Client) -> str:
    name = f"dr-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=name)
    return name


@dataclass
class DrSite:
    sim: SimCluster
    inventory: Inventory
    policy: PolicyLayer

    def call(
        self, module: str, args: dict[str, Any], *, host: str = CP, check_mode: bool = False
    ) -> ModuleCall:
        return ModuleCall(
            module=module,
            host=host,
            args=args,
            check_mode=check_mode,
            run_id=f"dr-test-{uuid.uuid4().hex[:8]}",
            task_path="stage/0/task/0",
            host_vars=self.inventory.hostvars(host) if host in self.inventory.hosts else {},
            cluster=self.inventory.cluster,
        )

    def run(self, activity_fn: Callable[[ModuleCall], ModuleResult], call: ModuleCall) -> ModuleResult:
        return ActivityEnvironment().run(activity_fn, call)


@pytest.fixture
def dr_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_policy: PolicyLayer) -> Iterator[DrSite]:
    sim = SimCluster(
        SimConfig(
            scenario=parse_scenario(textwrap.dedent(SCENARIO), "scenario.yaml"),
            kubeconfig=tmp_path / "sim" / "kubeconfig",
            ssh=True,
            cluster_name=f"dr-{uuid.uuid4().hex[:6]}",
        )
    )
    sim.start()
    try:
        sim.register()
        worker_policy.grant("sim-ssh-key", "ssh_key")
        monkeypatch.setenv(DIR_ENV, str(sim.ssh_secrets_dir))
        yield DrSite(sim, load_inventory(sim.inventory_path), worker_policy)
    finally:
        close_all()
        sim.stop()
