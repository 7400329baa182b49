"""gpu.p2p_check, gpu.nccl_test and gpu.dcgm_diag against the rehearsal cluster, whose
validation pods print the output format of the tool version their image names."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.baseline import baseline_record, save
from activities.gpu import dcgm_diag, nccl_test, p2p_check
from pitstop.baseline import Baseline, Reference
from pitstop.module_args.gpu import NCCL_TESTS_IMAGE
from tests.integration.kube.conftest import ModuleRunner, StartSim

CLUSTER = """
cluster:
  nodes: 3
  domains: 1
  node_overrides:
    gpu-node-001: {gpu_product: NVIDIA-A100-SXM4-80GB}
    gpu-node-002: {gpu_product: NVIDIA-A100-SXM4-80GB}
    gpu-node-003: {gpu_product: NVIDIA-L40S}
timing: {time_scale: 20, validation_seconds: {dcgm: 5, nccl: 5, p2p: 5}, job_seconds: 5, pod_start_seconds: 1}
health:
  nodes:
    gpu-node-001: {nccl_busbw_gbps: 262.0}
    gpu-node-002: {nccl_busbw_gbps: 150.0, dcgm_failures: [Memory]}
    gpu-node-003: {nccl_busbw_gbps: 370.0}
"""
FAST = {"gpus": 8, "poll_interval_seconds": 0.1, "timeout_seconds": 60}


def test_p2p_floor_comes_from_the_measured_product_and_unknown_hardware_is_not_judged(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    healthy = module_runner(p2p_check, sim, FAST, host="gpu-node-001")
    # 262 GB/s on an 8-GPU A100 SXM4 node passes (the old fixed 300 GB/s failed such nodes).
    assert (healthy.failed, healthy.msg) == (False, "p2p: slowest GPU pair 262 GB/s (floor 238.5)")
    assert healthy.data["devices"] == ["NVIDIA A100-SXM4-80GB"]
    degraded = module_runner(p2p_check, sim, FAST, host="gpu-node-002")
    assert degraded.failed
    assert degraded.msg == (
        "p2p: slowest GPU pair 150 GB/s is below 238.5 GB/s, the floor measured for NVIDIA A100 SXM4, "
        "8 GPUs on NVSwitch (HGX A100): NVLink 3, 12 links per GPU (https://github.com/LLMServe/DistServe/issues/3)"
    )
    # L40S has no measurement in pitstop/data/gpu-p2p.yaml: passed through, saying it was not judged.
    unknown = module_runner(p2p_check, sim, FAST, host="gpu-node-003")
    assert not unknown.failed
    assert unknown.msg.startswith(
        "p2p: slowest GPU pair 370 GB/s, not judged: no floor is known for 8 x NVIDIA L40S;"
    )
    # The task's own floor wins over the table.
    strict = module_runner(p2p_check, sim, {**FAST, "min_peer_gbps": 300}, host="gpu-node-001")
    assert strict.failed and "below 300 GB/s, the task's min_peer_gbps" in strict.msg


def test_nccl_and_dcgm_read_the_format_of_the_image_they_ran(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    for image, check, version in (
        ("ghcr.io/nvidia/nccl-tests:2.11.0", "error", None),
        ("ghcr.io/nvidia/nccl-tests:2.13.10", "#wrong", None),
        ("ghcr.io/nvidia/nccl-tests:v2.18.3", "#wrong", "2.18.3"),
        # The default: CoreWeave's build of nccl-tests 2.13.6 (no version line before 2.17).
        (NCCL_TESTS_IMAGE, "#wrong", None),
    ):
        result = module_runner(nccl_test, sim, {**FAST, "image": image}, host="gpu-node-001")
        assert (result.failed, result.data["check_column"], result.data["tests_version"]) == (
            False,
            check,
            version,
        )
        assert result.data["avg_busbw_gbps"] == 262.0
    for image, version in (
        ("nvcr.io/nvidia/cloud-native/dcgm:3.3.7-1-ubuntu22.04", "3.3.7"),
        ("nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04", "4.2.3"),
    ):
        failed = module_runner(dcgm_diag, sim, {**FAST, "image": image, "level": 2}, host="gpu-node-002")
        assert failed.failed
        assert failed.msg.startswith("DCGM diag failed: GPU Memory on GPU 0: DCGM_FR_FAULTY_MEMORY:")
        assert failed.data["version"] == version


def test_a_gpu_probe_whose_image_is_missing_fails_with_the_pull_back_off_not_the_timeout(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    # gpu.* Jobs wait in kube.job's wait (activities.kube.job_wait): the kubelet's back-off and
    # its events end the task at the next poll, whatever its timeout.
    sim = start_sim(CLUSTER + 'registry: {available: ["nvcr.io/*"]}\n')
    image = NCCL_TESTS_IMAGE  # the default
    with pytest.raises(ApplicationError) as refused:
        module_runner(nccl_test, sim, {**FAST, "timeout_seconds": 3600}, host="gpu-node-001")
    message = refused.value.message
    assert refused.value.type == "PreconditionFailed" and refused.value.non_retryable
    assert " on gpu-node-001 cannot run (ImagePullBackOff): pod pitstop-nccl-" in message
    assert f'container main waiting: ImagePullBackOff: Back-off pulling image "{image}"' in message
    assert f'Warning Failed: Failed to pull image "{image}": rpc error: code = NotFound' in message
    sim.wait_for(lambda s: s.list("jobs", "default") == [], timeout=10, what="the probe Job to be deleted")


def test_hardware_without_a_floor_is_judged_against_its_own_baseline(
    start_sim: StartSim, module_runner: ModuleRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = start_sim(CLUSTER)
    monkeypatch.setenv("PITSTOP_BASELINE_DIR", str(tmp_path))
    args = {**FAST, "baseline_product": "NVIDIA-L40S", "baseline_pool": "inference"}
    for run, (recorded, failed) in enumerate(((372.0, False), (420.0, True))):
        reference = Reference(value=recorded, unit="GB/s", recorded_at=datetime.now(UTC))
        save(
            None, Baseline(product="NVIDIA-L40S", pool="inference", metrics={"p2p_min_peer_gbps": reference})
        )
        # A run judges against the baseline it started with: each figure is a new run's.
        result = module_runner(p2p_check, sim, args, host="gpu-node-003", run_id=f"run-{run}")
        assert result.failed is failed
        assert result.data["baseline"]["baseline"] == recorded
        if failed:
            assert result.msg == (
                "p2p: p2p_min_peer_gbps 370 GB/s is 11.9% below the baseline 420 GB/s (allowed 5%)"
            )
        else:
            assert result.msg == "p2p: slowest GPU pair 370 GB/s, within its baseline"


def test_a_fleet_node_is_judged_against_the_baseline_from_before_the_change_not_the_canarys_new_figure(
    start_sim: StartSim, module_runner: ModuleRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The maintenance runbook records the canary's post-firmware NCCL figure; the fleet of the
    same run is still judged against the baseline the run started from (frozen at its first
    read). Judged against the store as changed by the canary, the slower fleet node would pass."""
    sim = start_sim(
        CLUSTER.replace(
            "gpu-node-002: {nccl_busbw_gbps: 150.0, dcgm_failures: [Memory]}",
            "gpu-node-002: {nccl_busbw_gbps: 250.0}",
        )
    )
    monkeypatch.setenv("PITSTOP_BASELINE_DIR", str(tmp_path))
    before = Reference(value=280.0, unit="GB/s", recorded_at=datetime.now(UTC))
    save(
        None, Baseline(product="NVIDIA-A100-SXM4-80GB", pool="training", metrics={"nccl_busbw_gbps": before})
    )
    args = {
        **FAST,
        "baseline_product": "NVIDIA-A100-SXM4-80GB",
        "baseline_pool": "training",
        "max_deviation_pct": 10,
    }
    canary = module_runner(nccl_test, sim, args, host="gpu-node-001", run_id="run-7")
    assert not canary.failed and canary.data["baseline"]["baseline"] == 280.0
    recorded = module_runner(
        baseline_record,
        sim,
        {"product": "NVIDIA-A100-SXM4-80GB", "pool": "training", "metrics": {"nccl_busbw_gbps": 262.0}},
        run_id="run-7",
    )
    assert recorded.data["baseline"] == {"nccl_busbw_gbps": 271.0}  # the store moved
    fleet = module_runner(nccl_test, sim, args, host="gpu-node-002", run_id="run-7")
    assert fleet.failed and fleet.data["baseline"]["baseline"] == 280.0
    # Named by the tool, not by the path the image needs to run it.
    assert fleet.msg.startswith("all_reduce_perf on gpu-node-002: ")
    assert "nccl_busbw_gbps 250 GB/s is 10.7% below the baseline 280 GB/s (allowed 10%)" in fleet.msg
    # The next run starts from the store as this one left it.
    later = module_runner(nccl_test, sim, args, host="gpu-node-002", run_id="run-8")
    assert not later.failed and later.data["baseline"]["baseline"] == 271.0
