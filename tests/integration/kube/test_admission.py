"""kube.stop_admission / kube.resume_admission: Kueue ClusterQueues on Hold (and back to what
they were), or a NoSchedule taint on the node where Kueue is absent."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.admission import resume_admission, stop_admission
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim

KUEUE = """
cluster: {nodes: 2, domains: 1}
timing: {time_scale: 20}
workloads:
  namespaces: [research]
  cluster_queues:
    - name: gpu-cq
      local_queues: [{name: research, namespace: research}]
    - name: batch-cq
      stop_policy: Hold
"""
NO_KUEUE = """
cluster: {nodes: 2, domains: 1, kueue: false}
timing: {time_scale: 20}
"""


def queue(sim: SimCluster, name: str) -> dict[str, Any]:
    found = sim.get("kueue.x-k8s.io/clusterqueues", name)
    assert found is not None
    return found


def policy(sim: SimCluster, name: str) -> str:
    return str(queue(sim, name)["spec"].get("stopPolicy"))


def queued_job(sim: SimCluster, name: str) -> None:
    sim.create(
        "jobs",
        {
            "metadata": {
                "name": name,
                "namespace": "research",
                "labels": {"kueue.x-k8s.io/queue-name": "research"},
            },
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "registry.local/x:1"}],
                    }
                }
            },
        },
        "research",
    )


def suspended(sim: SimCluster, job: str) -> bool:
    return bool((sim.get("jobs", job, "research") or {})["spec"].get("suspend"))


def test_cluster_queues_hold_and_get_back_exactly_their_prior_policy(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(KUEUE)
    args = {"cluster_queues": ["gpu-cq", "batch-cq"]}
    planned = module_runner(stop_admission, sim, args, check_mode=True)
    assert planned.msg == "would set stopPolicy on gpu-cq (None -> Hold), batch-cq (already Hold, recorded)"
    assert policy(sim, "gpu-cq") == "None"
    stopped = module_runner(stop_admission, sim, args, run_id="run-5")
    assert stopped.changed and stopped.data["mode"] == "kueue"
    assert (policy(sim, "gpu-cq"), policy(sim, "batch-cq")) == ("Hold", "Hold")
    notes = queue(sim, "gpu-cq")["metadata"]["annotations"]
    assert (notes["pitstop.dev/prior-stop-policy"], notes["pitstop.dev/admission-stopped-by"]) == (
        "None",
        "run-5",
    )
    assert module_runner(stop_admission, sim, args, run_id="run-5").changed is False
    # Held: a queued Job is not admitted.
    queued_job(sim, "sweep")
    sim.wait_for(lambda s: s.get("jobs", "sweep", "research") is not None, what="the job")
    assert suspended(sim, "sweep")
    resumed = module_runner(resume_admission, sim, args, run_id="run-5")
    assert resumed.msg == "restored stopPolicy on gpu-cq (Hold -> None), batch-cq (Hold -> Hold)"
    assert (policy(sim, "gpu-cq"), policy(sim, "batch-cq")) == ("None", "Hold")
    assert "pitstop.dev/prior-stop-policy" not in (queue(sim, "gpu-cq")["metadata"].get("annotations") or {})
    sim.wait_for(lambda s: not suspended(s, "sweep"), timeout=10, what="the job to be admitted")
    again = module_runner(resume_admission, sim, args)
    assert again.changed is False
    assert again.msg == (
        "nothing to resume; left as they are: batch-cq (Hold: not stopped by pitstop) (force: true sets None)"
    )


def test_unknown_queues_and_missing_kueue_are_refused_with_what_exists(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    with pytest.raises(ApplicationError) as unknown:
        module_runner(stop_admission, start_sim(KUEUE), {"cluster_queues": ["gpu-qc"]})
    assert unknown.value.type == "PreconditionFailed"
    assert (
        unknown.value.message
        == "ClusterQueue 'gpu-qc' not found in rehearsal (ClusterQueues: batch-cq, gpu-cq)"
    )
    with pytest.raises(ApplicationError) as absent:
        module_runner(stop_admission, start_sim(NO_KUEUE), {"cluster_queues": ["gpu-cq"]})
    assert absent.value.type == "PreconditionFailed"
    assert "does not serve the kueue.x-k8s.io API (Kueue is not installed)" in absent.value.message


def test_without_kueue_admission_stops_with_a_noschedule_taint_on_the_node(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(NO_KUEUE)

    def taints() -> list[dict[str, Any]]:
        return list((sim.get("nodes", "gpu-node-001") or {})["spec"].get("taints") or [])

    planned = module_runner(stop_admission, sim, {}, check_mode=True)
    assert planned.msg.startswith("would taint gpu-node-001 with pitstop.dev/maintenance:NoSchedule")
    assert taints() == []
    stopped = module_runner(stop_admission, sim, {})
    assert stopped.changed and stopped.data["mode"] == "taint"
    assert taints() == [{"key": "pitstop.dev/maintenance", "effect": "NoSchedule"}]
    assert module_runner(stop_admission, sim, {}).changed is False
    resumed = module_runner(resume_admission, sim, {})
    assert (resumed.changed, resumed.msg) == (True, "removed taint pitstop.dev/maintenance from gpu-node-001")
    assert taints() == []
    assert module_runner(resume_admission, sim, {}).changed is False


def test_a_queue_held_for_two_nodes_in_flight_is_released_only_when_both_resume(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(KUEUE)
    args = {"cluster_queues": ["gpu-cq"]}
    for host in ("gpu-node-001", "gpu-node-002"):
        module_runner(stop_admission, sim, args, run_id="run-7", host=host)
    holds = queue(sim, "gpu-cq")["metadata"]["annotations"]["pitstop.dev/admission-holds"]
    assert holds == "run-7/gpu-node-001,run-7/gpu-node-002"
    first = module_runner(resume_admission, sim, args, run_id="run-7", host="gpu-node-001")
    assert policy(sim, "gpu-cq") == "Hold", "released while gpu-node-002 is still in flight"
    assert first.msg == "nothing to resume; gpu-cq (still held for run-7/gpu-node-002)"
    queued_job(sim, "late")
    sim.wait_for(lambda s: s.get("jobs", "late", "research") is not None, what="the job")
    assert suspended(sim, "late")
    last = module_runner(resume_admission, sim, args, run_id="run-7", host="gpu-node-002")
    assert last.msg == "restored stopPolicy on gpu-cq (Hold -> None)"
    assert policy(sim, "gpu-cq") == "None"
    assert "pitstop.dev/admission-holds" not in (queue(sim, "gpu-cq")["metadata"].get("annotations") or {})
    sim.wait_for(lambda s: not suspended(s, "late"), timeout=10, what="the job to be admitted")
