"""What the simulator plays of the NVIDIA GPU Operator's containerized driver.

Written here again rather than imported from `pitstop.gpu.operator`: the simulator plays the
operator's side, so a name pitstop gets wrong must not be wrong here too
(tests/unit/test_gpu_operator.py holds the shared names of both sides equal).

Sources (NVIDIA/gpu-operator at a22dbf6, NVIDIA/k8s-operator-libs at 11e747a):
- assets/state-driver/0500_daemonset.yaml: DaemonSet `nvidia-driver-daemonset`, pods labelled
  `app: nvidia-driver-daemonset`, `app.kubernetes.io/component: nvidia-driver`,
  `nvidia.com/precompiled: "false"`; `updateStrategy: {type: OnDelete}` whatever the upgrade
  policy says (only a deleted pod comes back with the new template).
- deployments/gpu-operator/values.yaml `driver.upgradePolicy`: the defaults below.
- controllers/upgrade_controller.go: with `autoUpgrade` false (or no upgradePolicy) the
  controller removes every node's upgrade-state label and does nothing else.
- pkg/upgrade/consts.go (k8s-operator-libs): the node label `nvidia.com/%s-driver-upgrade-state`
  (%s = `gpu`), its values, the skip label `nvidia.com/%s-driver-upgrade.skip` and the
  annotation remembering that a node was already unschedulable.
"""

from __future__ import annotations

from typing import Any

GPU_OPERATOR_NAMESPACE = "gpu-operator"
DRIVER_DAEMONSET = "nvidia-driver-daemonset"
DRIVER_REPOSITORY = "nvcr.io/nvidia"
DRIVER_IMAGE_NAME = "driver"
DRIVER_OS_SUFFIX = "ubuntu22.04"
DRIVER_POD_LABELS = {
    "app": DRIVER_DAEMONSET,
    "app.kubernetes.io/component": "nvidia-driver",
    "nvidia.com/precompiled": "false",
}

UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
UPGRADE_SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
INITIAL_UNSCHEDULABLE_ANNOTATION = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"

UPGRADE_REQUIRED = "upgrade-required"
CORDON_REQUIRED = "cordon-required"
WAIT_FOR_JOBS_REQUIRED = "wait-for-jobs-required"
POD_DELETION_REQUIRED = "pod-deletion-required"
DRAIN_REQUIRED = "drain-required"
POD_RESTART_REQUIRED = "pod-restart-required"
VALIDATION_REQUIRED = "validation-required"
UNCORDON_REQUIRED = "uncordon-required"
UPGRADE_DONE = "upgrade-done"
UPGRADE_FAILED = "upgrade-failed"


def default_upgrade_policy() -> dict[str, Any]:
    """`driver.upgradePolicy` as the chart's values.yaml sets it (gpuPodDeletion there is the
    ClusterPolicy's `podDeletion`)."""
    return {
        "autoUpgrade": True,
        "maxParallelUpgrades": 1,
        "maxUnavailable": "25%",
        "waitForCompletion": {"timeoutSeconds": 0, "podSelector": ""},
        "podDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
        "drain": {
            "enable": False,
            "force": False,
            "podSelector": "",
            "timeoutSeconds": 300,
            "deleteEmptyDir": False,
        },
    }


def driver_image(version: str) -> str:
    """The image the operator renders for `repository/image:version` on Ubuntu 22.04 nodes."""
    return f"{DRIVER_REPOSITORY}/{DRIVER_IMAGE_NAME}:{version}-{DRIVER_OS_SUFFIX}"


def image_driver_version(image: str) -> str | None:
    """`nvcr.io/nvidia/driver:570.86.15-ubuntu22.04` -> `570.86.15`; None for another image."""
    _, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return None
    version = tag.split("-", 1)[0]
    return version or None
