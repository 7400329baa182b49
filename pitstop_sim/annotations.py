"""Labels and annotations the simulator gives meaning to (the contract with pitstop's modules).

Checkpoint protocol (pods or Jobs):
  - A workload that can checkpoint declares `pitstop.dev/checkpoint-protocol: "annotation"`.
  - A client asks for a checkpoint by setting `pitstop.dev/checkpoint-requested: <token>`
    (any new token, e.g. the run id).
  - After the workload's checkpoint time it answers `pitstop.dev/checkpoint-done: <token>`
    (the same token). Objects without the protocol annotation never answer.
"""

from __future__ import annotations

# Deliberately written here again rather than imported from `pitstop.kube.annotations`: these
# are a contract between pitstop and the workloads it drains, and the simulator plays the
# workload's side, so a name pitstop gets wrong must not be wrong here too.
# tests/unit/test_kube_helpers.py holds the shared names of both sides equal.

DOMAIN_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
DRIVER_VERSION_LABEL = "pitstop.dev/driver-version"
FIRMWARE_VERSION_LABEL = "pitstop.dev/firmware-version"

GANG_LABEL = "pitstop.dev/gang"
VALIDATION_LABEL = "pitstop.dev/validation"
CHECKPOINT_PROTOCOL = "pitstop.dev/checkpoint-protocol"
CHECKPOINT_REQUESTED = "pitstop.dev/checkpoint-requested"
CHECKPOINT_DONE = "pitstop.dev/checkpoint-done"
CHECKPOINT_SECONDS = "pitstop.dev/checkpoint-seconds"
RUN_SECONDS = "sim.pitstop.dev/run-seconds"

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"
