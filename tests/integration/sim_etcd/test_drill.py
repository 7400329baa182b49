"""The shipped backup and restore-drill runbooks against a rehearsal cluster persisted to etcd:
the drill proves what the cluster held when the backup was taken, not what it holds now.

The cluster gets an etcd of its own, under the default `/registry/` prefix: the drill counts
keys under `/registry/minions/` and the whole keyspace, which other tests' keys in the
session's etcd would disturb."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pitstop.contracts import RunReport
from pitstop.devstack import DevStack
from tests.integration.engine.conftest import RunFn
from tests.integration.etcd.conftest import shipped, shipped_tasks
from tests.integration.sim_etcd.conftest import StartSim, count, stored
from tests.policy_site import PolicyLayer

NODES = 3


def _inventory(etcd: DevStack, s3_endpoint: str, bucket: str, cluster: str, work: Path) -> str:
    return f"""\
all:
  children:
    etcd_backup:
      hosts:
        localhost: {{}}
      vars:
        cluster_name: {cluster}
        etcd_endpoints: {etcd.etcd_endpoint}
        etcd_live_data_dirs: [{etcd.home / "etcd"}]
        etcd_count_prefixes: [/registry/minions/, /registry/pods/]
        s3_bucket: {bucket}
        s3_endpoint_url: {s3_endpoint}
        s3_addressing_style: path
        backup_dir: {work / "backups"}
        drill_dir: {work / "drills"}
"""


def _registered(report: RunReport) -> dict[str, Any]:
    return report.stages[0].hosts[0].registered


async def test_the_drill_restores_the_node_and_pod_counts_of_backup_time_not_the_live_ones(
    run: RunFn,
    start_sim: StartSim,
    own_etcd: DevStack,
    s3_endpoint: str,
    bucket: str,
    cluster: str,
    tmp_path: Path,
    worker_policy: PolicyLayer,
) -> None:
    endpoint = own_etcd.etcd_endpoint
    # This site's etcd, and its backup and drill directories, as its operator allows them.
    worker_policy.allow_etcd(endpoint).allow_write(tmp_path)
    sim = start_sim(nodes=NODES, etcd_endpoint=endpoint)
    sim.create(
        "pods",
        {
            "metadata": {"name": "batch-1"},
            "spec": {
                "nodeName": "gpu-node-001",
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "busybox"}],
            },
        },
        "default",
    )
    sim.flush_etcd()
    pods_at_backup = len(sim.list("pods"))
    inventory = _inventory(own_etcd, s3_endpoint, bucket, cluster, tmp_path)

    backup = await run(shipped("etcd-backup.yaml"), inventory, extra_files=shipped_tasks())
    assert backup.status == "succeeded", backup.msg
    snapshot = _registered(backup)["snapshot"]
    assert snapshot["prefix_counts"] == {"/registry/minions/": NODES, "/registry/pods/": pods_at_backup}

    # The cluster moves on after the backup: a node joins, a pod goes.
    sim.create("nodes", {"metadata": {"name": "gpu-node-joined"}})
    sim.delete("pods", "batch-1", "default")
    sim.wait_for(lambda s: s.get("pods", "batch-1", "default") is None, what="the pod to go")
    sim.flush_etcd()
    assert count(endpoint, "/registry/minions/") == NODES + 1
    assert stored(endpoint, "/registry/pods/default/batch-1") is None

    drill = await run(
        shipped("etcd-restore-drill.yaml"),
        inventory,
        vars={"required_prefixes": {"/registry/minions/": {"min": NODES, "max": NODES}}},
    )
    assert drill.status == "succeeded", drill.msg
    verify = _registered(drill)["verify"]
    assert verify["passed"] is True
    assert verify["prefix_counts"] == {"/registry/minions/": NODES, "/registry/pods/": pods_at_backup}
    checks = {c["check"]: c["ok"] for c in verify["checks"]}
    assert checks["keys under /registry/minions/"] and checks["count of /registry/pods/"]
    assert count(endpoint, "/registry/minions/") == NODES + 1, "the live cluster is left as it was"
