"""acceptance.check against the rehearsal cluster: every layer of
docs/upgrade-process.md "Acceptance by layer" reported, n/a with reasons, and a canary
regression (NCCL bus bandwidth drop on one node) reported as a deviation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from temporalio.exceptions import ApplicationError

from activities.acceptance import acceptance_check
from pitstop.acceptance.probes import CATALOGUE, LAYERS
from pitstop.kube.annotations import MANAGED_BY_LABEL
from pitstop.module_args.gpu import NCCL_TESTS_IMAGE
from pitstop_sim import SimCluster
from pitstop_sim.models import NodeHealth, ProfileUpdate
from tests.integration.kube.conftest import ModuleRunner, StartSim, module_runner, start_sim

__all__ = ["module_runner", "start_sim"]

PLATFORM = """
name: acceptance
cluster: {nodes: 4, domains: 1, gpus_per_node: 8}
timing: {time_scale: 60, job_seconds: 5, validation_seconds: {dcgm: 30, nccl: 30}}
health:
  default: {nccl_busbw_gbps: 392}
workloads:
  deployments:
    - {name: coredns, namespace: kube-system, replicas: 2}
    - name: vllm
      namespace: serving
      replicas: 1
      gpus: 1
      labels: {team: llm, cost-center: ai}
      placement: [gpu-node-002]
  daemonsets:
    - {name: calico-node, namespace: kube-system, gpu_nodes_only: false}
    - {name: ebs-csi-node, namespace: kube-system, gpu_nodes_only: false}
  training_jobs:
    # On gpu-node-004: its GPUs are all taken, so probes go to the others (the kubelet rejects
    # a probe asking for GPUs a running pod holds; gpu-node-002 lends 7 of its 8).
    - name: pretrain
      namespace: training
      pods: 1
      gpus_per_pod: 8
      queue: training
      placement: [gpu-node-004]
  cluster_queues:
    - name: gpu-queue
      local_queues: [{name: training, namespace: training}]
"""

SCENARIOS = Path(__file__).resolve().parents[2] / "runbooks" / "scenarios"
FAST = {"poll_interval_seconds": 0.2, "job_timeout_seconds": 60}


def checks_of(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{layer}/{c['name']}": c for layer, body in data["layers"].items() for c in body["checks"]}


def accept(runner: ModuleRunner, sim: SimCluster, **args: Any) -> Any:
    return runner(acceptance_check, sim, {**FAST, **args}, host="localhost", timeout=120)


def test_every_layer_of_section_12_is_reported_and_unmeasurable_checks_are_na_with_a_reason(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)
    result = accept(module_runner, sim, nodes=["gpu-node-001"])
    checks = checks_of(result.data)
    assert list(result.data["layers"]) == list(LAYERS)
    assert set(checks) == {spec.key for spec in CATALOGUE}
    for key, check in checks.items():
        assert check["status"] in ("passed", "n/a"), (key, check)
        if check["status"] == "n/a":
            assert check["detail"], key
    for key in (
        "kubernetes/api",
        "kubernetes/dns",
        "kubernetes/cni",
        "kubernetes/csi",
        "gpu/dcgm",
        "gpu/discovery",
        "network/nccl",
        "governance/kueue",
    ):
        assert checks[key]["status"] == "passed", (key, checks[key])
    assert checks["gpu/discovery"]["value"] == 32
    assert checks["gpu/allocation"]["value"] == 9
    assert checks["network/nccl"]["value"] == pytest.approx(392, rel=0.02)
    assert "no multi-node NCCL job" in checks["network/cross_node"]["detail"]
    assert "MIG" in checks["gpu/mig_dra"]["detail"]
    assert result.data["passed"] is True and not result.failed
    # The measured figures are what the next call takes as its baseline.
    assert result.data["measured"]["network/nccl"] == checks["network/nccl"]["value"]
    assert result.data["measured"]["gpu/xid"] == 0


def test_an_nccl_drop_on_a_canary_node_is_a_network_deviation_against_the_baseline(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)
    nodes = ["gpu-node-001", "gpu-node-002"]
    before = accept(module_runner, sim, layers=["network"], nodes=nodes)
    assert before.data["measured"]["network/nccl"] == pytest.approx(392, rel=0.02)
    sim.set_node_profile("gpu-node-001", ProfileUpdate(health=NodeHealth(nccl_busbw_gbps=205)))
    after = accept(module_runner, sim, layers=["network"], nodes=nodes, baseline=before.data["measured"])
    assert after.failed and after.data["passed"] is False
    [dev] = after.data["deviations"]
    assert dev["check"] == "network/nccl" and dev["value"] == pytest.approx(205, rel=0.02)
    assert "network/nccl: 205 GB/s vs baseline 392 (-47.7%, limit 10%)" in after.msg
    nccl = checks_of(after.data)["network/nccl"]
    assert nccl["status"] == "deviation" and nccl["nodes"]["gpu-node-002"] == pytest.approx(392, rel=0.02)
    assert "lowest on gpu-node-001" in nccl["detail"]
    assert after.data["layers"]["network"]["status"] == "deviation"
    # Report mode: the same deviation is listed for a gate to explain, and does not fail.
    reported = accept(
        module_runner,
        sim,
        layers=["network"],
        nodes=nodes,
        baseline=before.data["measured"],
        on_deviation="report",
    )
    # `passed` stays false, so the runbook's `when: not acceptance.passed` gate asks why.
    assert not reported.failed and reported.data["passed"] is False
    assert [d["check"] for d in reported.data["deviations"]] == ["network/nccl"]
    assert reported.msg.startswith("acceptance has deviations to explain: network/nccl: 205 GB/s")


def test_the_representative_benchmarks_measure_training_and_inference_and_catch_a_slower_ttft(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # Users' own benchmark images printing METRIC lines (still read as before).
    sim = start_sim(PLATFORM)
    bench = {
        "training": {"image": "registry.local/bench:1", "command": ["train-bench"]},
        "inference": {"image": "registry.local/bench:1", "command": ["serve-bench"]},
    }
    layers = ["training", "inference", "storage/model_download", "storage/checkpoint"]
    before = accept(module_runner, sim, layers=layers, nodes=["gpu-node-003"], bench=bench)
    checks = checks_of(before.data)
    assert checks["training/start"]["status"] == "passed"
    assert checks["training/throughput"]["value"] == 2400
    assert checks["training/convergence"]["status"] == "passed"
    assert "loss 2.31 ->" in checks["training/convergence"]["detail"]
    assert checks["training/recovery"]["value"] == pytest.approx(14.2)
    assert checks["inference/model_load"]["value"] == pytest.approx(38.5)
    assert checks["inference/ttft"]["value"] == 180 and checks["inference/tpot"]["value"] == 22
    assert checks["storage/model_download"]["value"] == pytest.approx(38.5)
    assert "load time includes the download" in checks["storage/model_download"]["detail"]
    assert checks["storage/checkpoint"]["value"] == pytest.approx(14.2)
    assert not before.failed
    sim.set_node_profile("gpu-node-003", ProfileUpdate(health=NodeHealth(inference_ttft_ms=260)))
    after = accept(
        module_runner,
        sim,
        layers=layers,
        nodes=["gpu-node-003"],
        bench=bench,
        baseline=before.data["measured"],
    )
    assert [d["check"] for d in after.data["deviations"]] == ["inference/ttft"]
    assert "inference/ttft: 260 ms vs baseline 180 (+44.4%, limit 10%)" in after.msg


REPO = Path(__file__).resolve().parents[2]


def shipped_bench() -> dict[str, Any]:
    """`acceptance_bench` of the shipped platform upgrade: pinned images, the probe scripts."""
    runbook = YAML(typ="safe").load((REPO / "runbooks" / "platform-upgrade.yaml").read_text())
    bench: dict[str, Any] = runbook["vars"]["acceptance_bench"]
    return bench


def probe_scripts() -> dict[str, Any]:
    """The ConfigMap runbooks/manifests/probes/probe-scripts.yaml, as the runbook applies it."""
    found: dict[str, Any] = YAML(typ="safe").load(
        (REPO / "runbooks" / "manifests" / "probes" / "probe-scripts.yaml").read_text()
    )
    return found


def test_the_shipped_probes_are_read_in_the_real_tools_formats_and_catch_a_slower_ttft(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # The scripts' ConfigMap is in the probes' namespace (the runbook applies it first); the Jobs
    # mount it and run it in the pinned images: the training script's METRIC lines, vLLM's server
    # log and its "Serving Benchmark Result" table.
    sim = start_sim(PLATFORM)
    sim.create("configmaps", probe_scripts(), namespace="default")
    layers = ["training", "inference", "storage/model_download", "storage/checkpoint"]
    before = accept(module_runner, sim, layers=layers, nodes=["gpu-node-003"], bench=shipped_bench())
    checks = checks_of(before.data)
    assert checks["training/start"]["status"] == "passed"
    assert checks["training/throughput"]["value"] == 2400
    assert checks["training/convergence"]["status"] == "passed", checks["training/convergence"]
    assert checks["training/recovery"]["value"] == pytest.approx(0.0315)
    assert checks["storage/checkpoint"]["value"] == pytest.approx(0.0421)
    # From vLLM's own words: "Model loading took 0.9276 GB and 38.500000 seconds", "Time spent
    # downloading weights for Qwen/Qwen2.5-0.5B-Instruct: 24.600000 seconds", "Median TTFT (ms)".
    assert checks["inference/model_load"]["value"] == pytest.approx(38.5)
    assert checks["storage/model_download"]["value"] == pytest.approx(24.6)
    download = checks["storage/model_download"]["detail"]
    assert download.startswith("model_download_seconds=24.6 on gpu-node-003"), download
    assert checks["inference/ttft"]["value"] == 180 and checks["inference/tpot"]["value"] == 22
    assert not before.failed, before.msg
    sim.set_node_profile("gpu-node-003", ProfileUpdate(health=NodeHealth(inference_ttft_ms=260)))
    after = accept(
        module_runner,
        sim,
        layers=layers,
        nodes=["gpu-node-003"],
        bench=shipped_bench(),
        baseline=before.data["measured"],
    )
    assert [d["check"] for d in after.data["deviations"]] == ["inference/ttft"]
    assert "inference/ttft: 260 ms vs baseline 180 (+44.4%, limit 10%)" in after.msg


def test_a_bench_job_whose_scripts_configmap_is_missing_says_so_from_the_kubelets_events(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # As a real kubelet: the pod stays in ContainerCreating with FailedMount events; the probe's
    # timeout ends the wait and the check names the missing ConfigMap.
    sim = start_sim(PLATFORM)
    bench = {"inference": shipped_bench()["inference"]}
    result = accept(
        module_runner,
        sim,
        layers=["inference/ttft"],
        nodes=["gpu-node-003"],
        bench=bench,
        job_timeout_seconds=3,
    )
    ttft = checks_of(result.data)["inference/ttft"]
    assert ttft["status"] == "failed" and result.failed
    assert " did not finish within " in ttft["detail"]
    assert (
        'MountVolume.SetUp failed for volume "config-0" : configmap "pitstop-probe-scripts" not found'
        in (ttft["detail"])
    )


def test_a_script_the_public_image_does_not_have_fails_as_python_says(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # The command the runbook shipped before: /opt/pitstop/bench.py is in neither public image.
    sim = start_sim(PLATFORM)
    bench = {
        "training": {
            "image": "nvcr.io/nvidia/pytorch:24.09-py3",
            "command": ["python", "/opt/pitstop/bench.py", "--mode", "training"],
        }
    }
    result = accept(module_runner, sim, layers=["training/start"], nodes=["gpu-node-003"], bench=bench)
    start = checks_of(result.data)["training/start"]
    assert start["status"] == "failed"
    assert start["detail"].endswith(
        "; its log ends: python: can't open file '/opt/pitstop/bench.py': [Errno 2] No such file or directory"
    ), start["detail"]


def test_failures_are_summarised_by_layer(start_sim: StartSim, module_runner: ModuleRunner) -> None:
    sim = start_sim(
        """
        cluster: {nodes: 2, domains: 1}
        timing: {time_scale: 60}
        health:
          nodes:
            gpu-node-002: {xid_errors: [79, 48], dcgm_failures: [Memory]}
        workloads:
          cluster_queues: [{name: gpu-queue, stop_policy: Hold}]
        """
    )
    result = accept(
        module_runner,
        sim,
        layers=["kubernetes/dns", "gpu/dcgm", "gpu/xid", "governance/kueue"],
        nodes=["gpu-node-002"],
        dcgm_diag_level=3,
    )
    assert result.failed
    assert "kubernetes/dns: Deployment kube-system/coredns not found" in result.msg
    assert "gpu/dcgm: dcgmi diag on gpu-node-002:" in result.msg and "Memory" in result.msg
    assert "gpu/xid: 2 Xid events" in result.msg and "gpu-node-002 2" in result.msg
    assert "governance/kueue: 1 ClusterQueues not active: gpu-queue (stopPolicy Hold)" in result.msg
    assert {layer: body["status"] for layer, body in result.data["layers"].items()} == {
        "kubernetes": "failed",
        "gpu": "failed",
        "governance": "failed",
    }


def test_an_xid_probe_that_cannot_read_the_kernel_log_says_so_instead_of_counting_zero(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # With kernel.dmesg_restrict=1 an unprivileged container's dmesg is refused; the old probe
    # piped it into grep and counted 0 Xids on a node that has two.
    sim = start_sim(
        """
        cluster: {nodes: 1, domains: 1}
        timing: {time_scale: 60}
        health:
          nodes:
            gpu-node-001: {xid_errors: [79, 48]}
        """
    )
    blind = accept(module_runner, sim, layers=["gpu/xid"], nodes=["gpu-node-001"], xid_privileged=False)
    check = checks_of(blind.data)["gpu/xid"]
    assert check["status"] != "passed", check
    assert "the kernel log of gpu-node-001 could not be read" in check["detail"]
    assert "dmesg: klogctl: Operation not permitted" in check["detail"]
    seeing = accept(module_runner, sim, layers=["gpu/xid"], nodes=["gpu-node-001"])
    assert checks_of(seeing.data)["gpu/xid"]["value"] == 2


def test_check_mode_runs_only_read_only_probes_and_creates_nothing(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)
    result = module_runner(
        acceptance_check,
        sim,
        {**FAST, "nodes": ["gpu-node-001"], "scaling": {"namespace": "serving", "name": "vllm"}},
        host="localhost",
        check_mode=True,
    )
    checks = checks_of(result.data)
    assert checks["network/nccl"]["status"] == "n/a"
    assert checks["network/nccl"]["detail"] == "check mode: would run the NCCL test Jobs"
    assert checks["inference/scaling"]["detail"] == "check mode: would scale serving/vllm out by one and back"
    assert checks["kubernetes/dns"]["status"] == "passed"
    assert not result.changed and result.msg.startswith("check mode")
    requests = sim.counters().requests
    assert requests.get("list nodes"), requests  # it did read the cluster
    assert not [r for r in requests if r.split()[0] in ("create", "patch", "delete")], requests


def test_scaling_adds_a_replica_waits_for_it_and_restores_the_count(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)
    result = accept(
        module_runner, sim, layers=["inference/scaling"], scaling={"namespace": "serving", "name": "vllm"}
    )
    [check] = result.data["layers"]["inference"]["checks"]
    assert check["status"] == "passed", check
    assert "serving/vllm 1 -> 2 ready" in check["detail"]
    deployment = sim.get("deployments", "vllm", "serving")
    assert deployment is not None and deployment["spec"]["replicas"] == 1
    assert "pitstop.dev/acceptance-scaled-from" not in (deployment["metadata"].get("annotations") or {})


def test_a_retried_attempt_keeps_what_the_previous_one_measured(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)
    earlier = {"acceptance": {"network/nccl": {"ok": True, "value": 391.0, "detail": "from attempt 1"}}}
    result = module_runner(
        acceptance_check,
        sim,
        {**FAST, "layers": ["network/nccl"], "nodes": ["gpu-node-001"]},
        host="localhost",
        heartbeat_details=[earlier],
    )
    assert checks_of(result.data)["network/nccl"]["detail"].startswith("from attempt 1")
    assert not [r for r in sim.counters().requests if r.startswith("create jobs")]


def test_a_misspelt_layer_is_refused_with_the_nearest_name(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)
    with pytest.raises(ApplicationError) as raised:
        accept(module_runner, sim, layers=["gpus"])
    assert raised.value.type == "InvalidArgs"
    assert "unknown acceptance layer or check 'gpus'; did you mean 'gpu'?" in str(raised.value)


def test_cost_labels_are_required_of_workload_pods_but_not_of_pitstop_s_own(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)

    def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": "gpu-node-003", "containers": [{"name": "main", "image": "busybox:1.36"}]},
        }

    sim.create("pods", pod("probe", {MANAGED_BY_LABEL: "pitstop"}), namespace="serving")
    args = {"layers": ["governance/cost_labels"], "cost_labels": ["team", "cost-center"]}
    clean = accept(module_runner, sim, workload_namespaces=["serving"], **args)
    assert clean.data["passed"], clean.msg
    assert "1 pods carry team, cost-center" in checks_of(clean.data)["governance/cost_labels"]["detail"]
    sim.create("pods", pod("notebook", {"team": "llm"}), namespace="serving")
    dirty = accept(module_runner, sim, workload_namespaces=["serving"], **args)
    assert dirty.failed
    assert "governance/cost_labels: 1 of 2 pods lack team, cost-center: serving/notebook" in dirty.msg


def test_the_shipped_platform_upgrade_scenario_passes_acceptance_before_the_upgrade(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(SCENARIOS.joinpath("platform-upgrade.yaml").read_text())
    bench = {
        "training": {"image": "registry.local/bench:1"},
        "inference": {"image": "registry.local/bench:1"},
    }
    webhooks = ["kueue-validating-webhook-configuration", "inferenceservice.serving.kserve.io"]
    result = accept(module_runner, sim, nodes=["gpu-node-001"], bench=bench, policy_webhooks=webhooks)
    assert not result.failed, result.msg
    statuses = {key: check["status"] for key, check in checks_of(result.data).items()}
    measured_layers = ("kubernetes", "gpu/d", "network/nccl", "network/rdma", "training", "inference/t")
    assert all(statuses[k] == "passed" for k in statuses if k.startswith(measured_layers)), statuses
    assert {k for k, s in statuses.items() if s == "n/a"} >= {"gpu/mig_dra", "storage/object_storage"}
    assert result.data["measured"]["training/throughput"] == 2400
    assert statuses["governance/policy"] == "passed"
    missing = accept(
        module_runner, sim, layers=["governance/policy"], policy_webhooks=["gatekeeper-validating"]
    )
    assert "governance/policy: webhook configurations missing: gatekeeper-validating" in missing.msg


def test_unknown_nodes_are_refused_before_any_job_waits_for_them(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)
    with pytest.raises(ApplicationError) as raised:
        accept(module_runner, sim, layers=["network/nccl"], nodes=["gpu-node-001", "gpu-node-01"])
    assert raised.value.type == "PreconditionFailed"
    assert "nodes not in cluster rehearsal: gpu-node-01 (did you mean gpu-node-001?)" in str(raised.value)
    assert not [r for r in sim.counters().requests if r.startswith("create jobs")]


def test_heartbeats_while_a_job_runs_carry_what_was_already_measured(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)
    accept(module_runner, sim, layers=["kubernetes/api", "network/nccl"], nodes=["gpu-node-001"])
    waiting = [h for h in module_runner.heartbeats if isinstance(h, dict) and "job" in h]
    assert waiting, module_runner.heartbeats
    assert all(list(h["acceptance"]) == ["kubernetes/api"] for h in waiting)
    assert module_runner.heartbeats[-1]["acceptance"]["network/nccl"]["ok"] is True


def test_mig_nodes_must_report_their_mig_configuration_applied(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)
    labels = {"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success"}
    sim.patch("nodes", "gpu-node-002", {"metadata": {"labels": labels}})
    ok = accept(module_runner, sim, layers=["gpu/mig_dra"])
    assert checks_of(ok.data)["gpu/mig_dra"]["status"] == "passed"
    assert checks_of(ok.data)["gpu/mig_dra"]["detail"] == "1 MIG nodes, 0 ResourceSlices"
    sim.patch("nodes", "gpu-node-002", {"metadata": {"labels": {"nvidia.com/mig.config.state": "failed"}}})
    failed = accept(module_runner, sim, layers=["gpu/mig_dra"])
    assert "gpu/mig_dra: 1 MIG nodes, 0 ResourceSlices; gpu-node-002 mig.config.state=failed" in failed.msg


def test_a_probe_never_asks_for_gpus_a_running_pod_holds_and_says_so_when_none_are_free(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)
    # gpu-node-004 is full (the training job): no probe is created there, and the check says why.
    full = checks_of(accept(module_runner, sim, layers=["network"], nodes=["gpu-node-004"]).data)[
        "network/nccl"
    ]
    assert full["status"] == "failed"
    assert (
        "no free GPU on gpu-node-004 for the nccl probe: all 8 are held by training/pretrain-0-"
        in full["detail"]
    )
    assert "(drain the node first)" in full["detail"]
    # gpu-node-002 serves one replica: the probe asks for the 7 free GPUs, which the kubelet admits.
    shared = checks_of(accept(module_runner, sim, layers=["network"], nodes=["gpu-node-002"]).data)[
        "network/nccl"
    ]
    assert shared["status"] == "passed", shared
    rejected = [e for e in sim.list("events") if str(e.get("reason", "")).startswith("OutOf")]
    assert rejected == []


def test_a_probe_whose_image_is_missing_fails_its_check_with_the_pull_back_off_not_the_timeout(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # The registry has the DCGM image but not the NCCL tests': the kubelet backs off pulling it.
    # The probe waits as kube.job does, so the check says so at the next poll; with a 30-minute
    # job timeout (longer than the activity's), only the diagnosis can end the wait in time.
    sim = start_sim(
        """
        cluster: {nodes: 1, domains: 1}
        timing: {time_scale: 60}
        registry: {available: ["nvcr.io/nvidia/cloud-native/dcgm:*"]}
        """
    )
    image = NCCL_TESTS_IMAGE  # the default
    result = accept(
        module_runner,
        sim,
        layers=["network/nccl", "gpu/dcgm"],
        nodes=["gpu-node-001"],
        dcgm_diag_level=3,
        job_timeout_seconds=1800,
    )
    checks = checks_of(result.data)
    nccl = checks["network/nccl"]
    assert nccl["status"] == "failed" and result.failed
    detail = nccl["detail"]
    assert detail.startswith("gpu-node-001: Job default/pitstop-accept-nccl-"), detail
    assert " on gpu-node-001 cannot run (ImagePullBackOff): pod pitstop-accept-nccl-" in detail
    assert f'container main waiting: ImagePullBackOff: Back-off pulling image "{image}"' in detail
    assert (
        f'Warning Failed: Failed to pull image "{image}": rpc error: code = NotFound desc = '
        f'failed to pull and unpack image "{image}"'
    ) in detail
    assert "did not finish within" not in detail
    assert "no nccl-tests result table" not in detail  # the empty log of a pod that never ran is not parsed
    assert f"network/nccl: {detail}" in result.msg
    # The other probe's image is there: it ran and passed.
    assert checks["gpu/dcgm"]["detail"].endswith("dcgmi diag -r 3 passed on 1 nodes"), checks["gpu/dcgm"]
    # Every probe Job is gone, and the waits heartbeated what was measured so far.
    sim.wait_for(lambda s: s.list("jobs", "default") == [], timeout=10, what="the probe Jobs to be deleted")
    waiting = [h for h in module_runner.heartbeats if isinstance(h, dict) and "job" in h]
    assert any(h["job"].startswith("pitstop-accept-nccl-") and "acceptance" in h for h in waiting)
