"""The checkpoint protocol `suspend`: a training job whose owner lets pitstop stop it as a whole
is suspended through its own operator (the simulator's Training Operator, JobSet and KubeRay
controllers delete its pods and report `Suspended`), the node is then empty of it, and
kube.resume_workloads gives it back once no node in flight holds it. Nothing is evicted, the
records live on the node and the job, and a Kueue-managed job is refused before any write."""

from __future__ import annotations

from typing import Any

from activities.kube.checkpoint import _affected, wait_for_workloads
from activities.kube.client import Kube, api_client
from activities.kube.drain import drain_node
from activities.kube.nodes import cordon
from activities.kube.suspend import resume_workloads, suspend_jobs
from pitstop.kube.annotations import SUSPENDED_FOR, SUSPENDED_WORKLOADS
from pitstop.module_args.kube import WaitForWorkloadsArgs
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim

KINDS = {
    "pytorchjob": ("kubeflow.org/pytorchjobs", "PyTorchJob"),
    "jobset": ("jobset.x-k8s.io/jobsets", "JobSet"),
    "raycluster": ("ray.io/rayclusters", "RayCluster"),
}
# The condition each operator reports once the job is suspended (and its reason).
SUSPENDED = {
    "pytorchjob": ("Suspended", "PyTorchJobSuspended"),
    "jobset": ("Suspended", "SuspendedJobs"),
    "raycluster": ("RayClusterSuspended", "RayClusterSuspended"),
}


def cluster(extra: str = "", queue: str = "") -> str:
    jobs = "\n".join(
        f"    - {{name: {fw}-job, framework: {fw}, pods: 2, gpus_per_pod: 1, suspend_protocol: true,"
        f" placement: [gpu-node-001, gpu-node-002]{queue}}}"
        for fw in KINDS
    )
    return f"""
cluster: {{nodes: 3, domains: 1, gpus_per_node: 8{extra}}}
timing: {{time_scale: 20, pod_start_seconds: 4, recreate_delay_seconds: 1}}
workloads:
  deployments:
    - name: llm-serve
      namespace: serving
      replicas: 2
      gpus: 1
      pdb: {{max_unavailable: 1}}
      placement: [gpu-node-001, gpu-node-003]
  training_jobs:
{jobs}
"""


def framework(sim: SimCluster, fw: str) -> dict[str, Any]:
    obj = sim.get(KINDS[fw][0], f"{fw}-job", "training")
    assert obj is not None, fw
    return obj


def condition(obj: dict[str, Any], kind: str) -> tuple[str, str] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c["status"], c["reason"]
    return None


def suspended(obj: dict[str, Any]) -> bool:
    spec = obj["spec"]
    return bool((spec.get("runPolicy") or spec).get("suspend"))


def training_pods(sim: SimCluster) -> list[str]:
    return sorted(p["metadata"]["name"] for p in sim.list("pods", "training"))


def test_suspend_stops_each_job_whole_then_the_drain_is_empty_of_it_and_resume_gives_it_back(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(cluster())
    before = training_pods(sim)
    assert len(before) == 6
    module_runner(cordon, sim, {})
    result = module_runner(wait_for_workloads, sim, {"timeout_seconds": 30, "poll_interval_seconds": 0.1})
    assert result.changed
    assert sorted(result.data["suspend"]) == [
        "JobSet training/jobset-job",
        "PyTorchJob training/pytorchjob-job",
        "RayCluster training/raycluster-job",
    ]
    # Each job is stopped as a whole: its members on the other node are gone too.
    assert [p for p in sim.list("pods", "training") if p["metadata"].get("deletionTimestamp") is None] == []
    token = "run-1/gpu-node-001"
    for fw in KINDS:
        obj = framework(sim, fw)
        assert suspended(obj) and obj["metadata"]["annotations"][SUSPENDED_FOR] == token
        sim.wait_for(
            lambda s, fw=fw: condition(framework(s, fw), SUSPENDED[fw][0]) == ("True", SUSPENDED[fw][1]),
            what=f"{fw} reports itself suspended",
        )
    record = sim.get("nodes", "gpu-node-001")["metadata"]["annotations"][SUSPENDED_WORKLOADS]  # type: ignore[index]
    assert record == (
        "jobset.x-k8s.io/v1alpha2/JobSet/training/jobset-job,"
        "kubeflow.org/v1/PyTorchJob/training/pytorchjob-job,"
        "ray.io/v1/RayCluster/training/raycluster-job"
    )
    # Nothing of the training jobs is left for the drain; no training pod was evicted.
    sim.wait_for(lambda s: training_pods(s) == [], what="the suspended jobs' pods to be gone")
    module_runner(drain_node, sim, {"retry_interval_seconds": 0.1})
    counters = sim.counters()
    assert counters.training_evictions_without_protocol == 0
    assert counters.training_evictions_unacknowledged == 0
    assert all("-job-" not in e.pod or e.namespace != "training" for e in counters.eviction_log)

    resumed = module_runner(resume_workloads, sim, {})
    assert resumed.changed and resumed.msg.startswith("resumed ")
    for fw in KINDS:
        obj = framework(sim, fw)
        assert not suspended(obj) and SUSPENDED_FOR not in (obj["metadata"].get("annotations") or {})
    assert SUSPENDED_WORKLOADS not in (sim.get("nodes", "gpu-node-001")["metadata"].get("annotations") or {})  # type: ignore[index]
    # The operators start the jobs again, away from the cordoned node.
    sim.wait_for(lambda s: len(training_pods(s)) == 6, what="the jobs' pods to come back")
    assert condition(framework(sim, "pytorchjob"), "Suspended") == ("False", "PyTorchJobResumed")
    assert condition(framework(sim, "jobset"), "Suspended") == ("False", "ResumeJobs")
    assert all(p["spec"].get("nodeName") != "gpu-node-001" for p in sim.list("pods", "training"))
    # Resuming again is a no-op.
    again = module_runner(resume_workloads, sim, {})
    assert not again.changed and again.msg == "no training job suspended for gpu-node-001"


def test_a_job_held_by_two_nodes_resumes_only_when_the_last_lets_go(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(cluster())
    kube = Kube(api_client(module_runner.cluster(sim)))
    # Two nodes in flight read their training workloads at the same moment; node 1 suspends
    # the jobs first, then node 2 (which saw the same jobs on its side) takes its hold too.
    seen_by_second = _affected(kube, "gpu-node-002", WaitForWorkloadsArgs())
    assert {w.holder for w in seen_by_second} == {"framework"}
    module_runner(cordon, sim, {})
    module_runner(wait_for_workloads, sim, {"timeout_seconds": 30, "poll_interval_seconds": 0.1})
    assert suspend_jobs(kube, "gpu-node-002", seen_by_second, "run-1/gpu-node-002") == []  # already suspended
    holds = framework(sim, "jobset")["metadata"]["annotations"][SUSPENDED_FOR]
    assert holds == "run-1/gpu-node-001,run-1/gpu-node-002"
    first = module_runner(resume_workloads, sim, {}, host="gpu-node-001")
    assert not first.changed and "still held by run-1/gpu-node-002" in first.msg
    assert all(suspended(framework(sim, fw)) for fw in KINDS)
    second = module_runner(resume_workloads, sim, {}, host="gpu-node-002")
    assert second.changed and not any(suspended(framework(sim, fw)) for fw in KINDS)
    assert all(SUSPENDED_FOR not in (framework(sim, fw)["metadata"].get("annotations") or {}) for fw in KINDS)


def test_a_job_its_owner_suspended_is_not_resumed_by_pitstop(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(cluster())
    kube = Kube(api_client(module_runner.cluster(sim)))
    # pitstop read the node's workloads just before the Ray cluster's owner suspended it.
    seen = _affected(kube, "gpu-node-001", WaitForWorkloadsArgs())
    sim.patch("ray.io/rayclusters", "raycluster-job", {"spec": {"suspend": True}}, "training")
    asked = suspend_jobs(kube, "gpu-node-001", seen, "run-1/gpu-node-001")
    assert asked == ["suspended JobSet training/jobset-job", "suspended PyTorchJob training/pytorchjob-job"]
    assert SUSPENDED_FOR not in (framework(sim, "raycluster")["metadata"].get("annotations") or {})
    result = module_runner(resume_workloads, sim, {})
    assert "RayCluster training/raycluster-job (suspended by its owner: left suspended)" in result.msg
    assert suspended(framework(sim, "raycluster"))
    assert not suspended(framework(sim, "pytorchjob"))


def test_check_mode_says_what_it_would_suspend_and_writes_nothing(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(cluster())
    result = module_runner(wait_for_workloads, sim, {"timeout_seconds": 5}, check_mode=True)
    assert "would suspend JobSet training/jobset-job, PyTorchJob training/pytorchjob-job, " in result.msg
    assert not any(suspended(framework(sim, fw)) for fw in KINDS)
    assert len(training_pods(sim)) == 6


KUEUE = "kueue.x-k8s.io/workloads"
# The same jobs, admitted by Kueue through LocalQueue team-a.
QUEUED = (
    cluster(queue=", queue: team-a")
    + """
  cluster_queues:
    - name: gpu-queue
      local_queues: [{name: team-a, namespace: training}]
"""
)


def workload_of(sim: SimCluster, fw: str) -> dict[str, Any]:
    uid = framework(sim, fw)["metadata"]["uid"]
    [found] = [
        w for w in sim.list(KUEUE, "training") if w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == uid
    ]
    return found


def test_a_job_kueue_admits_is_stopped_through_its_workload_and_requeued_on_resume(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    """Kueue owns the suspend field of the jobs it admits: pitstop deactivates their Workloads
    instead (Kueue evicts them, `InactiveWorkload`, and suspends the jobs), and reactivates them
    on resume (Kueue requeues them, `Reactivated`, and admits them again)."""
    sim = start_sim(QUEUED)
    for fw in KINDS:
        assert condition(workload_of(sim, fw), "Admitted") == ("True", "Admitted")
    module_runner(cordon, sim, {})
    result = module_runner(wait_for_workloads, sim, {"timeout_seconds": 30, "poll_interval_seconds": 0.1})
    assert result.changed
    for fw in KINDS:
        workload = workload_of(sim, fw)
        assert workload["spec"]["active"] is False
        sim.wait_for(
            lambda s, fw=fw: condition(workload_of(s, fw), "Evicted") == ("True", "InactiveWorkload"),
            what=f"Kueue to evict {fw}'s Workload",
        )
        # Kueue, not pitstop, suspended the job; pitstop's hold is on the job.
        assert suspended(framework(sim, fw))
        assert framework(sim, fw)["metadata"]["annotations"][SUSPENDED_FOR] == "run-1/gpu-node-001"
    sim.wait_for(lambda s: training_pods(s) == [], what="the jobs' pods to be gone")
    resumed = module_runner(resume_workloads, sim, {})
    assert resumed.changed and resumed.msg.startswith("resumed ")
    for fw in KINDS:
        sim.wait_for(
            lambda s, fw=fw: (
                condition(workload_of(s, fw), "Requeued") == ("True", "Reactivated")
                and not suspended(framework(s, fw))
            ),
            what=f"Kueue to readmit {fw}",
        )
        assert workload_of(sim, fw)["spec"]["active"] is True
    sim.wait_for(lambda s: len(training_pods(s)) == 6, what="the jobs' pods to come back")
    assert sim.counters().training_evictions_without_protocol == 0


def test_a_kueue_job_whose_workload_its_owner_deactivated_stays_inactive(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(QUEUED)
    kube = Kube(api_client(module_runner.cluster(sim)))
    seen = _affected(kube, "gpu-node-001", WaitForWorkloadsArgs())
    name = workload_of(sim, "jobset")["metadata"]["name"]
    sim.patch(KUEUE, name, {"spec": {"active": False}}, "training")
    suspend_jobs(kube, "gpu-node-001", seen, "run-1/gpu-node-001")
    assert SUSPENDED_FOR not in (framework(sim, "jobset")["metadata"].get("annotations") or {})
    result = module_runner(resume_workloads, sim, {})
    assert "JobSet training/jobset-job (suspended by its owner: left suspended)" in result.msg
    assert workload_of(sim, "jobset")["spec"]["active"] is False
    assert workload_of(sim, "pytorchjob")["spec"]["active"] is True


def test_an_attempt_cut_short_between_the_hold_and_the_workload_is_finished_by_the_next(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    """A worker killed after writing its hold on a Kueue job but before deactivating the
    Workload (or after reactivating it but before dropping the hold): the retried attempt
    sees its own hold and finishes the other half, so nothing is left running or held."""
    sim = start_sim(QUEUED)
    token = "run-1/gpu-node-001"
    record = "kubeflow.org/v1/PyTorchJob/training/pytorchjob-job"
    # What the interrupted attempt wrote: the node's record and the job's hold, nothing more.
    sim.patch("nodes", "gpu-node-001", {"metadata": {"annotations": {SUSPENDED_WORKLOADS: record}}})
    sim.patch(
        "kubeflow.org/pytorchjobs",
        "pytorchjob-job",
        {"metadata": {"annotations": {SUSPENDED_FOR: token}}},
        "training",
    )
    assert workload_of(sim, "pytorchjob")["spec"]["active"] is True
    module_runner(cordon, sim, {})
    module_runner(wait_for_workloads, sim, {"timeout_seconds": 30, "poll_interval_seconds": 0.1})
    assert workload_of(sim, "pytorchjob")["spec"]["active"] is False
    # The resume was cut short after reactivating the Workload: the hold is still there.
    name = workload_of(sim, "pytorchjob")["metadata"]["name"]
    sim.patch(KUEUE, name, {"spec": {"active": True}}, "training")
    result = module_runner(resume_workloads, sim, {})
    assert "PyTorchJob training/pytorchjob-job" in result.msg and result.msg.startswith("resumed ")
    assert SUSPENDED_FOR not in (framework(sim, "pytorchjob")["metadata"].get("annotations") or {})
    assert workload_of(sim, "pytorchjob")["spec"]["active"] is True
    assert SUSPENDED_WORKLOADS not in (sim.get("nodes", "gpu-node-001")["metadata"].get("annotations") or {})  # type: ignore[index]


def test_a_hold_an_earlier_run_left_on_this_node_is_given_back_and_a_bad_entry_is_reported(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    """An aborted run stops without its rescue: its hold (`run-0/<node>`) stays. The next run's
    resume on the node gives the job back; an entry that names nothing pitstop may touch is
    reported, not followed, and does not keep the other jobs stopped."""
    sim = start_sim(cluster())
    module_runner(cordon, sim, {})
    module_runner(
        wait_for_workloads, sim, {"timeout_seconds": 30, "poll_interval_seconds": 0.1}, run_id="run-0"
    )
    record = sim.get("nodes", "gpu-node-001")["metadata"]["annotations"][SUSPENDED_WORKLOADS]  # type: ignore[index]
    crafted = "kubeflow.org/v1/PyTorchJob/kube-system/../secrets"
    sim.patch(
        "nodes", "gpu-node-001", {"metadata": {"annotations": {SUSPENDED_WORKLOADS: f"{crafted},{record}"}}}
    )
    result = module_runner(resume_workloads, sim, {}, run_id="run-1")
    assert result.msg.startswith("resumed JobSet training/jobset-job, PyTorchJob training/pytorchjob-job, ")
    assert result.msg.endswith(f"; ignored entries that name no suspendable object: {crafted}")
    assert not any(suspended(framework(sim, fw)) for fw in KINDS)
    notes = sim.get("nodes", "gpu-node-001")["metadata"]["annotations"]  # type: ignore[index]
    assert notes[SUSPENDED_WORKLOADS] == crafted  # left for a person to see, never acted on
