"""The component keys every inventory row, target, matrix and compat check uses (issue #9).

Each row of the platform's version inventory (docs/upgrade-process.md "Version inventory") is
split into the keys its components report versions under; the row label is what reports show.
"""

from __future__ import annotations

COMPONENT_ROWS: dict[str, tuple[str, ...]] = {
    "OS, kernel and firmware": ("os", "kernel", "gpu-firmware"),
    "Kubernetes and containerd/CRI-O": (
        "kubernetes",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "kubectl",
        "container-runtime",
    ),
    "CNI and CSI": ("cni", "csi"),
    "GPU driver and CUDA level": ("gpu-driver", "cuda"),
    "NVIDIA Container Toolkit and Device Plugin": ("container-toolkit", "device-plugin"),
    "GPU Operator and DCGM": ("gpu-operator", "dcgm"),
    "RDMA/NIC driver and Network Operator": ("nic-driver", "network-operator"),
    "Kueue, JobSet, LWS, Trainer, KubeRay": ("kueue", "jobset", "lws", "trainer", "kuberay"),
    "KServe, vLLM/SGLang/Triton": ("kserve", "vllm", "sglang", "triton"),
    "Model formats and key Python frameworks": ("model-formats", "python-frameworks"),
}

COMPONENT_KEYS: tuple[str, ...] = tuple(key for keys in COMPONENT_ROWS.values() for key in keys)

ROW_OF: dict[str, str] = {key: row for row, keys in COMPONENT_ROWS.items() for key in keys}
