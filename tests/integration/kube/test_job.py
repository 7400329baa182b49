"""kube.job: a Job pinned to a node with the maintenance tolerations, its logs returned."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube.job import run_job
from pitstop.gpu.dcgm import parse_dcgm_diag
from pitstop.kube.names import job_name
from tests.integration.kube.conftest import ModuleRunner, StartSim

CLUSTER = """
cluster:
  nodes: 3
  domains: 1
  node_overrides:
    gpu-node-003: {unschedulable: true, taints: [{key: pitstop.dev/maintenance, effect: NoSchedule}]}
timing: {time_scale: 20, validation_seconds: {dcgm: 20}, job_seconds: 10, pod_start_seconds: 1}
health:
  nodes:
    gpu-node-002: {dcgm_failures: [Memory]}
"""
DCGM = {
    "image": "nvcr.io/nvidia/cloud-native/dcgm:3.3.7",
    "command": ["sh", "-c", "nv-hostengine && dcgmi diag -r 3 -j"],
    "name": "dcgm-diag",
    "labels": {"pitstop.dev/validation": "dcgm"},
    "gpus": 8,
    "poll_interval_seconds": 0.1,
    "timeout_seconds": 60,
}


def test_a_validation_job_returns_its_log_and_is_deleted_afterwards(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    result = module_runner(run_job, sim, DCGM, run_id="run-3", task_path="validate/0")
    name = job_name("dcgm-diag", "run-3", "validate/0", "gpu-node-001")
    assert (result.changed, result.failed, result.rc) == (True, False, 0)
    assert result.msg == f"Job default/{name} succeeded on gpu-node-001"
    assert result.stdout is not None
    report = parse_dcgm_diag(result.stdout)
    assert report.passed and report.tests_run > 8
    assert result.data["pod"].startswith(name)
    sim.wait_for(lambda s: s.get("jobs", name, "default") is None, timeout=10, what="the Job to be deleted")


def test_a_failing_validation_fails_the_task_and_a_kept_job_is_not_run_twice(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    args = {**DCGM, "keep": True}
    result = module_runner(run_job, sim, args, host="gpu-node-002")
    assert (result.changed, result.failed, result.rc) == (True, True, 1)
    assert result.stdout is not None
    report = parse_dcgm_diag(result.stdout)
    assert not report.passed
    assert {f.test for f in report.failures} == {"GPU Memory"}
    name = result.data["job"]
    job = sim.get("jobs", name, "default")
    assert job is not None
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["nodeName"] == "gpu-node-002"
    assert job["metadata"]["labels"] == {
        "pitstop.dev/validation": "dcgm",
        "pitstop.dev/managed-by": "pitstop",
    }
    again = module_runner(run_job, sim, args, host="gpu-node-002")
    assert (again.changed, again.failed, again.data["job"]) == (False, True, name)
    assert len(sim.list("pods", "default", label_selector=f"job-name={name}")) == 1


def test_a_job_pinned_by_node_selector_tolerates_a_cordoned_maintenance_node(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    result = module_runner(
        run_job,
        sim,
        {"image": "busybox:1.36", "command": ["true"], "pin": "node_selector", "poll_interval_seconds": 0.1},
        host="gpu-node-003",
    )
    assert (result.failed, result.data["status"]) == (False, "succeeded")
    assert result.stdout is not None and result.stdout.endswith("done\n")


def test_check_mode_validates_the_job_without_creating_it(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    planned = module_runner(run_job, sim, DCGM, check_mode=True)
    name = planned.data["job"]
    assert planned.changed
    assert planned.msg == (
        f"would run Job default/{name} on gpu-node-001 (image nvcr.io/nvidia/cloud-native/dcgm:3.3.7); "
        "it would be created"
    )
    assert sim.list("jobs", "default") == []


def test_a_retried_attempt_returns_the_recorded_outcome_instead_of_running_again(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    first = module_runner(run_job, sim, DCGM)
    recorded = module_runner.heartbeats[-1]
    assert recorded["result"]["data"]["status"] == "succeeded"
    retried = module_runner(run_job, sim, DCGM, heartbeat_details=[recorded])
    assert retried == first
    assert len(sim.list("pods", "default", label_selector=f"job-name={first.data['job']}")) <= 1


def test_a_probe_whose_image_does_not_exist_fails_at_once_with_image_pull_back_off_and_the_events(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # The registry has the DCGM image but not this one: containerd answers NotFound, the
    # kubelet backs off. The task must say so at the next poll, not after its 30-minute timeout.
    sim = start_sim(CLUSTER + 'registry: {available: ["nvcr.io/nvidia/cloud-native/dcgm:*"]}\n')
    missing = {**DCGM, "image": "nvcr.io/nvidia/cloud-native/dcgm-probe:0.0-missing", "timeout_seconds": 1800}
    with pytest.raises(ApplicationError) as refused:
        module_runner(run_job, sim, missing, run_id="run-9", task_path="validate/0")
    message = refused.value.message
    # The pull failure ended it, not the 30-minute timeout (no wall-clock figure asserted).
    assert "did not finish" not in message
    name = job_name("dcgm-diag", "run-9", "validate/0", "gpu-node-001")
    assert refused.value.type == "PreconditionFailed" and refused.value.non_retryable
    assert message.startswith(
        f"Job default/{name} on gpu-node-001 cannot run (ImagePullBackOff): pod {name}-"
    )
    assert (
        'container main waiting: ImagePullBackOff: Back-off pulling image "nvcr.io/nvidia/cloud-native/'
        'dcgm-probe:0.0-missing"'
    ) in message
    image = "nvcr.io/nvidia/cloud-native/dcgm-probe:0.0-missing"
    assert (
        f'Warning Failed: Failed to pull image "{image}": rpc error: '
        f'code = NotFound desc = failed to pull and unpack image "{image}"'
    ) in message
    assert "Normal BackOff: Back-off pulling image" in message
    # Nothing left behind: the Job is deleted.
    sim.wait_for(lambda s: s.get("jobs", name, "default") is None, timeout=10, what="the Job to be deleted")
    # kubectl-style shortening of Docker Hub names: busybox is docker.io/library/busybox:latest.
    with pytest.raises(ApplicationError, match=r"docker\.io/library/busybox:latest: not found"):
        module_runner(run_job, sim, {**missing, "image": "busybox"}, run_id="run-10", task_path="validate/0")


def test_the_kubelet_rejects_a_pinned_probe_asking_for_gpus_a_running_pod_holds(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # Pinned by nodeName, the pod skips the scheduler; the kubelet's own admission refuses it,
    # and the task reports the kubelet's words.
    sim = start_sim(
        CLUSTER + "workloads:\n  deployments:\n    - {name: serve, namespace: serving, replicas: 1, gpus: 1, "
        "placement: [gpu-node-001]}\n"
    )
    result = module_runner(
        run_job, sim, {**DCGM, "pin": "node_name"}, run_id="run-11", task_path="validate/0"
    )
    message = result.msg
    assert result.failed and "failed on gpu-node-001" in message
    assert (
        "(OutOfnvidia.com/gpu: Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
        "requested: 8, used: 1, capacity: 8)"
    ) in message
    assert "Warning OutOfnvidia.com/gpu: Node didn't have enough resource" in message


def test_dcgmi_in_a_job_needs_a_hostengine_and_says_so_without_one(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    bare = {**DCGM, "command": ["dcgmi", "diag", "-r", "3", "-j"]}
    result = module_runner(run_job, sim, bare, run_id="run-12", task_path="validate/0")
    assert result.failed
    assert "Error: unable to establish a connection to the specified host: localhost" in (result.stdout or "")


def test_dcgmi_reaches_the_gpu_operators_hostengine_only_where_its_service_exists(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER + "workloads:\n  namespaces: [gpu-operator]\n")
    remote = {
        **DCGM,
        "command": ["dcgmi", "diag", "--host", "nvidia-dcgm.gpu-operator.svc:5555", "-r", "3", "-j"],
    }
    missing = module_runner(run_job, sim, remote, run_id="run-13", task_path="validate/0")
    assert missing.failed
    assert "connection to the specified host: nvidia-dcgm.gpu-operator.svc:5555" in (missing.stdout or "")
    sim.create(
        "services",
        {
            "metadata": {"name": "nvidia-dcgm", "namespace": "gpu-operator"},
            "spec": {"ports": [{"port": 5555}]},
        },
        "gpu-operator",
    )
    reached = module_runner(run_job, sim, remote, run_id="run-14", task_path="validate/0")
    assert not reached.failed and parse_dcgm_diag(reached.stdout or "").passed
