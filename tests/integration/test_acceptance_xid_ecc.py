"""acceptance.check's Xid and ECC checks against the rehearsal cluster: Xid from DCGM's fields
(`dcgmi dmon` through the node's nv-hostengine) and ECC from `nvidia-smi -q`, both unprivileged;
the kernel-log source stays privileged and refuses as dmesg_restrict does."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities import acceptance_jobs
from activities.acceptance import acceptance_check
from activities.kube.job import job_body
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim, module_runner, start_sim

__all__ = ["module_runner", "start_sim"]

HOSTENGINE = "nvidia-dcgm.gpu-operator.svc:5555"
FAST = {"poll_interval_seconds": 0.2, "job_timeout_seconds": 60}
CLUSTER = """
cluster: {nodes: 2, domains: 1, gpus_per_node: 8}
timing: {time_scale: 60}
workloads:
  namespaces: [gpu-operator]
health:
  nodes:
    gpu-node-002:
      xid_errors: [79]
      ecc:
        - {gpu: 3, volatile_uncorrectable: 2}
        - {gpu: 5, remap_pending: true}
"""
GPU_CHECKS = ["gpu/xid", "gpu/ecc"]


def checks_of(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{layer}/{c['name']}": c for layer, body in data["layers"].items() for c in body["checks"]}


def accept(runner: ModuleRunner, sim: SimCluster, **args: Any) -> Any:
    return runner(acceptance_check, sim, {**FAST, **args}, host="localhost", timeout=120)


def with_hostengine(sim: SimCluster) -> SimCluster:
    """The GPU Operator's standalone nv-hostengine (`dcgm.enabled`), as its Service."""
    sim.create(
        "services",
        {
            "metadata": {"name": "nvidia-dcgm", "namespace": "gpu-operator"},
            "spec": {"internalTrafficPolicy": "Local", "ports": [{"name": "dcgm", "port": 5555}]},
        },
        "gpu-operator",
    )
    return sim


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[dict[str, Any]]]:
    """The container of every probe Job the module creates, by validation kind (the Jobs and
    their pods are deleted once read)."""
    made: dict[str, list[dict[str, Any]]] = {}

    def recording(*args: Any, **kwargs: Any) -> dict[str, Any]:
        body: dict[str, Any] = job_body(*args, **kwargs)
        kind = body["metadata"]["labels"]["pitstop.dev/validation"]
        made.setdefault(kind, []).append(body["spec"]["template"]["spec"]["containers"][0])
        return body

    monkeypatch.setattr(acceptance_jobs, "job_body", recording)
    return made


def test_a_clean_node_passes_xid_and_ecc_from_dcgm_and_nvidia_smi_without_privilege(
    start_sim: StartSim, module_runner: ModuleRunner, probes: dict[str, list[dict[str, Any]]]
) -> None:
    sim = with_hostengine(start_sim(CLUSTER))
    result = accept(module_runner, sim, layers=GPU_CHECKS, nodes=["gpu-node-001"], dcgm_hostengine=HOSTENGINE)
    checks = checks_of(result.data)
    assert not result.failed, result.msg
    assert checks["gpu/xid"]["status"] == "passed" and checks["gpu/xid"]["value"] == 0
    assert "none in DCGM" in checks["gpu/xid"]["detail"]
    assert checks["gpu/ecc"]["status"] == "passed" and checks["gpu/ecc"]["value"] == 0
    assert "gpu-node-001: 8 GPUs read" in checks["gpu/ecc"]["detail"]
    assert result.data["measured"]["gpu/ecc"] == 0
    # Neither probe ran privileged: dmon asked the node's hostengine, nvidia-smi got the GPUs.
    [dmon], [smi] = probes["xid"], probes["ecc"]
    for container in (dmon, smi):
        assert "securityContext" not in container, container
    assert dmon["command"] == ["dcgmi", "dmon", "--host", HOSTENGINE, "-e", "230,310,311", "-c", "1"]
    assert "resources" not in dmon  # the node's hostengine has the GPUs
    assert smi["resources"] == {"limits": {"nvidia.com/gpu": 8}}
    assert smi["command"] == ["sh", "-c", "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT"]


def test_an_xid_and_uncorrectable_ecc_fail_the_node_naming_the_xid_the_gpu_and_the_counter(
    start_sim: StartSim, module_runner: ModuleRunner, probes: dict[str, list[dict[str, Any]]]
) -> None:
    sim = with_hostengine(start_sim(CLUSTER))
    result = accept(module_runner, sim, layers=GPU_CHECKS, nodes=["gpu-node-002"], dcgm_hostengine=HOSTENGINE)
    checks = checks_of(result.data)
    assert result.failed
    xid = checks["gpu/xid"]
    assert xid["status"] == "failed" and xid["value"] == 1
    assert "DCGM's last Xid: gpu-node-002 GPU 0: Xid 79" in xid["detail"]
    ecc = checks["gpu/ecc"]
    assert ecc["status"] == "failed" and ecc["value"] == 2
    # nvidia-smi names GPUs by PCI bus id: index 3 is 5D, index 5 AB on an HGX H100 board.
    assert "gpu-node-002: GPU 00000000:5D:00.0: volatile DRAM Uncorrectable 2" in ecc["detail"]
    assert "gpu-node-002: GPU 00000000:AB:00.0: a row remap is pending" in ecc["detail"]
    # DCGM's volatile double bit count agrees, by DCGM's GPU id.
    assert "gpu-node-002: GPU 3 (DCGM): DCGM_FI_DEV_ECC_DBE_VOL_TOTAL 2" in ecc["detail"]
    assert "gpu/ecc:" in result.msg and "volatile DRAM Uncorrectable 2" in result.msg
    # One dmon Job served both checks.
    assert (len(probes["xid"]), len(probes["ecc"])) == (1, 1)


def test_a_remapping_failure_fails_the_node_even_with_no_uncorrectable_error_left(
    start_sim: StartSim, module_runner: ModuleRunner, probes: dict[str, list[dict[str, Any]]]
) -> None:
    sim = start_sim(CLUSTER.replace("{gpu: 5, remap_pending: true}", "{gpu: 7, remap_failure: true}"))
    result = accept(
        module_runner, sim, layers=["gpu/ecc"], nodes=["gpu-node-002"], ecc_gpus="visible_devices"
    )
    ecc = checks_of(result.data)["gpu/ecc"]
    assert ecc["status"] == "failed", ecc
    assert "gpu-node-002: GPU 00000000:DB:00.0: Remapping Failure Occurred: Yes" in ecc["detail"]
    # NVIDIA_VISIBLE_DEVICES=all, no GPU asked for: the probe read every GPU.
    [smi] = probes["ecc"]
    assert "resources" not in smi
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in smi["env"]
    assert "gpu-node-002: 8 GPUs read" in ecc["detail"]


def test_dcgm_without_a_reachable_hostengine_fails_the_xid_check_in_dcgmis_words(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)  # no nvidia-dcgm Service: the GPU Operator runs no standalone hostengine
    result = accept(module_runner, sim, layers=GPU_CHECKS, nodes=["gpu-node-001"], dcgm_hostengine=HOSTENGINE)
    checks = checks_of(result.data)
    xid = checks["gpu/xid"]
    assert xid["status"] == "failed", xid
    assert (
        "Error: unable to establish a connection to the specified host: nvidia-dcgm.gpu-operator.svc:5555"
        in xid["detail"]
    )
    assert "Unable to connect to host engine" in xid["detail"]
    # nvidia-smi does not need the hostengine: ECC is still read.
    assert checks["gpu/ecc"]["status"] == "passed", checks["gpu/ecc"]


def test_the_kernel_log_source_still_refuses_unprivileged_and_dcgm_needs_a_running_hostengine(
    start_sim: StartSim, module_runner: ModuleRunner, probes: dict[str, list[dict[str, Any]]]
) -> None:
    sim = start_sim(CLUSTER)
    blind = accept(
        module_runner,
        sim,
        layers=["gpu/xid"],
        nodes=["gpu-node-002"],
        xid_source="kernel_log",
        xid_privileged=False,
        dcgm_hostengine=HOSTENGINE,
    )
    check = checks_of(blind.data)["gpu/xid"]
    assert check["status"] == "failed"
    assert "the kernel log of gpu-node-002 could not be read" in check["detail"]
    assert "dmesg: klogctl: Operation not permitted" in check["detail"]
    # Privileged, stated in the pod's securityContext, it reads the node's Xid.
    seeing = accept(module_runner, sim, layers=["gpu/xid"], nodes=["gpu-node-002"], xid_source="kernel_log")
    assert checks_of(seeing.data)["gpu/xid"]["value"] == 1
    assert [c.get("securityContext") for c in probes["xid"]] == [None, {"privileged": True}]
    # A hostengine started in the probe has seen no Xid raised before it: refused up front.
    with pytest.raises(ApplicationError) as raised:
        accept(module_runner, sim, layers=["gpu/xid"], nodes=["gpu-node-002"], xid_source="dcgm")
    assert raised.value.type == "InvalidArgs"
    assert "one started in the probe (dcgm_hostengine: embedded) has seen none of the node's" in str(
        raised.value
    )


def test_nvidia_smi_in_a_container_without_gpus_says_so_and_fails_the_check(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(
        """
        cluster: {nodes: 1, domains: 1, gpus_per_node: 8}
        timing: {time_scale: 60}
        workloads:
          training_jobs:
            - {name: pretrain, namespace: training, pods: 1, gpus_per_pod: 8, placement: [gpu-node-001]}
        """
    )
    # Every GPU is held: the probe asks for none and is not run; it never counts 0.
    held = checks_of(accept(module_runner, sim, layers=["gpu/ecc"], nodes=["gpu-node-001"]).data)["gpu/ecc"]
    assert held["status"] == "failed"
    assert "nvidia-smi was not read: no free GPU on gpu-node-001 for the ecc probe" in held["detail"]
