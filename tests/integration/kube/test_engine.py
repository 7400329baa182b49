"""The node-maintenance flow through the engine (RunbookWorkflow -> HostWorkflow -> kube
activities) against the rehearsal cluster: hosts from a dynamic inventory group, API errors
injected on evictions and node patches, a node that was cordoned before maintenance."""

from __future__ import annotations

import textwrap

from pitstop_sim import SimCluster
from tests.integration.engine.conftest import RunFn
from tests.integration.kube.conftest import StartSim

CLUSTER = """
cluster:
  nodes: 4
  domains: 2
  gpus_per_node: 8
  node_overrides:
    gpu-node-002: {unschedulable: true}
timing: {time_scale: 20, pod_start_seconds: 4, recreate_delay_seconds: 1, checkpoint_seconds: 10}
workloads:
  deployments:
    - name: llm-serve
      namespace: serving
      replicas: 4
      gpus: 1
      pdb: {max_unavailable: 2}
      placement: [gpu-node-001, gpu-node-001, gpu-node-003, gpu-node-004]
  training_jobs:
    - name: llm-pretrain
      pods: 2
      gpus_per_pod: 4
      placement: [gpu-node-001, gpu-node-003]
"""
FAULTS = """
faults:
  api_errors:
    - {verb: create, resource: pods, subresource: eviction, status: 500, count: 2, after: 1}
    - {verb: patch, resource: nodes, status: 500, count: 1}
"""
RUNBOOK = """
name: node-maintenance
hosts: zone_a
serial: 1
tasks:
  - name: capacity
    kube.capacity_check: {}
  - name: cordon
    kube.cordon: {reason: rehearsal}
  - name: checkpoint
    kube.wait_for_workloads: {poll_interval_seconds: 0.2, timeout_seconds: 60}
  - name: drain
    kube.drain: {retry_interval_seconds: 0.2, max_retry_interval_seconds: 1}
    register: drained
  - name: uncordon
    kube.uncordon: {}
"""


def inventory(sim: SimCluster) -> str:
    sim.register("rehearsal")  # the worker holds the cluster's kubeconfig; the inventory names it
    return textwrap.dedent(
        """
        cluster: {name: rehearsal}
        all:
          children:
            zone_a:
              from_nodes:
                selector: topology.kubernetes.io/zone=zone-a
                domain_label: topology.kubernetes.io/zone
        """
    )


def unschedulable(sim: SimCluster, node: str) -> bool:
    return bool((sim.get("nodes", node) or {})["spec"].get("unschedulable"))


async def test_maintenance_flow_survives_api_errors_and_leaves_a_pre_cordoned_node_cordoned(
    start_sim: StartSim, run: RunFn
) -> None:
    sim = start_sim(CLUSTER, FAULTS)
    report = await run(RUNBOOK, inventory(sim))
    assert report.status == "succeeded", report.msg
    hosts = {h.host: {t.name: t for t in h.tasks} for h in report.stages[0].hosts}
    assert sorted(hosts) == ["gpu-node-001", "gpu-node-002"]
    first = hosts["gpu-node-001"]
    assert first["checkpoint"].msg.endswith("(gangs: training/llm-pretrain)")
    assert first["drain"].status == "changed"
    assert first["uncordon"].msg == "uncordoned gpu-node-001"
    assert hosts["gpu-node-002"]["uncordon"].msg == (
        "left cordoned: it was unschedulable before pitstop cordoned it (gpu-node-002)"
    )
    assert not unschedulable(sim, "gpu-node-001")
    assert unschedulable(sim, "gpu-node-002")
    counters = sim.counters()
    assert sum(counters.faults_injected.values()) == 3  # every injected error was met and retried
    assert counters.evictions == {"gpu-node-001": 3}
    assert set(counters.evictions_per_pod.values()) == {1}
    assert counters.pdb_violations == 0
    assert counters.training_evictions_without_protocol == 0
    assert counters.training_evictions_unacknowledged == 0


async def test_check_mode_run_reports_the_plan_and_changes_nothing(start_sim: StartSim, run: RunFn) -> None:
    sim = start_sim(CLUSTER)
    report = await run(RUNBOOK, inventory(sim), check_mode=True)
    assert report.status == "succeeded", report.msg
    tasks = {t.name: t for t in report.stages[0].hosts[0].tasks}
    assert tasks["cordon"].msg == "would cordon gpu-node-001"
    assert tasks["checkpoint"].msg == (
        "would request checkpoint "
        + report.run_id
        + "/gpu-node-001 from 2 workloads (gangs: training/llm-pretrain)"
    )
    assert tasks["drain"].msg.startswith(
        "would evict 3 pods from gpu-node-001; 1 training pods once their checkpoint"
    )
    counters = sim.counters()
    assert (counters.evictions_total, counters.cordons, counters.checkpoint_acks) == (0, {}, 0)
    assert not unschedulable(sim, "gpu-node-001")
