"""The scenario's `platform:` section: validation errors that say file:line:col, defaults that
follow the platform's versions, regressions keyed on node versions, the bench log producer,
and Debian version ordering (which apt-get uses to tell a downgrade)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pitstop_sim.models import NodeHealth, NodeProfile
from pitstop_sim.scenario import ScenarioError, load_scenario, parse_scenario
from pitstop_sim.seed import node_profiles
from pitstop_sim.ssh.packages import compare_versions
from pitstop_sim.validation_logs import MOUNTED_FILES, produce

SCENARIOS = Path(__file__).resolve().parents[2] / "runbooks" / "scenarios"


def error(text: str) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, "s.yaml")
    return str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "platform:\n  regressions:\n    - when: {driver_version: '570.86.15'}\n"
            "      nodes: [gpu-node-001, gpu-node-017]\n      health: {nccl_busbw_gbps: 205}\n",
            "s.yaml:4:29: platform.regressions[0].nodes[1]: unknown node 'gpu-node-017' (the cluster has "
            "gpu-node-001, gpu-node-002, gpu-node-003, gpu-node-004, cp-001)",
        ),
        (
            "platform:\n  components:\n    - name: gpu-operator\n"
            "      image: nvcr.io/nvidia/gpu-operator:v24\n"
            "      helm: {release: gpu-operator, chart: gpu-operator, version: v24,\n"
            "             crds: [clusterpolicy.nvidia.com]}\n",
            "s.yaml:6:21: platform.components[0].helm.crds[0]: the chart ships CRD "
            "'clusterpolicy.nvidia.com', which platform.crds does not define; "
            "did you mean 'clusterpolicies.nvidia.com'?",
        ),
        (
            "platform:\n  kubernetes_version: 1.30\n",
            "s.yaml:2:23: invalid value for 'platform.kubernetes_version': 1.3 is not a Kubernetes version: "
            "write it as a string like v1.30.6",
        ),
        (
            "platform:\n  components:\n    - {name: vllm, image: vllm/vllm-openai}\n",
            "'vllm/vllm-openai' needs a tag (e.g. vllm/vllm-openai:v1.0): versions are read from it",
        ),
        (
            "platform:\n  componets: []\n",
            "s.yaml:2:3: unknown key 'componets' in platform (did you mean 'components'?)",
        ),
        (
            "platform:\n  crds:\n"
            "    - {name: a.example.com, kind: A, versions: [v1], conversion: {strategy: Webhook}}\n",
            "a Webhook conversion needs 'service' (namespace and name)",
        ),
        (
            "platform:\n  regressions:\n    - {when: {}, health: {nccl_busbw_gbps: 1}}\n",
            "s.yaml:3:14: invalid value for 'platform.regressions[0].when': 'when' needs at least one of",
        ),
        (
            "platform:\n  control_plane: {name_prefix: gpu-node-}\n",
            "control-plane node names clash with GPU node names (gpu-node-001); choose another name_prefix",
        ),
    ],
)
def test_bad_platform_sections_say_where_and_what(text: str, message: str) -> None:
    assert message in error(text)


def test_both_platform_scenarios_load_and_differ_only_in_the_regression() -> None:
    base = load_scenario(SCENARIOS / "platform-upgrade.yaml")
    regression = load_scenario(SCENARIOS / "platform-upgrade-regression.yaml")
    assert base.platform is not None and regression.platform is not None
    assert base.platform.regressions == []
    [canary] = regression.platform.regressions
    assert canary.nodes == ["gpu-node-001"] and canary.when.driver_version == "570.86.15"
    assert canary.health.nccl_busbw_gbps == 205
    strip = {"name": True, "description": True, "platform": {"regressions": True}}
    assert base.model_dump(exclude=strip) == regression.model_dump(exclude=strip)


def test_the_platform_scenario_deploys_a_component_for_every_component_key() -> None:
    platform = load_scenario(SCENARIOS / "platform-upgrade.yaml").platform
    assert platform is not None
    images = " ".join(c.image for c in platform.components)
    for needle in (
        "calico/node:",  # cni
        "nfsplugin:",  # csi
        "gpu-operator:v24.6.2",
        "container-toolkit:",
        "k8s-device-plugin:",
        "dcgm-exporter:",
        "network-operator:",
        "kueue/kueue:v0.9.1",
        "jobset/jobset:v0.7.1",
        "lws/lws:v0.4.0",
        "training-operator:v1.8.1",
        "kuberay/operator:v1.2.2",
        "kserve-controller:",
        "vllm-openai:",
        "sglang:",
        "tritonserver:",
    ):
        assert needle in images, needle
    assert {c.helm.release for c in platform.components if c.helm} == {"gpu-operator", "network-operator"}


def test_kubelets_follow_the_platform_version_unless_the_cluster_sets_one() -> None:
    plain = node_profiles(parse_scenario("cluster: {nodes: 2, domains: 1}\n", "s.yaml"))
    assert list(plain) == ["gpu-node-001", "gpu-node-002"]
    assert plain["gpu-node-001"].kubelet_version == "v1.32.4" and plain["gpu-node-001"].packages == {}

    profiles = node_profiles(
        parse_scenario("cluster: {nodes: 2, domains: 1}\nplatform: {kubernetes_version: v1.30.6}\n", "s.yaml")
    )
    assert list(profiles) == ["gpu-node-001", "gpu-node-002", "cp-001"]
    gpu, cp = profiles["gpu-node-001"], profiles["cp-001"]
    assert gpu.kubelet_version == cp.kubelet_version == "v1.30.6"
    assert (
        gpu.packages["kubeadm"] == "1.30.6-1.1" and gpu.packages["nvidia-driver-550"] == "550.90.07-0ubuntu1"
    )
    assert (cp.role, cp.gpus, cp.nic_driver) == ("control-plane", 0, None)
    assert not any(p.startswith("nvidia-driver-") for p in cp.packages)

    pinned = node_profiles(
        parse_scenario(
            "cluster: {nodes: 1, domains: 1, kubelet_version: v1.29.10}\n"
            "platform: {kubernetes_version: v1.30.6}\n",
            "s.yaml",
        )
    )
    assert pinned["gpu-node-001"].kubelet_version == "v1.29.10"
    assert pinned["cp-001"].kubelet_version == "v1.30.6"


def _profile(**versions: str) -> NodeProfile:
    values = {
        "name": "gpu-node-001",
        "domain": "zone-a",
        "gpu_product": "NVIDIA-H100-80GB-HBM3",
        "gpus": 8,
        "driver_version": "550.90.07",
        "firmware_version": "96.00.89.00.01",
        "kernel_version": "5.15.0-105-generic",
        "os_image": "Ubuntu 22.04.4 LTS",
        "kubelet_version": "v1.30.6",
        "container_runtime": "containerd://1.7.20",
        **versions,
    }
    return NodeProfile(**values, health=NodeHealth(nccl_busbw_gbps=392))  # type: ignore[arg-type]


def test_regressions_apply_while_their_version_condition_holds() -> None:
    scenario = parse_scenario(
        "platform:\n  regressions:\n"
        "    - {when: {driver_version: '570.*'}, nodes: [gpu-node-001], health: {nccl_busbw_gbps: 205}}\n"
        "    - when: {driver_version: '570.86.15', kernel_version: '6.8.*'}\n"
        "      health: {inference_ttft_ms: 400}\n",
        "s.yaml",
    )
    assert scenario.platform is not None
    health = scenario.platform.health_for
    assert health(_profile()).nccl_busbw_gbps == 392
    upgraded = health(_profile(driver_version="570.86.15"))
    assert (upgraded.nccl_busbw_gbps, upgraded.inference_ttft_ms) == (205, 180)
    both = health(_profile(driver_version="570.86.15", kernel_version="6.8.0-45-generic"))
    assert (both.nccl_busbw_gbps, both.inference_ttft_ms) == (205, 400)
    assert health(_profile(name="gpu-node-002", driver_version="570.86.15")).nccl_busbw_gbps == 392


def _probe_pod(image: str, command: list[str], files: dict[str, str], gpus: int = 1) -> dict[str, object]:
    return {
        "metadata": {"annotations": {MOUNTED_FILES: json.dumps(files)}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": command,
                    "resources": {"limits": {"nvidia.com/gpu": gpus}},
                    "volumeMounts": [{"name": "config-0", "mountPath": "/opt/pitstop", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "config-0", "configMap": {"name": "pitstop-probe-scripts"}}],
        },
    }


def test_bench_runs_the_shipped_probe_scripts_from_their_configmap_as_a_node_would() -> None:
    vllm = _probe_pod(
        "vllm/vllm-openai:v0.8.5.post1",
        ["sh", "/opt/pitstop/vllm_serve_bench.sh"],
        {
            "/opt/pitstop/vllm_serve_bench.sh": "vllm-serve-bench/1",
            "/opt/pitstop/train_step.py": "train-step/1",
        },
    )
    served = produce("bench", _profile(), vllm)
    assert served.succeeded
    assert "] vLLM API server version 0.8.5.post1\n" in served.log
    assert "Median TTFT (ms):                        180.00    \n" in served.log
    train = _probe_pod("nvcr.io/nvidia/pytorch:24.09-py3", ["python", "/opt/pitstop/train_step.py"], {
        "/opt/pitstop/train_step.py": "train-step/1"
    })  # fmt: skip
    trained = produce("bench", _profile(), train)
    assert trained.succeeded and "METRIC samples_per_second=2400.0 samples/s\n" in trained.log
    # A key the ConfigMap lacks, under its mount: the interpreter's own words.
    missing = produce(
        "bench", _profile(), _probe_pod("vllm/vllm-openai:v0.8.5.post1", ["sh", "/opt/pitstop/x.sh"], {})
    )
    assert (missing.succeeded, missing.log) == (False, "sh: 0: cannot open /opt/pitstop/x.sh: No such file\n")
    # vLLM without a GPU does not start, and the script says so.
    cpu = produce("bench", _profile(), {**vllm, "spec": {**vllm["spec"], "containers": [  # type: ignore[dict-item]
        {**vllm["spec"]["containers"][0], "resources": {}}  # type: ignore[index]
    ]}})  # fmt: skip
    assert not cpu.succeeded and cpu.log.endswith("vllm serve exited before it answered on port 8000\n")


def test_bench_without_a_workload_fails_and_says_what_to_set() -> None:
    pod = {"spec": {"containers": [{"name": "bench", "image": "b:1"}]}}
    outcome = produce("bench", _profile(), pod)
    assert not outcome.succeeded
    assert "PITSTOP_BENCH must be 'training' or 'inference'" in outcome.log
    slow = _profile()
    slow.health.train_samples_per_s = 1800
    pod["spec"]["containers"][0]["env"] = [{"name": "PITSTOP_BENCH", "value": "training"}]  # type: ignore[index]
    assert "METRIC samples_per_second=1800 samples/s" in produce("bench", slow, pod).log


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("1.30.6-1.1", "1.31.2-1.1"),
        ("1.31.2-1.1", "1.31.10-1.1"),
        ("550.90.07-0ubuntu1", "570.86.15-0ubuntu1"),
        ("1.7.20-1", "1.7.20-2"),
        ("2.0~rc1-1", "2.0-1"),
        ("9.9-1", "1:1.0-1"),
    ],
)
def test_debian_versions_order_like_dpkg(older: str, newer: str) -> None:
    assert compare_versions(older, newer) == -1
    assert compare_versions(newer, older) == 1
    assert compare_versions(newer, newer) == 0
