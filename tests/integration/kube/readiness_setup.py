"""What a MultiKueue manager's jobs expect of a worker cluster, put on rehearsal clusters through
their admin API: team-a's namespace, the `nvidia` RuntimeClass, an image pull Secret, the
model-cache StorageClass and claim, the dcgm-exporter DaemonSet, Kueue's h100 ResourceFlavor,
ClusterQueue and LocalQueue; on the manager, the MultiKueueCluster naming the worker."""

from __future__ import annotations

import base64
import json
from typing import Any

from pitstop_sim import SimCluster

# What the image pull Secret holds: it must never appear in a result or in history.
SECRET_VALUE = "pull-token-7f3a9c1e5b"
LABEL = "pitstop.dev/multikueue"
SELECTOR = f"{LABEL}=required"
TEAM = "team-a"
MONITORING = "gpu-monitoring"

SIM = """
cluster:
  nodes: 2
  domains: 1
  gpus_per_node: 8
"""


def _labels() -> dict[str, Any]:
    return {"labels": {LABEL: "required"}}


def dockerconfig() -> str:
    auth = base64.b64encode(f"robot:{SECRET_VALUE}".encode()).decode()
    doc = {"auths": {"registry.example.com": {"auth": auth, "password": SECRET_VALUE}}}
    return base64.b64encode(json.dumps(doc).encode()).decode()


def platform(
    sim: SimCluster,
    *,
    storage_class: bool = True,
    local_queue: bool = True,
    secret_type: str = "kubernetes.io/dockerconfigjson",
    gpu_covered: bool = True,
) -> None:
    """The objects team-a's jobs need, each labelled as the manager selects them."""
    for ns in (TEAM, MONITORING):
        if sim.get("namespaces", ns) is None:  # a cluster with RBAC made the one it binds roles in
            sim.create("namespaces", {"metadata": {"name": ns, **_labels()}})
        else:
            sim.patch("namespaces", ns, {"metadata": _labels()})
    sim.create(
        "node.k8s.io/runtimeclasses", {"metadata": {"name": "nvidia", **_labels()}, "handler": "nvidia"}
    )
    data_key = ".dockerconfigjson" if secret_type == "kubernetes.io/dockerconfigjson" else "token"
    sim.create(
        "secrets",
        {
            "metadata": {"name": "registry-pull", **_labels()},
            "type": secret_type,
            "data": {data_key: dockerconfig()},
        },
        namespace=TEAM,
    )
    if storage_class:
        sim.create(
            "storage.k8s.io/storageclasses",
            {"metadata": {"name": "model-cache", **_labels()}, "provisioner": "nfs.csi.k8s.io"},
        )
    sim.create(
        "persistentvolumeclaims",
        {
            "metadata": {"name": "model-cache", **_labels()},
            "spec": {
                "storageClassName": "model-cache",
                "accessModes": ["ReadOnlyMany"],
                "resources": {"requests": {"storage": "500Gi"}},
            },
        },
        namespace=TEAM,
    )
    sim.create(
        "apps/daemonsets",
        {
            "metadata": {"name": "nvidia-dcgm-exporter", **_labels()},
            "spec": {
                "selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
                "template": {
                    "metadata": {"labels": {"app": "nvidia-dcgm-exporter"}},
                    "spec": {
                        "nodeSelector": {"pitstop.dev/none": "true"},
                        "containers": [
                            {"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.1.1"}
                        ],
                    },
                },
            },
        },
        namespace=MONITORING,
    )
    sim.create(
        "kueue.x-k8s.io/resourceflavors",
        {
            "metadata": {"name": "h100", **_labels()},
            "spec": {"nodeLabels": {"nvidia.com/gpu.product": "H100"}},
        },
    )
    covered = ["cpu", "memory", "nvidia.com/gpu"] if gpu_covered else ["cpu", "memory"]
    sim.create(
        "kueue.x-k8s.io/clusterqueues",
        {
            "metadata": {"name": "team-a-cq", **_labels()},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": covered,
                        "flavors": [
                            {
                                "name": "h100",
                                "resources": [{"name": r, "nominalQuota": "64"} for r in covered],
                            }
                        ],
                    }
                ],
            },
        },
    )
    if local_queue:
        sim.create(
            "kueue.x-k8s.io/localqueues",
            {"metadata": {"name": "team-a", **_labels()}, "spec": {"clusterQueue": "team-a-cq"}},
            namespace=TEAM,
        )


def multikueue(manager: SimCluster, worker: str, *, active: bool = True) -> None:
    """On the manager: the worker's kubeconfig Secret (not labelled: never expected), its
    MultiKueueCluster, the MultiKueueConfig and the AdmissionCheck, Active as Kueue reports it."""
    manager.create(
        "secrets",
        {"metadata": {"name": f"{worker}-kubeconfig"}, "data": {"kubeconfig": dockerconfig()}},
        namespace="kueue-system",
    )
    manager.create(
        "kueue.x-k8s.io/multikueueclusters",
        {
            "metadata": {"name": worker},
            "spec": {"kubeConfig": {"locationType": "Secret", "location": f"{worker}-kubeconfig"}},
        },
    )
    manager.create(
        "kueue.x-k8s.io/multikueueconfigs", {"metadata": {"name": "team-a"}, "spec": {"clusters": [worker]}}
    )
    manager.create(
        "kueue.x-k8s.io/admissionchecks",
        {
            "metadata": {"name": "team-a-multikueue"},
            "spec": {
                "controllerName": "kueue.x-k8s.io/multikueue",
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "team-a"},
            },
        },
    )
    condition = {
        "type": "Active",
        "status": "True" if active else "False",
        "reason": "Active" if active else "ClientConnectionFailed",
        "message": "Connected" if active else "failed to connect to the worker",
        "lastTransitionTime": "2026-12-03T00:00:00Z",
    }
    manager.patch(
        "kueue.x-k8s.io/multikueueclusters", worker, {"status": {"conditions": [condition]}}, status=True
    )


READ_KINDS = (
    "namespaces",
    "runtimeclasses",
    "secrets",
    "storageclasses",
    "persistentvolumeclaims",
    "daemonsets",
    "resourceflavors",
    "clusterqueues",
    "localqueues",
    "multikueueclusters",
)


def writes_of_read_kinds(sim: SimCluster) -> dict[str, Any]:
    """Objects of the kinds kube.readiness reads written since the last counter reset."""
    return {kind: sim.writes(kind).objects for kind in READ_KINDS if sim.writes(kind).objects}
