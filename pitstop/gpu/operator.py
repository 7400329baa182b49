"""The NVIDIA GPU Operator's containerized driver, as pitstop reads and steers it.

Sources (NVIDIA/gpu-operator at a22dbf6, NVIDIA/k8s-operator-libs at 11e747a):
- assets/state-driver/0500_daemonset.yaml and manifests/state-driver/0500_daemonset.yaml: the
  driver DaemonSet `nvidia-driver-daemonset` (pods labelled `app: <its name>` and
  `app.kubernetes.io/component: nvidia-driver`) has `updateStrategy: {type: OnDelete}`: a
  running driver pod keeps its driver until it is deleted, whatever the template says.
- api/upgrade/v1alpha1/upgrade_spec.go (DriverUpgradePolicySpec) and controllers/
  upgrade_controller.go: with `spec.driver.upgradePolicy.autoUpgrade` false (or no
  upgradePolicy) the operator's upgrade controller removes the upgrade-state labels and rolls
  nothing; with true it cordons, empties and restarts nodes on its own.
- pkg/upgrade/consts.go (k8s-operator-libs): `nvidia.com/%s-driver-upgrade-state` (%s = gpu)
  and its values, and the skip label.
- deployments/gpu-operator/values.yaml: autoUpgrade true and maxParallelUpgrades 1 by default.

The simulator keeps its own copy (pitstop_sim/gpu_operator.py); tests/unit/test_gpu_operator.py
holds the shared names equal.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

GPU_OPERATOR_NAMESPACE = "gpu-operator"
DRIVER_DAEMONSET = "nvidia-driver-daemonset"
DRIVER_COMPONENT_LABEL = "app.kubernetes.io/component"
DRIVER_COMPONENT = "nvidia-driver"
CLUSTER_POLICY_PATH = "/apis/nvidia.com/v1/clusterpolicies"
UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
UPGRADE_SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
UPGRADE_IN_PROGRESS = (
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
    "node-maintenance-required",
    "post-maintenance-required",
    "pod-restart-required",
    "validation-required",
    "uncordon-required",
)

Management = Literal["operator", "host", "precompiled"]
Obj = dict[str, Any]


class DriverPolicy(BaseModel):
    """What a ClusterPolicy says about the driver."""

    name: str
    enabled: bool
    version: str | None
    auto_upgrade: bool
    precompiled: bool
    resource_version: str | None = None


def driver_policy(policy: Obj) -> DriverPolicy:
    meta = policy.get("metadata") or {}
    driver = (policy.get("spec") or {}).get("driver") or {}
    upgrade = driver.get("upgradePolicy") or {}
    version = driver.get("version")
    return DriverPolicy(
        name=str(meta.get("name") or ""),
        # The CRD defaults `enabled` to true; upgradePolicy absent means no auto upgrade.
        enabled=driver.get("enabled", True) is not False,
        version=str(version) if version not in (None, "") else None,
        auto_upgrade=upgrade.get("autoUpgrade") is True,
        precompiled=driver.get("usePrecompiled") is True,
        resource_version=meta.get("resourceVersion"),
    )


def is_driver_pod(pod: Obj) -> bool:
    """A pod of the operator's driver DaemonSet (precompiled ones carry a kernel suffix)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(DRIVER_COMPONENT_LABEL) == DRIVER_COMPONENT or str(labels.get("app", "")).startswith(
        DRIVER_DAEMONSET
    )


def driver_container_image(pod: Obj) -> str:
    """The driver container's image: the one from the `driver` repository, else the first."""
    containers = (pod.get("spec") or {}).get("containers") or []
    for container in containers:
        if "/driver:" in str(container.get("image") or ""):
            return str(container["image"])
    return str(containers[0].get("image") or "") if containers else ""


def image_driver_version(image: str) -> str | None:
    """`nvcr.io/nvidia/driver:570.86.15-ubuntu22.04` -> `570.86.15` (the operator appends the
    OS to the version as the tag); None when the tag has no version."""
    _, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return None
    version = tag.split("-", 1)[0]
    return version if version and version[0].isdigit() else None
