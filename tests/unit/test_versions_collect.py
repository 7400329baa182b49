"""inventory.versions, the pure part: every row of docs/upgrade-process.md "Version inventory"
with its five columns, mixed versions, absent components, targets and diffs, vendor support
sources, skew (hand-built API objects)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from ruamel.yaml import YAML

from pitstop.compat.matrix import Matrix, load_matrices
from pitstop.helm import HelmRelease
from pitstop.module_args.inventory import VersionsArgs
from pitstop.versions.collect import Inventory, collect, mixed, same_version
from pitstop.versions.components import (
    COMPONENT_KEYS,
    ROWS,
    ComponentTable,
    load_components,
    parse_components,
)
from pitstop.versions.detect import ClusterView

Obj = dict[str, Any]
COMPAT = Path(__file__).resolve().parents[2] / "runbooks" / "compat"


def table() -> ComponentTable:
    return load_components(COMPAT)


def node(
    name: str,
    *,
    gpu: bool = True,
    kubelet: str = "v1.30.6",
    runtime: str = "containerd://1.7.20",
    os_image: str = "Ubuntu 22.04.4 LTS",
    kernel: str = "5.15.0-105-generic",
    labels: dict[str, str] | None = None,
) -> Obj:
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if gpu:
        all_labels["nvidia.com/gpu.present"] = "true"
    return {
        "metadata": {"name": name, "labels": all_labels},
        "status": {
            "nodeInfo": {
                "kubeletVersion": kubelet,
                "kubeProxyVersion": kubelet,
                "containerRuntimeVersion": runtime,
                "osImage": os_image,
                "kernelVersion": kernel,
            }
        },
    }


def workload(
    kind: str, namespace: str, name: str, *images: str, annotations: dict[str, str] | None = None
) -> Obj:
    return {
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {
            "template": {
                "metadata": {},
                "spec": {"containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]},
            }
        },
    }


def control_plane_pod(component: str, node_name: str, version: str) -> Obj:
    return {
        "metadata": {
            "name": f"{component}-{node_name}",
            "namespace": "kube-system",
            "labels": {"component": component, "tier": "control-plane"},
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": component, "image": f"registry.k8s.io/{component}:{version}"}],
        },
    }


def facts(
    hostname: str,
    *,
    driver: str | None = "550.90.07",
    firmware: str | None = "96.00.89.00.01",
    nic: str | None = "24.07-0.6.1.0",
    kubectl: str | None = "1.30.6-1.1",
) -> Obj:
    return {
        "hostname": hostname,
        "kernel": "5.15.0-105-generic",
        "boot_id": "b-1",
        "os": {"id": "ubuntu", "version_id": "22.04", "pretty_name": "Ubuntu 22.04.4 LTS"},
        "gpus": [
            {"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver_version": driver, "vbios_version": firmware}
        ]
        if driver
        else [],
        "gpu_driver": driver,
        "firmware": firmware,
        "kubelet_version": "v1.30.6",
        "containerd_version": "1.7.20",
        "kubeadm_version": "v1.30.6",
        "nic_driver": nic,
        "packages": {"kubeadm": "1.30.6-1.1", "kubelet": "1.30.6-1.1", "kubectl": kubectl},
        "changed": False,
        "failed": False,
        "skipped": False,
        "msg": "",
    }


GFD_CUDA = {"nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "4"}

PLATFORM_IMAGES = [
    workload("DaemonSet", "kube-system", "calico-node", "docker.io/calico/node:v3.28.1"),
    workload("DaemonSet", "ceph-csi", "csi-rbdplugin", "quay.io/cephcsi/cephcsi:v3.12.0"),
    workload(
        "DaemonSet",
        "gpu-operator",
        "nvidia-container-toolkit-daemonset",
        "nvcr.io/nvidia/k8s/container-toolkit:v1.16.2-ubuntu20.04",
    ),
    workload(
        "DaemonSet",
        "gpu-operator",
        "nvidia-device-plugin-daemonset",
        "nvcr.io/nvidia/k8s-device-plugin:v0.16.2",
    ),
    workload("Deployment", "gpu-operator", "gpu-operator", "nvcr.io/nvidia/gpu-operator:v24.6.2"),
    workload(
        "DaemonSet",
        "gpu-operator",
        "nvidia-dcgm-exporter",
        "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.7-3.5.0-ubuntu22.04",
    ),
    workload(
        "Deployment",
        "nvidia-network-operator",
        "network-operator",
        "nvcr.io/nvidia/cloud-native/network-operator:v24.7.0",
    ),
    workload("Deployment", "kueue-system", "kueue-controller-manager", "registry.k8s.io/kueue/kueue:v0.9.1"),
    workload(
        "Deployment", "jobset-system", "jobset-controller-manager", "registry.k8s.io/jobset/jobset:v0.7.1"
    ),
    workload("Deployment", "lws-system", "lws-controller-manager", "registry.k8s.io/lws/lws:v0.4.0"),
    workload("Deployment", "kubeflow", "training-operator", "kubeflow/training-operator:v1-5a5f92d"),
    workload("Deployment", "ray-system", "kuberay-operator", "quay.io/kuberay/operator:v1.2.2"),
    workload("Deployment", "kserve", "kserve-controller-manager", "kserve/kserve-controller:v0.14.0"),
    workload(
        "Deployment",
        "serving",
        "vllm-llama",
        "vllm/vllm-openai:v0.6.3",
        annotations={
            "pitstop.dev/model-format": "safetensors",
            "pitstop.dev/frameworks": "torch==2.4.0,transformers==4.45.2",
        },
    ),
    workload("Deployment", "serving", "sglang-qwen", "lmsysorg/sglang:v0.3.5-cu124"),
    workload(
        "Deployment",
        "serving",
        "triton-ensemble",
        "nvcr.io/nvidia/tritonserver:24.08-py3",
        annotations={"pitstop.dev/model-format": "onnx, tensorrt-plan"},
    ),
]


def platform_view(**overrides: Any) -> ClusterView:
    """A cluster running every component the inventory knows."""
    nodes = [
        node("cp-001", gpu=False),
        *(node(f"gpu-node-00{i}", labels=GFD_CUDA) for i in (1, 2)),
    ]
    fields: dict[str, Any] = {
        "version": {"gitVersion": "v1.30.6"},
        "nodes": nodes,
        "gpu_nodes": frozenset({"gpu-node-001", "gpu-node-002"}),
        "control_plane_pods": [
            control_plane_pod(c, "cp-001", "v1.30.6")
            for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
        ],
        "workloads": PLATFORM_IMAGES,
        "helm_releases": [
            HelmRelease(
                name="gpu-operator",
                namespace="gpu-operator",
                version=3,
                chart_name="gpu-operator",
                chart_version="v24.6.2",
                app_version="v24.6.2",
            )
        ],
        "facts": {n: facts(n) for n in ("cp-001", "gpu-node-001", "gpu-node-002")},
    }
    fields.update(overrides)
    return ClusterView(**fields)


GPU_MATRIX = Matrix.model_validate(
    {
        "component": "gpu-operator",
        "title": "NVIDIA GPU Operator platform support",
        "source": "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html",
        "retrieved": "2026-11-29",
        "releases": [
            {"version": "v24.6.x", "supports": {"kubernetes": ["1.29-1.31"], "gpu-driver": ["550.*"]}},
            {
                "version": "v24.9.x",
                "supports": {"kubernetes": ["1.29-1.31"], "gpu-driver": ["550.*", "560.*"]},
            },
        ],
    }
)


def inventory(view: ClusterView | None = None, **kw: Any) -> Inventory:
    return collect(table(), view or platform_view(), **kw)


def rows_by_key(inv: Inventory) -> dict[str, Any]:
    return {r.component: r for r in inv.rows}


def test_every_section_2_row_is_reported_with_all_five_columns() -> None:
    inv = inventory(targets={"kubernetes": "v1.31.2"}, validation={"kubernetes": "passed in staging"})
    assert [r.component for r in inv.rows] == list(COMPONENT_KEYS)
    assert [r.row for r in inv.rows] == [row for row, keys in ROWS.items() for _ in keys]
    assert {r.row for r in inv.rows} == set(ROWS) and len(ROWS) == 10
    for row in inv.rows:
        for column in ("current", "target", "support_source", "validation", "rollback"):
            assert getattr(row, column).strip(), f"{row.component}: empty {column}"
    by = rows_by_key(inv)
    assert by["kubernetes"].target == "v1.31.2" and by["kubernetes"].validation == "passed in staging"
    assert by["kubelet"].validation == "not validated"
    assert "etcd snapshot" in by["kubernetes"].rollback
    assert "reboot" in by["gpu-driver"].rollback


def test_current_versions_come_from_the_authoritative_source_of_each_component() -> None:
    by = rows_by_key(inventory())
    expected = {
        "os": ("Ubuntu 22.04.4 LTS", "node status.nodeInfo.osImage"),
        "kernel": ("5.15.0-105-generic", "node status.nodeInfo.kernelVersion"),
        "gpu-firmware": ("96.00.89.00.01", "ssh facts (firmware)"),
        "kubernetes": ("v1.30.6", "apiserver /version"),
        "kube-controller-manager": (
            "v1.30.6",
            "kube-system pod component=kube-controller-manager (image tag)",
        ),
        "kubelet": ("v1.30.6", "node status.nodeInfo.kubeletVersion"),
        "kubectl": ("v1.30.6", "ssh facts (dpkg kubectl)"),
        "container-runtime": ("containerd://1.7.20", "node status.nodeInfo.containerRuntimeVersion"),
        "cni": ("calico v3.28.1", "image tag (docker.io/calico/node)"),
        "csi": ("ceph-csi v3.12.0", "image tag (quay.io/cephcsi/cephcsi)"),
        "gpu-driver": ("550.90.07", "ssh facts (gpu_driver)"),
        "cuda": ("12.4", "node labels nvidia.com/cuda.runtime.major, nvidia.com/cuda.runtime.minor"),
        "container-toolkit": ("v1.16.2", "image tag (nvcr.io/nvidia/k8s/container-toolkit)"),
        "gpu-operator": ("v24.6.2", "image tag (nvcr.io/nvidia/gpu-operator)"),
        "dcgm": ("3.3.7", "image tag (nvcr.io/nvidia/k8s/dcgm-exporter)"),
        "nic-driver": ("24.07-0.6.1.0", "ssh facts (nic_driver)"),
        "trainer": ("v1-5a5f92d", "image tag (kubeflow/training-operator)"),
        "kuberay": ("v1.2.2", "image tag (quay.io/kuberay/operator)"),
        "sglang": ("v0.3.5", "image tag (lmsysorg/sglang)"),
        "triton": ("24.08", "image tag (nvcr.io/nvidia/tritonserver)"),
        "model-formats": ("onnx, safetensors, tensorrt-plan", "workload annotation pitstop.dev/model-format"),
        "python-frameworks": (
            "torch==2.4.0, transformers==4.45.2",
            "workload annotation pitstop.dev/frameworks",
        ),
    }
    assert {k: (by[k].current, by[k].current_source) for k in expected} == expected
    # Where each model format is declared is kept.
    assert by["model-formats"].versions_by_workload == {
        "serving/vllm-llama": "safetensors",
        "serving/triton-ensemble": "onnx, tensorrt-plan",
    }


def test_without_deployments_rows_say_not_deployed_or_not_declared_and_where_they_looked() -> None:
    bare = ClusterView(
        version={"gitVersion": "v1.30.6"},
        nodes=[node("gpu-node-001")],
        gpu_nodes=frozenset({"gpu-node-001"}),
    )
    inv = inventory(bare)
    by = rows_by_key(inv)
    assert by["kserve"].current == "not deployed" and by["kserve"].target == "not deployed"
    assert by["kserve"].current_source.startswith("not found in: images kserve/kserve-controller")
    assert by["model-formats"].current == "not declared"
    assert by["python-frameworks"].current == "not declared"
    # Only SSH can tell the NIC driver when no driver container runs: say so.
    assert by["nic-driver"].current == "not deployed"
    assert by["kubectl"].current == "unknown"
    assert by["kubectl"].current_source.startswith("needs ssh facts (the ssh_facts argument)")
    # A managed control plane has no kube-system pods: the apiserver's version stands in, and says so.
    assert by["kube-scheduler"].current == "v1.30.6"
    assert "managed control plane" in by["kube-scheduler"].current_source
    # Absent components are not in the maps compat.check reads.
    assert "kserve" not in inv.current and "kserve" not in inv.target
    for row in inv.rows:
        assert all(
            getattr(row, c).strip() for c in ("current", "target", "support_source", "validation", "rollback")
        )


def test_mixed_driver_versions_are_counted_per_node_and_kept_by_node() -> None:
    gpu_nodes = [
        node(f"gpu-node-00{i}", labels={"pitstop.dev/driver-version": "550.90.07"}) for i in range(1, 5)
    ]
    view = platform_view(
        nodes=gpu_nodes,
        gpu_nodes=frozenset(name for name in (f"gpu-node-00{i}" for i in range(1, 5))),
        facts={
            "gpu-node-001": facts("gpu-node-001", driver="570.86.15"),
            "gpu-node-002": facts("gpu-node-002"),
            "gpu-node-003": facts("gpu-node-003"),
        },
    )
    inv = inventory(view, targets={"gpu-driver": "570.86.15"})
    row = rows_by_key(inv)["gpu-driver"]
    assert row.current == "550.90.07 (3 nodes), 570.86.15 (1 node)"
    # gpu-node-004 has no SSH facts: its node label answers for it.
    assert row.current_source == "ssh facts (gpu_driver), node label pitstop.dev/driver-version"
    assert row.versions_by_node == {
        "gpu-node-001": "570.86.15",
        "gpu-node-002": "550.90.07",
        "gpu-node-003": "550.90.07",
        "gpu-node-004": "550.90.07",
    }
    assert inv.current["gpu-driver"] == "550.90.07"  # the oldest: the one furthest behind
    # One node already runs the target; the others still have to change.
    assert [d.model_dump() for d in inv.diff] == [
        {
            "component": "gpu-driver",
            "current": "550.90.07 (3 nodes), 570.86.15 (1 node)",
            "target": "570.86.15",
        }
    ]


def test_targets_default_to_current_and_only_real_changes_are_in_the_diff() -> None:
    inv = inventory(
        targets={
            "kubernetes": "v1.31.2",
            "kubelet": "1.30.6",
            "container-runtime": "1.7.20",
            "kserve": "v0.14.1",
        }
    )
    assert inv.target["kubernetes"] == "v1.31.2"
    assert inv.target["gpu-operator"] == inv.current["gpu-operator"] == "v24.6.2"
    assert [(d.component, d.current, d.target) for d in inv.diff] == [
        ("kubernetes", "v1.30.6", "v1.31.2"),
        ("kserve", "v0.14.0", "v0.14.1"),
    ]
    assert (
        inv.summary() == "30 components, 2 to change: kubernetes v1.30.6 → v1.31.2, kserve v0.14.0 → v0.14.1"
    )


def test_same_version_ignores_prefixes_but_not_the_product() -> None:
    assert same_version("v1.30.6", "1.30.6")
    assert same_version("containerd://1.7.20", "1.7.20")
    assert not same_version("calico v3.28.1", "cilium v3.28.1")
    assert not same_version("550.90.07", "570.86.15")
    assert mixed({"a": "1", "b": "2", "c": "2"}, "workload") == "2 (2 workloads), 1 (1 workload)"


def test_support_source_cites_the_vendor_matrix_and_says_why_not() -> None:
    matrices = {"gpu-operator": GPU_MATRIX}
    supported = rows_by_key(inventory(matrices=matrices, targets={"kubernetes": "v1.31.2"}))
    assert supported["gpu-operator"].support_source == f"{GPU_MATRIX.source}: supported"
    assert supported["gpu-operator"].supported is True
    refused = rows_by_key(inventory(matrices=matrices, targets={"kubernetes": "v1.32.0"}))
    text = refused["gpu-operator"].support_source
    assert text.startswith(
        f"{GPU_MATRIX.source}: not supported: gpu-operator v24.6.2 does not support kubernetes v1.32.0"
    )
    assert refused["gpu-operator"].supported is False
    # No matrix: the skew policy for Kubernetes' own components, else "no vendor matrix".
    assert supported["kubelet"].support_source.startswith(
        "https://kubernetes.io/releases/version-skew-policy/"
    )
    assert supported["vllm"].support_source == "no vendor matrix"
    summary = inventory(matrices=matrices, targets={"kubernetes": "v1.32.0"}).summary()
    assert summary.endswith("; not supported by the vendor matrix: gpu-operator")


def proxy_pod(node_name: str, version: str) -> Obj:
    image = f"registry.k8s.io/kube-proxy:{version}"
    labels = {"k8s-app": "kube-proxy"}
    return {
        "metadata": {"name": f"kube-proxy-{node_name}", "namespace": "kube-system", "labels": labels},
        "spec": {"nodeName": node_name, "containers": [{"name": "kube-proxy", "image": image}]},
    }


def test_skew_lists_the_control_plane_and_every_kubelet() -> None:
    view = platform_view(
        nodes=[node("cp-001", gpu=False, kubelet="v1.30.6"), node("gpu-node-001", kubelet="v1.29.10")],
        proxy_pods=[proxy_pod("cp-001", "v1.30.6"), proxy_pod("gpu-node-001", "v1.29.10")],
    )
    inv = inventory(view)
    assert inv.skew.model_dump() == {
        "apiserver": "v1.30.6",
        "controller_manager": "v1.30.6",
        "scheduler": "v1.30.6",
        "kubelets": {"cp-001": "v1.30.6", "gpu-node-001": "v1.29.10"},
        "kube_proxies": {"cp-001": "v1.30.6", "gpu-node-001": "v1.29.10"},
        "kubectl": "v1.30.6",
    }
    assert inv.current["kubelet"] == "v1.29.10"


def test_kube_proxy_versions_come_from_its_images_never_from_node_info() -> None:
    # nodeInfo.kubeProxyVersion is the kubelet's own version (and empty from 1.33, KEP-4004):
    # a node whose kubelet was upgraded while kube-proxy's image was not reads wrong there.
    nodes = [node("cp-001", gpu=False, kubelet="v1.31.2"), node("gpu-node-001", kubelet="v1.31.2")]
    nodes[1]["status"]["nodeInfo"]["kubeProxyVersion"] = ""
    pods = [proxy_pod("cp-001", "v1.31.2"), proxy_pod("gpu-node-001", "v1.30.6")]
    assert inventory(platform_view(nodes=nodes, proxy_pods=pods)).skew.kube_proxies == {
        "cp-001": "v1.31.2",
        "gpu-node-001": "v1.30.6",
    }
    # Pods not readable: the DaemonSet's image, for every node it runs on.
    daemonset = workload("DaemonSet", "kube-system", "kube-proxy", "registry.k8s.io/kube-proxy:v1.30.6")
    view = platform_view(nodes=nodes, workloads=[*PLATFORM_IMAGES, daemonset])
    assert inventory(view).skew.kube_proxies == {"cp-001": "v1.30.6", "gpu-node-001": "v1.30.6"}
    # No kube-proxy at all (replaced by the CNI): nothing to judge, whatever nodeInfo says.
    assert inventory(platform_view(nodes=nodes)).skew.kube_proxies == {}


def test_gke_kube_proxy_static_pods_are_read_and_its_idle_daemonset_is_not() -> None:
    # GKE runs kube-proxy as static pods (label component=kube-proxy, image kube-proxy-amd64)
    # and keeps a kube-system/kube-proxy DaemonSet that matches no node.
    nodes = [
        node("gke-pool-1-a", kubelet="v1.30.5-gke.1014001"),
        node("gke-pool-1-b", kubelet="v1.30.5-gke.1014001"),
    ]
    static = proxy_pod("gke-pool-1-a", "v1.30.5-gke.1014001")
    static["metadata"]["labels"] = {"component": "kube-proxy", "tier": "node"}
    static["spec"]["containers"][0]["image"] = "gke.gcr.io/kube-proxy-amd64:v1.30.5-gke.1014001"
    view = platform_view(nodes=nodes, proxy_pods=[static])
    assert inventory(view).skew.kube_proxies == {"gke-pool-1-a": "v1.30.5-gke.1014001"}
    idle = workload(
        "DaemonSet", "kube-system", "kube-proxy", "gke.gcr.io/kube-proxy-amd64:v1.30.5-gke.1014001"
    )
    idle["status"] = {"desiredNumberScheduled": 0}
    assert inventory(platform_view(nodes=nodes, workloads=[*PLATFORM_IMAGES, idle])).skew.kube_proxies == {}


def test_an_ha_control_plane_mid_upgrade_reports_every_version_oldest_first() -> None:
    pods = [
        control_plane_pod(component, node_name, version)
        for node_name, version in (("cp-001", "v1.31.2"), ("cp-002", "v1.30.6"), ("cp-003", "v1.31.2"))
        for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ]
    inv = inventory(platform_view(version={"gitVersion": "v1.31.2"}, control_plane_pods=pods))
    assert inv.skew.apiserver == ["v1.30.6", "v1.31.2"]
    assert inv.skew.controller_manager == ["v1.30.6", "v1.31.2"]
    row = rows_by_key(inv)["kube-scheduler"]
    assert row.current == "v1.31.2 (2 nodes), v1.30.6 (1 node)"
    assert row.versions_by_node == {"cp-001": "v1.31.2", "cp-002": "v1.30.6", "cp-003": "v1.31.2"}
    assert inv.current["kube-scheduler"] == "v1.30.6"


def test_a_helm_release_stands_in_when_no_image_names_the_component() -> None:
    release = HelmRelease(
        name="netop",
        namespace="nvidia-network-operator",
        version=2,
        chart_name="network-operator",
        chart_version="24.7.0",
        app_version="v24.7.0",
    )
    workloads = [w for w in PLATFORM_IMAGES if w["metadata"]["name"] != "network-operator"]
    by = rows_by_key(inventory(platform_view(workloads=workloads, helm_releases=[release])))
    assert (by["network-operator"].current, by["network-operator"].current_source) == (
        "v24.7.0",
        "helm release netop",
    )


def test_unknown_target_keys_are_refused_with_a_suggestion_and_the_valid_keys() -> None:
    with pytest.raises(ValidationError) as refused:
        VersionsArgs.model_validate({"targets": {"kubernets": "v1.31.2"}})
    message = str(refused.value)
    assert "unknown component key(s) in targets: 'kubernets' (did you mean 'kubernetes'?)" in message
    assert "valid keys: os, kernel, gpu-firmware, kubernetes," in message
    with pytest.raises(ValidationError, match="in validation: 'vllm-openai'"):
        VersionsArgs.model_validate({"validation": {"vllm-openai": "passed"}})
    # YAML numbers are versions too.
    assert VersionsArgs.model_validate({"targets": {"kueue": 0.10}}).targets == {"kueue": "0.1"}


def test_the_component_table_must_match_the_design_keys(tmp_path: Path) -> None:
    text = (COMPAT / "components.yaml").read_text().replace("key: kubectl\n", "key: kubectll\n")
    (tmp_path / "components.yaml").write_text(text)
    with pytest.raises(ValueError, match="missing: kubectl; unknown: kubectll"):
        load_components(tmp_path)
    data = YAML(typ="safe", pure=True).load((COMPAT / "components.yaml").read_text())
    data["components"][COMPONENT_KEYS.index("csi")]["row"] = "GPU Operator and DCGM"
    with pytest.raises(
        ValueError,
        match="component 'csi' is in row 'GPU Operator and DCGM'; its version inventory row is 'CNI and CSI'",
    ):
        parse_components(data)
    assert isinstance(table(), ComponentTable)


def test_every_matrix_the_component_table_names_is_a_shipped_vendor_matrix() -> None:
    shipped = load_matrices(COMPAT)
    named = {c.key: c.matrix for c in table().components if c.matrix}
    assert named, "the table names the vendor matrices it is judged by"
    assert {key: matrix for key, matrix in named.items() if matrix not in shipped} == {}
    # The shipped matrices judge the platform's rows (not "no vendor matrix").
    by = rows_by_key(inventory(matrices=shipped))
    for key, matrix in named.items():
        assert by[key].support_source.startswith("https://"), (key, by[key].support_source)
        assert shipped[matrix].component == key


CUDA_MATRIX = Matrix.model_validate(
    {
        "component": "cuda",
        "title": "CUDA Toolkit minimum driver versions",
        "source": "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html",
        "retrieved": "2026-11-29",
        "releases": [
            {"version": "12.4", "supports": {"gpu-driver": [">=550.54.14"]}},
            {"version": "12.6", "supports": {"gpu-driver": [">=560.28.03"]}},
            {"version": "12.8", "supports": {"gpu-driver": [">=570.26"]}},
        ],
    }
)


def test_without_gfd_labels_the_cuda_level_is_the_newest_the_driver_runs() -> None:
    view = platform_view(
        nodes=[node("gpu-node-001"), node("gpu-node-002")],
        facts={
            "gpu-node-001": facts("gpu-node-001", driver="570.86.15"),
            "gpu-node-002": facts("gpu-node-002"),
        },
    )
    row = rows_by_key(inventory(view, matrices={"cuda": CUDA_MATRIX}))["cuda"]
    assert row.current == "12.4 (1 node), 12.8 (1 node)"
    assert row.current_source == f"newest CUDA level for the driver ({CUDA_MATRIX.source})"
    assert row.versions_by_node == {"gpu-node-001": "12.8", "gpu-node-002": "12.4"}
    # GPU Feature Discovery's labels, where present, say it directly.
    assert rows_by_key(inventory(matrices={"cuda": CUDA_MATRIX}))["cuda"].current == "12.4"
    # Neither labels nor a matrix: unknown, and where it looked.
    unknown = rows_by_key(inventory(view))["cuda"]
    assert unknown.current == "unknown"
    assert unknown.current_source.startswith("not found in: node label nvidia.com/cuda.runtime-version.full")


def test_gpu_feature_discovery_labels_tell_the_driver_when_no_ssh_facts_are_given() -> None:
    gfd = {
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "90",
        "nvidia.com/cuda.driver.rev": "07",
    }
    newer = {"nvidia.com/cuda.driver-version.full": "570.86.15"}
    view = platform_view(
        nodes=[
            node("gpu-node-001", labels=gfd),
            node("gpu-node-002", labels=newer),
            node("cpu-001", gpu=False),
        ],
        gpu_nodes=frozenset({"gpu-node-001", "gpu-node-002"}),
        facts={},
    )
    row = rows_by_key(inventory(view))["gpu-driver"]
    assert row.versions_by_node == {"gpu-node-001": "550.90.07", "gpu-node-002": "570.86.15"}
    assert row.current_source == (
        "node label nvidia.com/cuda.driver-version.full, "
        "node labels nvidia.com/cuda.driver.major, nvidia.com/cuda.driver.minor, nvidia.com/cuda.driver.rev"
    )
