"""Real training operators' pods on the rehearsal cluster (seeded with the marks those operators
write, `pitstop_sim.training_frameworks`): neither kube.wait_for_workloads nor kube.drain lets
one be evicted without a checkpoint protocol, each refusal names the pod and why it counts as
training, and a GPU pod nobody recognises stops the drain too (fail closed). Safety is read from
the simulator's counters, which know the scenario's training jobs by name, not by mark."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.checkpoint import wait_for_workloads
from activities.kube.drain import drain_node
from activities.kube.nodes import cordon
from tests.integration.kube.conftest import ModuleRunner, StartSim

FRAMEWORKS = ["pytorchjob", "jobset", "volcano", "raycluster", "lws", "unlabelled"]
JOBS = "\n".join(
    f"""    - name: {fw}-job
      framework: {fw}
      pods: 2
      gpus_per_pod: 1
      placement: [gpu-node-001, gpu-node-002]"""
    for fw in FRAMEWORKS
)
CLUSTER = f"""
cluster: {{nodes: 3, domains: 1, gpus_per_node: 8}}
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
{JOBS}
"""
FAST = {"retry_interval_seconds": 0.1, "max_retry_interval_seconds": 0.5}
# What each refusal must say about why the pod is training.
WHY = {
    "pytorchjob": "Kubeflow training job: label training.kubeflow.org/job-name=pytorchjob-job",
    "jobset": "JobSet: label jobset.sigs.k8s.io/jobset-name=jobset-job",
    "volcano": "Volcano job: label volcano.sh/job-name=volcano-job",
    "raycluster": "Ray cluster: label ray.io/cluster=raycluster-job",
    "lws": "LeaderWorkerSet group: label leaderworkerset.sigs.k8s.io/name=lws-job",
    "unlabelled": (
        "unrecognised GPU workload: asks for GPUs and is not restartable serving (Experiment unlabelled-job"
    ),
}


def on_node(sim: object, node: str, prefix: str) -> list[str]:
    pods = sim.list("pods", field_selector=f"spec.nodeName={node}")  # type: ignore[attr-defined]
    return sorted(
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in pods
        if p["metadata"]["name"].startswith(prefix)
    )


def test_no_training_framework_is_drained_without_a_checkpoint_and_each_refusal_says_why(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    module_runner(cordon, sim, {})
    with pytest.raises(ApplicationError) as waited:
        module_runner(wait_for_workloads, sim, {"timeout_seconds": 5})
    assert waited.value.type == "PolicyViolation" and waited.value.non_retryable
    with pytest.raises(ApplicationError) as drained:
        module_runner(drain_node, sim, FAST)
    assert drained.value.type == "PolicyViolation" and drained.value.non_retryable
    drain_says = drained.value.message
    assert drain_says.startswith(
        "drain of gpu-node-001 refused before evicting anything: training pods without"
    )
    for fw in FRAMEWORKS:
        [pod] = on_node(sim, "gpu-node-001", f"{fw}-job-")
        assert f"{pod} ({WHY[fw]}" in drain_says, (fw, drain_says)
        assert pod in waited.value.message and WHY[fw] in waited.value.message
    # The serving replica is restartable: not named among the training pods.
    assert "serving/llm-serve" not in drain_says
    counters = sim.counters()
    assert counters.evictions_total == counters.deletions_total == 0
    assert counters.training_evictions_without_protocol == 0
    for fw in FRAMEWORKS:
        assert len(on_node(sim, "gpu-node-001", f"{fw}-job-")) == 1


def test_a_group_is_asked_as_a_whole_and_a_restartable_gpu_pod_may_go(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # A PyTorchJob whose pods speak pitstop's protocol (the site added it): both members, on
    # two nodes, are asked when one node goes.
    cluster = CLUSTER.replace(
        "    - name: pytorchjob-job\n      framework: pytorchjob\n",
        "    - name: pytorchjob-job\n      framework: pytorchjob\n      checkpoint_protocol: true\n",
    )
    sim = start_sim(cluster)
    module_runner(cordon, sim, {})
    data = module_runner(
        wait_for_workloads,
        sim,
        {"timeout_seconds": 5, "on_no_protocol": "wait_for_completion"},
        check_mode=True,
    ).data
    pytorch = [w for w in data["workloads"] if "pytorchjob-job" in w]
    assert len(pytorch) == 2 and {p.split("-")[-1] for p in pytorch} == {"0"}
    assert [w for w in data["without_protocol"] if "pytorchjob" in w] == []
    # The unlabelled pod's owner says it may be evicted: it no longer counts as training.
    [unlabelled] = on_node(sim, "gpu-node-001", "unlabelled-job-")
    namespace, name = unlabelled.split("/")
    sim.patch("pods", name, {"metadata": {"annotations": {"pitstop.dev/restartable": "true"}}}, namespace)
    with pytest.raises(ApplicationError) as drained:
        module_runner(drain_node, sim, FAST)
    assert unlabelled not in drained.value.message
