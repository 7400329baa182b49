"""inventory.versions on the rehearsal cluster: versions read from the apiserver's /version, the
control-plane mirror pods, node status, workload images, Helm release Secrets and workload
annotations; and, with the nodes' SSH endpoints, from the new ssh.facts version probes."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.ssh import ssh_facts
from activities.versions import versions
from pitstop.contracts import ModuleCall
from pitstop.runbook import load_inventory
from pitstop.secrets import DIR_ENV
from pitstop.ssh import close_all
from pitstop.versions.components import COMPONENT_KEYS
from pitstop_sim import SimCluster, SimConfig, parse_scenario
from tests.integration.kube.conftest import ModuleRunner, StartSim, module_runner, start_sim
from tests.integration.sim_ssh.conftest import SimNodes, start_nodes
from tests.integration.ssh.conftest import fake_node, lab, ssh_lab, sshd_binary
from tests.integration.ssh.lab import FakeNode, SshLab
from tests.policy_site import PolicyLayer

__all__ = ["fake_node", "lab", "module_runner", "ssh_lab", "sshd_binary", "start_nodes", "start_sim"]

PLATFORM = """
platform:
  kubernetes_version: v1.30.6
  control_plane: {nodes: 1}
  packages: {kubeadm: 1.30.6-1.1, kubelet: 1.30.6-1.1, kubectl: 1.30.6-1.1, containerd.io: 1.7.20-1}
  nic_driver: "24.07-0.6.1.0"
  components:
    - {name: calico-node, namespace: kube-system, kind: DaemonSet, nodes: all,
       image: "docker.io/calico/node:v3.28.1"}
    - {name: kueue-controller-manager, namespace: kueue-system, image: "registry.k8s.io/kueue/kueue:v0.9.1"}
    - name: vllm-llama
      namespace: serving
      image: "vllm/vllm-openai:v0.6.3"
      annotations:
        pitstop.dev/model-format: safetensors
        pitstop.dev/frameworks: "torch==2.4.0,transformers==4.45.2"
  helm_releases:
    - {release: network-operator, namespace: nvidia-network-operator, chart: network-operator,
       version: "24.7.0", app_version: v24.7.0}
"""
CLUSTER = """
cluster:
  nodes: 2
  domains: 1
  gpus_per_node: 4
  driver_version: "550.90.07"
  node_overrides:
    gpu-node-002: {driver_version: "570.86.15"}
timing: {time_scale: 20}
"""


# The vendor matrix these tests judge against (the shipped ones change with vendors' pages).
KUEUE_MATRIX = """
component: kueue
title: Kueue installation requirements
source: https://kueue.sigs.k8s.io/docs/installation/
retrieved: "2026-11-29"
releases:
  - {version: v0.9.x, supports: {kubernetes: ["1.29-1.31"]}}
"""
REPO_COMPAT = Path(__file__).resolve().parents[2] / "runbooks" / "compat"
SCENARIO = Path(__file__).resolve().parents[2] / "runbooks" / "scenarios" / "platform-upgrade.yaml"


@pytest.fixture(autouse=True)
def compat_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "compat"
    directory.mkdir()
    shutil.copy(REPO_COMPAT / "components.yaml", directory / "components.yaml")
    (directory / "kueue.yaml").write_text(KUEUE_MATRIX)
    monkeypatch.setenv("PITSTOP_COMPAT_DIR", str(directory))
    return directory


def rows(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["component"]: row for row in data["rows"]}


def test_inventory_reads_every_source_of_the_cluster_api(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER, PLATFORM)
    args = {
        "targets": {"kubernetes": "v1.31.2"},
        "validation": {"kubernetes": "passed on the rehearsal cluster"},
    }
    result = module_runner(versions, sim, args, host="localhost")
    assert not result.changed and not result.failed
    assert result.msg == "30 components, 1 to change: kubernetes v1.30.6 → v1.31.2"
    data = result.data
    assert [r["component"] for r in data["rows"]] == list(COMPONENT_KEYS)
    by = rows(data)
    seen = {
        k: (by[k]["current"], by[k]["current_source"])
        for k in (
            "kubernetes",
            "kube-controller-manager",
            "kubelet",
            "container-runtime",
            "cni",
            "gpu-driver",
            "device-plugin",
            "dcgm",
            "network-operator",
            "kueue",
            "vllm",
            "python-frameworks",
        )
    }
    assert seen == {
        "kubernetes": ("v1.30.6", "apiserver /version"),
        "kube-controller-manager": (
            "v1.30.6",
            "kube-system pod component=kube-controller-manager (image tag)",
        ),
        "kubelet": ("v1.30.6", "node status.nodeInfo.kubeletVersion"),
        "container-runtime": ("containerd://1.7.20", "node status.nodeInfo.containerRuntimeVersion"),
        "cni": ("calico v3.28.1", "image tag (docker.io/calico/node)"),
        "gpu-driver": ("550.90.07 (1 node), 570.86.15 (1 node)", "node label pitstop.dev/driver-version"),
        "device-plugin": ("v0.16.2", "image tag (nvcr.io/nvidia/k8s-device-plugin)"),
        "dcgm": ("3.3.7", "image tag (nvcr.io/nvidia/k8s/dcgm-exporter)"),
        "network-operator": ("v24.7.0", "helm release network-operator"),
        "kueue": ("v0.9.1", "image tag (registry.k8s.io/kueue/kueue)"),
        "vllm": ("v0.6.3", "image tag (vllm/vllm-openai)"),
        "python-frameworks": (
            "torch==2.4.0, transformers==4.45.2",
            "workload annotation pitstop.dev/frameworks",
        ),
    }
    assert by["gpu-driver"]["versions_by_node"] == {"gpu-node-001": "550.90.07", "gpu-node-002": "570.86.15"}
    assert by["kserve"]["current"] == "not deployed" and by["kserve"]["target"] == "not deployed"
    assert by["kueue"]["support_source"] == "https://kueue.sigs.k8s.io/docs/installation/: supported"
    assert by["kueue"]["supported"] is True
    assert by["gpu-operator"]["support_source"] == "no vendor matrix"
    assert by["kubernetes"]["validation"] == "passed on the rehearsal cluster"
    for row in data["rows"]:
        assert all(
            str(row[c]).strip() for c in ("current", "target", "support_source", "validation", "rollback")
        )
    assert data["diff"] == [{"component": "kubernetes", "current": "v1.30.6", "target": "v1.31.2"}]
    # The control-plane node's kubelet counts for the skew policy too.
    assert data["skew"] == {
        "apiserver": "v1.30.6",
        "controller_manager": "v1.30.6",
        "scheduler": "v1.30.6",
        "kubelets": {"cp-001": "v1.30.6", "gpu-node-001": "v1.30.6", "gpu-node-002": "v1.30.6"},
        "kube_proxies": {"cp-001": "v1.30.6", "gpu-node-001": "v1.30.6", "gpu-node-002": "v1.30.6"},
    }
    # Read-only: check mode reports the same.
    checked = module_runner(versions, sim, args, host="localhost", check_mode=True)
    assert checked.data == data and not checked.changed


def test_an_unreadable_ssh_facts_argument_is_refused_with_the_shapes_that_work(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    with pytest.raises(ApplicationError) as refused:
        module_runner(versions, sim, {"ssh_facts": ["gpu-node-001"]}, host="localhost")
    assert refused.value.type == "InvalidArgs" and refused.value.non_retryable
    assert "ssh_facts[0] is a str, not a registered ssh.facts result" in refused.value.message
    with pytest.raises(ApplicationError, match="did you mean 'gpu-driver'"):
        module_runner(versions, sim, {"targets": {"gpu-drivers": "570.86.15"}}, host="localhost")


def test_ssh_facts_of_the_nodes_add_driver_nic_and_package_versions(
    start_nodes: Callable[..., SimNodes],
) -> None:
    nodes = start_nodes(PLATFORM)
    facts = nodes.run(ssh_facts, nodes.call("ssh.facts", {}, host="gpu-node-001")).data
    assert {
        k: facts[k] for k in ("kubelet_version", "containerd_version", "kubeadm_version", "nic_driver")
    } == {
        "kubelet_version": "v1.30.6",
        "containerd_version": "1.7.20",
        "kubeadm_version": "v1.30.6",
        "nic_driver": "24.07-0.6.1.0",
    }
    assert facts["packages"] == {"kubeadm": "1.30.6-1.1", "kubelet": "1.30.6-1.1", "kubectl": "1.30.6-1.1"}
    assert facts["packages_error"] == {} and facts["kubelet_version_error"] is None

    # As a looped `ssh.facts` task with `delegate_to: "{{ item }}"` registers it.
    registered = []
    for host in ("gpu-node-001", "gpu-node-002", "cp-001"):
        result = nodes.run(ssh_facts, nodes.call("ssh.facts", {}, host=host)).as_var()
        registered.append({**result, "item": host, "ansible_loop_var": "item"})
    cluster = nodes.inventory.cluster
    call = ModuleCall(
        module="inventory.versions",
        host="localhost",
        args={"ssh_facts": registered, "targets": {"gpu-driver": "570.86.15"}},
        run_id="run-1",
        task_path="preflight/0",
        host_vars={"inventory_hostname": "localhost"},
        cluster=cluster,
    )
    data = nodes.run(versions, call).data
    by = rows(data)
    assert (by["gpu-driver"]["current"], by["gpu-driver"]["current_source"]) == (
        "550.90.07",
        "ssh facts (gpu_driver)",
    )
    assert (by["nic-driver"]["current"], by["nic-driver"]["current_source"]) == (
        "24.07-0.6.1.0",
        "ssh facts (nic_driver)",
    )
    assert (by["kubectl"]["current"], by["kubectl"]["current_source"]) == (
        "v1.30.6",
        "ssh facts (dpkg kubectl)",
    )
    assert by["gpu-firmware"]["current"] == "92.00.45.00.06 (1 node), 96.00.89.00.01 (1 node)"
    assert data["skew"]["kubectl"] == "v1.30.6"
    assert data["diff"] == [{"component": "gpu-driver", "current": "550.90.07", "target": "570.86.15"}]
    assert data["notes"] == []


@pytest.fixture
def platform_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_policy: PolicyLayer
) -> Iterator[SimNodes]:
    """The shipped platform-upgrade scenario, with SSH endpoints on every node, registered with
    the worker and its client key granted as the cluster's SSH key."""
    scenario = parse_scenario(SCENARIO.read_text(), str(SCENARIO))
    sim = SimCluster(SimConfig(scenario=scenario, kubeconfig=tmp_path / "kubeconfig", ssh=True))
    sim.start()
    sim.register()
    worker_policy.grant("sim-ssh-key", "ssh_key")
    monkeypatch.setenv(DIR_ENV, str(sim.ssh_secrets_dir))
    try:
        yield SimNodes(sim, load_inventory(sim.inventory_path), worker_policy)
    finally:
        close_all()
        sim.stop()


# What inventory.versions reads on the platform upgrade scenario, every row but CUDA (which is
# derived from the driver).
PLATFORM_UPGRADE_CURRENT = {
    "os": "Ubuntu 22.04.4 LTS",
    "kernel": "5.15.0-105-generic",
    "gpu-firmware": "96.00.89.00.01",
    "kubernetes": "v1.30.6",
    "kube-controller-manager": "v1.30.6",
    "kube-scheduler": "v1.30.6",
    "kubelet": "v1.30.6",
    "kubectl": "v1.30.6",
    "container-runtime": "containerd://1.7.20",
    "cni": "calico v3.28.2",
    "csi": "csi-driver-nfs v4.9.0",
    "gpu-driver": "550.90.07",
    "container-toolkit": "v1.16.2",
    "device-plugin": "v0.16.2",
    "gpu-operator": "v24.6.2",
    "dcgm": "3.3.7",
    "nic-driver": "24.07-0.6.1.0",
    "network-operator": "v24.7.0",
    "kueue": "v0.9.1",
    "jobset": "v0.7.1",
    "lws": "v0.4.0",
    "trainer": "v1.8.1",
    "kuberay": "v1.2.2",
    "kserve": "v0.14.0",
    "vllm": "v0.6.3",
    "sglang": "v0.3.5",
    "triton": "24.09",
    "model-formats": "onnx, safetensors",
    "python-frameworks": (
        "flashinfer==0.1.6, onnxruntime==1.19.2, tensorrt==10.4.0, torch==2.4.0, transformers==4.45.2"
    ),
}


def test_the_platform_upgrade_scenario_reports_every_row_from_api_and_ssh_facts(
    platform_nodes: SimNodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PITSTOP_COMPAT_DIR", str(REPO_COMPAT))  # the shipped vendor matrices
    nodes = platform_nodes
    hosts = [*nodes.sim.config.scenario.cluster.node_names(), "cp-001"]
    registered = [
        {
            **nodes.run(ssh_facts, nodes.call("ssh.facts", {}, host=h)).as_var(),
            "item": h,
            "ansible_loop_var": "item",
        }
        for h in hosts
    ]
    targets = {
        "kubernetes": "v1.31.2",
        "kubelet": "v1.31.2",
        "gpu-driver": "570.86.15",
        "gpu-operator": "v24.9.2",
    }
    call = ModuleCall(
        module="inventory.versions",
        host="localhost",
        args={"ssh_facts": {"results": registered}, "targets": targets},
        run_id="run-1",
        task_path="preflight/0",
        host_vars={"inventory_hostname": "localhost"},
        cluster=nodes.inventory.cluster,
    )
    result = nodes.run(versions, call)
    by = rows(result.data)
    # Without GPU Feature Discovery labels, the CUDA level is the newest the driver runs (CUDA matrix).
    cuda = by.pop("cuda")
    assert re.fullmatch(r"12\.\d+(\.\d+)?", cuda["current"]), cuda
    assert cuda["current_source"].startswith("newest CUDA level for the driver (https://")
    assert {k: r["current"] for k, r in by.items()} == PLATFORM_UPGRADE_CURRENT
    assert by["gpu-driver"]["current_source"] == "ssh facts (gpu_driver)"
    assert by["nic-driver"]["current_source"] == "ssh facts (nic_driver)"
    for row in result.data["rows"]:
        assert all(
            str(row[c]).strip() for c in ("current", "target", "support_source", "validation", "rollback")
        )
    assert [d["component"] for d in result.data["diff"]] == [
        "kubernetes",
        "kubelet",
        "gpu-driver",
        "gpu-operator",
    ]
    assert result.msg.startswith(
        "30 components, 4 to change: kubernetes v1.30.6 → v1.31.2, kubelet v1.30.6 → v1.31.2, "
        "gpu-driver 550.90.07 → 570.86.15, gpu-operator v24.6.2 → v24.9.2"
    )
    assert result.data["skew"]["kubelets"] == {h: "v1.30.6" for h in hosts}
    assert result.data["notes"] == []


# The node tools as real nodes print them (containerd's upstream build, a DOCA-era OFED).
NODE_TOOLS = {
    "kubelet": 'echo "Kubernetes v1.31.2"',
    "containerd": 'echo "containerd github.com/containerd/containerd v1.7.22 7f7fdf5fed64eb6a7caf99b3e12e"',
    "kubeadm": '[ "$*" = "version -o short" ] && echo v1.31.2',
    "ofed_info": '[ "$1" = "-s" ] && echo "OFED-internal-24.10-1.1.4.0:"',
}


def test_version_probes_on_a_real_sshd_node_report_tools_and_missing_ones(
    lab: SshLab, fake_node: FakeNode
) -> None:
    for name, body in NODE_TOOLS.items():
        path = fake_node.bin / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    facts = lab.run(ssh_facts, lab.call("ssh.facts", {}, server=fake_node.server)).data
    assert (facts["kubelet_version"], facts["containerd_version"], facts["kubeadm_version"]) == (
        "v1.31.2",
        "1.7.22",
        "v1.31.2",
    )
    assert facts["nic_driver"] == "24.10-1.1.4.0" and facts["nic_driver_error"] is None
    # The existing facts are unchanged (14 probes on one connection: OpenSSH allows 10 at once).
    assert facts["gpu_driver"] == "550.54.15" and facts["firmware"] == "1.0"
    # The lab node is this host: its dpkg answers (None, with the reason, for a package it lacks).
    for package in ("kubeadm", "kubelet", "kubectl"):
        local = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=False
        )
        if local.returncode == 0:
            assert facts["packages"][package] == local.stdout.strip()
        else:
            assert facts["packages"][package] is None and facts["packages_error"][package]

    bare = lab.run(ssh_facts, lab.call("ssh.facts", {})).data
    assert bare["kubelet_version"] is None and "kubelet" in str(bare["kubelet_version_error"])
    assert bare["nic_driver"] is None and "ofed_info" in str(bare["nic_driver_error"])
