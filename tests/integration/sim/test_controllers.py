"""What the simulated controllers do after clients act: replacements, scheduling, reboots,
checkpoints, Kueue admission — observed through the API as a client would."""

from __future__ import annotations

import textwrap
import time
from typing import Any

from pitstop_sim import ProfileUpdate, SimCluster
from tests.integration.sim.conftest import StartSim

Obj = dict[str, Any]

TIMING = (
    "timing: {time_scale: 100, pod_start_seconds: 5, recreate_delay_seconds: 5,"
    " reboot_seconds: 60, checkpoint_seconds: 30}\n"
)


def _pods(sim: SimCluster, namespace: str, selector: str) -> list[Obj]:
    return sim.list("pods", namespace, label_selector=selector)


def _ready(node: Obj) -> str:
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


def test_deleted_replica_is_recreated_only_on_a_schedulable_node_that_tolerates_its_taints(
    start_sim: StartSim,
) -> None:
    sim = start_sim(
        TIMING,
        """
        cluster:
          nodes: 3
          domains: 1
          node_overrides:
            gpu-node-002: {taints: [{key: dedicated, value: infra, effect: NoSchedule}]}
            gpu-node-003: {unschedulable: true}
        workloads:
          deployments: [{name: api, namespace: serving, replicas: 1, gpus: 2, placement: [gpu-node-001]}]
    """,
    )
    sim.patch("nodes", "gpu-node-001", {"spec": {"unschedulable": True}})
    (pod,) = _pods(sim, "serving", "app=api")
    sim.delete("pods", pod["metadata"]["name"], "serving")

    def pending_unschedulable(s: SimCluster) -> bool:
        pods = _pods(s, "serving", "app=api")
        conditions = pods[0]["status"].get("conditions", []) if pods else []
        return any(c.get("reason") == "Unschedulable" for c in conditions)

    sim.wait_for(pending_unschedulable, timeout=10, what="the replacement to be unschedulable")
    (waiting,) = _pods(sim, "serving", "app=api")
    message = next(c["message"] for c in waiting["status"]["conditions"] if c["type"] == "PodScheduled")
    assert message.startswith("0/3 nodes are available: ")
    assert "2 node(s) were unschedulable" in message
    assert "1 node(s) had untolerated taint {dedicated: infra}" in message
    assert "spec" in waiting and not waiting["spec"].get("nodeName")
    sim.patch("nodes", "gpu-node-003", {"spec": {"unschedulable": None}})
    sim.wait_for(
        lambda s: _pods(s, "serving", "app=api")[0]["status"]["phase"] == "Running",
        timeout=10,
        what="the replacement to run",
    )
    assert _pods(sim, "serving", "app=api")[0]["spec"]["nodeName"] == "gpu-node-003"
    assert sim.counters().deletions == {"gpu-node-001": 1}


def test_replacement_stays_pending_when_no_node_has_free_gpus(start_sim: StartSim) -> None:
    sim = start_sim(
        TIMING,
        """
        cluster: {nodes: 2, domains: 1, gpus_per_node: 8}
        workloads:
          deployments: [{name: big, replicas: 2, gpus: 8}]
    """,
    )
    sim.patch("nodes", "gpu-node-002", {"spec": {"unschedulable": True}})
    victim = next(p for p in _pods(sim, "default", "app=big") if p["spec"]["nodeName"] == "gpu-node-002")
    sim.delete("pods", victim["metadata"]["name"], "default")
    sim.wait_for(
        lambda s: any(
            c.get("reason") == "Unschedulable"
            for p in _pods(s, "default", "app=big")
            for c in p["status"].get("conditions", [])
        ),
        timeout=10,
        what="Unschedulable",
    )
    pending = next(p for p in _pods(sim, "default", "app=big") if not p["spec"].get("nodeName"))
    message = next(c["message"] for c in pending["status"]["conditions"] if c["type"] == "PodScheduled")
    assert "1 Insufficient nvidia.com/gpu" in message
    assert pending["status"]["phase"] == "Pending"


def test_rebooted_node_goes_not_ready_then_ready_with_a_new_boot_id_and_stays_cordoned(
    start_sim: StartSim,
) -> None:
    sim = start_sim(TIMING, "cluster: {nodes: 2, domains: 1}\n")
    before = sim.get("nodes", "gpu-node-001")
    assert before is not None
    sim.patch("nodes", "gpu-node-001", {"spec": {"unschedulable": True}})
    sim.reboot("gpu-node-001")
    assert _ready(sim.get("nodes", "gpu-node-001") or {}) == "Unknown"
    sim.wait_for(
        lambda s: _ready(s.get("nodes", "gpu-node-001") or {}) == "True", timeout=10, what="Ready again"
    )
    after = sim.get("nodes", "gpu-node-001") or {}
    assert after["spec"]["unschedulable"] is True
    assert after["status"]["nodeInfo"]["bootID"] != before["status"]["nodeInfo"]["bootID"]
    events = [(e.event, e.unschedulable, e.ready) for e in sim.timeline() if e.node == "gpu-node-001"]
    assert events == [
        ("registered", False, True),
        ("cordoned", True, True),
        ("reboot", True, False),
        ("not_ready", True, False),
        ("ready", True, True),
    ]
    assert sim.counters().reboots == {"gpu-node-001": 1}


def test_daemonset_pods_restart_after_a_reboot(start_sim: StartSim) -> None:
    sim = start_sim(TIMING, "cluster: {nodes: 1, domains: 1}\n")
    sim.reboot("gpu-node-001")
    pods = sim.list("pods", "gpu-operator")
    assert pods and all(not p["status"]["containerStatuses"][0]["ready"] for p in pods)
    sim.wait_for(
        lambda s: all(p["status"]["containerStatuses"][0]["ready"] for p in s.list("pods", "gpu-operator")),
        timeout=10,
        what="DaemonSet pods ready again",
    )
    assert all(
        p["status"]["containerStatuses"][0]["restartCount"] == 1 for p in sim.list("pods", "gpu-operator")
    )


def test_node_that_never_returns_stays_not_ready(start_sim: StartSim) -> None:
    sim = start_sim(TIMING, "cluster: {nodes: 2, domains: 1}\nfaults: {nodes_never_return: [gpu-node-002]}\n")
    sim.reboot("gpu-node-001")
    sim.reboot("gpu-node-002")
    sim.wait_for(
        lambda s: _ready(s.get("nodes", "gpu-node-001") or {}) == "True", timeout=10, what="node 1 back"
    )
    time.sleep(0.5)  # several more reboot durations at this time scale
    assert _ready(sim.get("nodes", "gpu-node-002") or {}) == "Unknown"
    taints = {(t["key"], t["effect"]) for t in (sim.get("nodes", "gpu-node-002") or {})["spec"]["taints"]}
    assert ("node.kubernetes.io/unreachable", "NoExecute") in taints


def test_firmware_staged_for_reboot_shows_only_after_the_reboot(start_sim: StartSim) -> None:
    sim = start_sim(TIMING, "cluster: {nodes: 1, domains: 1, firmware_version: '96.00.89.00.01'}\n")
    sim.set_node_profile("gpu-node-001", ProfileUpdate(firmware_version="96.00.9F.00.04", apply="reboot"))
    label = "pitstop.dev/firmware-version"
    assert (sim.get("nodes", "gpu-node-001") or {})["metadata"]["labels"][label] == "96.00.89.00.01"
    sim.reboot("gpu-node-001")
    sim.wait_for(
        lambda s: (s.get("nodes", "gpu-node-001") or {})["metadata"]["labels"][label] == "96.00.9F.00.04",
        timeout=10,
        what="the new firmware version",
    )
    assert sim.node_profile("gpu-node-001").firmware_version == "96.00.9F.00.04"
    sim.set_node_profile("gpu-node-001", ProfileUpdate(driver_version="560.35.03"))
    node = sim.get("nodes", "gpu-node-001") or {}
    assert node["metadata"]["labels"]["pitstop.dev/driver-version"] == "560.35.03"


GANGS = TIMING + textwrap.dedent("""
    cluster: {nodes: 3, domains: 1}
    workloads:
      training_jobs:
        - {name: pretrain, pods: 2, gpus_per_pod: 8, checkpoint_protocol: true}
        - {name: legacy, pods: 1, gpus_per_pod: 8, checkpoint_protocol: false}
""")


def test_training_pods_with_the_protocol_acknowledge_checkpoint_requests(start_sim: StartSim) -> None:
    sim = start_sim(GANGS)
    pod = _pods(sim, "training", "pitstop.dev/gang=pretrain")[0]
    name = pod["metadata"]["name"]
    sim.patch(
        "pods", name, {"metadata": {"annotations": {"pitstop.dev/checkpoint-requested": "run-7"}}}, "training"
    )
    sim.wait_for(
        lambda s: (
            (s.get("pods", name, "training") or {})["metadata"]["annotations"].get(
                "pitstop.dev/checkpoint-done"
            )
            == "run-7"
        ),
        timeout=10,
        what="the checkpoint acknowledgement",
    )
    assert sim.counters().checkpoint_acks == 1


def test_training_pods_without_the_protocol_never_acknowledge(start_sim: StartSim) -> None:
    sim = start_sim(GANGS)
    (pod,) = _pods(sim, "training", "pitstop.dev/gang=legacy")
    name = pod["metadata"]["name"]
    sim.patch(
        "pods", name, {"metadata": {"annotations": {"pitstop.dev/checkpoint-requested": "run-7"}}}, "training"
    )
    time.sleep(1.0)  # more than three checkpoint durations at this time scale
    notes = (sim.get("pods", name, "training") or {})["metadata"]["annotations"]
    assert "pitstop.dev/checkpoint-done" not in notes
    assert sim.counters().checkpoint_acks == 0


def test_removing_training_pods_is_counted_by_checkpoint_state(start_sim: StartSim) -> None:
    sim = start_sim(GANGS)
    (legacy,) = _pods(sim, "training", "pitstop.dev/gang=legacy")
    unacked = _pods(sim, "training", "pitstop.dev/gang=pretrain")[0]
    sim.delete("pods", legacy["metadata"]["name"], "training")
    sim.delete("pods", unacked["metadata"]["name"], "training")
    counters = sim.counters()
    assert counters.training_evictions_without_protocol == 1
    assert counters.training_evictions_unacknowledged == 1


def test_deleting_a_pod_past_its_pdb_is_a_forced_deletion_and_a_violation(start_sim: StartSim) -> None:
    sim = start_sim(
        TIMING,
        """
        cluster: {nodes: 2, domains: 1}
        workloads:
          deployments: [{name: db, replicas: 2, pdb: {min_available: 2}}]
    """,
    )
    victim = _pods(sim, "default", "app=db")[0]
    sim.delete("pods", victim["metadata"]["name"], "default")
    counters = sim.counters()
    node = victim["spec"]["nodeName"]
    assert counters.forced_deletions == {node: 1}
    assert counters.pdb_violations == 1
    violation = counters.pdb_violation_log[0]
    assert (violation.pdb, violation.via, violation.current_healthy, violation.desired_healthy) == (
        "default/db",
        "delete",
        1,
        2,
    )


def test_kueue_hold_keeps_new_jobs_suspended_until_the_queue_runs_again(start_sim: StartSim) -> None:
    sim = start_sim(
        TIMING,
        """
        cluster: {nodes: 2, domains: 1}
        workloads:
          namespaces: [research]
          cluster_queues:
            - {name: cq, stop_policy: Hold, local_queues: [{name: lq, namespace: research}]}
    """,
    )
    sim.create(
        "jobs",
        {
            "metadata": {"name": "sweep", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
        },
        "research",
    )
    time.sleep(0.3)
    job = sim.get("jobs", "sweep", "research") or {}
    assert job["spec"]["suspend"] is True
    assert _pods(sim, "research", "job-name=sweep") == []
    queue = sim.get("kueue.x-k8s.io/clusterqueues", "cq") or {}
    assert queue["status"]["pendingWorkloads"] == 1
    sim.patch("kueue.x-k8s.io/clusterqueues", "cq", {"spec": {"stopPolicy": "None"}})
    sim.wait_for(
        lambda s: len(_pods(s, "research", "job-name=sweep")) == 1, timeout=10, what="the job to be admitted"
    )
    sim.wait_for(
        lambda s: any(
            c["type"] == "Complete"
            for c in (s.get("jobs", "sweep", "research") or {})["status"].get("conditions", [])
        ),
        timeout=10,
        what="the job to complete",
    )


def test_cordoning_two_nodes_of_a_domain_shows_in_its_unavailability(start_sim: StartSim) -> None:
    sim = start_sim(TIMING, "cluster: {nodes: 4, domains: 2}\n")
    for node in ("gpu-node-001", "gpu-node-002"):
        sim.patch("nodes", node, {"spec": {"unschedulable": True}})
    sim.patch("nodes", "gpu-node-001", {"spec": {"unschedulable": None}})
    sim.patch("nodes", "gpu-node-003", {"spec": {"unschedulable": True}})
    by_domain = {d.domain: d for d in sim.unavailability()}
    assert by_domain["zone-a"].max_unavailable == 2
    assert by_domain["zone-b"].max_unavailable == 1
    assert by_domain["zone-a"].nodes == 2


def test_deleting_a_namespace_removes_its_workloads(start_sim: StartSim) -> None:
    sim = start_sim(
        TIMING,
        """
        cluster: {nodes: 2, domains: 1}
        workloads:
          deployments: [{name: web, namespace: scratch, replicas: 2, pdb: {max_unavailable: 1}}]
    """,
    )
    sim.delete("namespaces", "scratch")
    sim.wait_for(lambda s: s.get("namespaces", "scratch") is None, timeout=10, what="the namespace to go")
    assert sim.list("pods", "scratch") == []
    assert sim.list("deployments", "scratch") == []


def test_scaling_a_deployment_keeps_its_running_pods_and_adds_or_removes_only_the_difference(
    start_sim: StartSim,
) -> None:
    """A scale changes the ReplicaSet's replicas; the pods already running stay (the
    deployment controller only replaces pods when the template changes)."""
    sim = start_sim(
        TIMING,
        """
        cluster: {nodes: 3, domains: 1}
        workloads:
          deployments:
            - {name: web, namespace: serving, replicas: 2, gpus: 1}
        """,
    )
    before = {p["metadata"]["name"] for p in _pods(sim, "serving", "app=web")}
    sim.patch("deployments", "web", {"spec": {"replicas": 3}}, "serving")
    sim.wait_for(
        lambda s: (
            len([p for p in _pods(s, "serving", "app=web") if p["status"].get("phase") == "Running"]) == 3
        ),
        what="a third replica",
    )
    after = {p["metadata"]["name"] for p in _pods(sim, "serving", "app=web")}
    assert before < after and len(after) == 3
    [rs] = sim.list("replicasets", "serving")
    assert rs["spec"]["replicas"] == 3
