"""The acceptance catalogue: every item of the table of
docs/upgrade-process.md "Acceptance by layer" as a named check.

A check is `<layer>/<name>` (e.g. `network/nccl`). Checks with a `direction` produce a figure
that is compared with the pre-upgrade baseline; the others are verdicts only (ready or not).
What each probe measures is described in `what`, which the module's documentation and the
change record show.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher_is_better", "lower_is_better", "either"]

LAYERS: tuple[str, ...] = ("kubernetes", "gpu", "network", "storage", "training", "inference", "governance")


@dataclass(frozen=True)
class CheckSpec:
    layer: str
    name: str
    what: str
    unit: str = ""
    direction: Direction | None = None  # None: a verdict, never compared with a baseline

    @property
    def key(self) -> str:
        return f"{self.layer}/{self.name}"

    @property
    def metric(self) -> bool:
        return self.direction is not None


def _c(layer: str, name: str, what: str, unit: str = "", direction: Direction | None = None) -> CheckSpec:
    return CheckSpec(layer, name, what, unit, direction)


CATALOGUE: tuple[CheckSpec, ...] = (
    # Kubernetes: API, scheduling, DNS, CNI, CSI, logs
    _c("kubernetes", "api", "the API server answers /readyz and /version"),
    _c("kubernetes", "scheduling", "no pod in the workload namespaces Pending longer than the limit", "pods"),
    _c("kubernetes", "dns", "the cluster DNS Deployment (CoreDNS) has every replica ready"),
    _c("kubernetes", "cni", "the CNI DaemonSets have a ready pod on every node they target"),
    _c("kubernetes", "csi", "the CSI node DaemonSets have a ready pod on every node they target"),
    _c("kubernetes", "logs", "a running pod's log can be read through the API"),
    # GPU: discovery, allocation, MIG/DRA, DCGM, XID, ECC
    _c("gpu", "discovery", "allocatable nvidia.com/gpu over the nodes", "GPUs", "higher_is_better"),
    # Not compared with a baseline: fewer GPUs in use after a change is workload churn, not a
    # regression (the verdict is only that no more are requested than the nodes have).
    _c("gpu", "allocation", "nvidia.com/gpu requested by running pods (reported, not judged)", "GPUs"),
    _c("gpu", "mig_dra", "MIG nodes report mig.config.state=success; DRA publishes ResourceSlices"),
    _c("gpu", "dcgm", "the DCGM exporter DaemonSet is ready (and dcgmi diag passes on the given nodes)"),
    _c(
        "gpu",
        "xid",
        "Xid errors in events and on the given nodes (DCGM's last Xid per GPU, or the kernel log)",
        "Xid events",
        "lower_is_better",
    ),
    _c(
        "gpu",
        "ecc",
        "GPUs with uncorrectable ECC errors, a pending or failed row remap (or page retirement) "
        "on the given nodes (nvidia-smi -q)",
        "GPUs",
        "lower_is_better",
    ),
    # Network: pod network, RDMA, NCCL, cross-node throughput
    _c("network", "pod_network", "no node reports NetworkUnavailable", "nodes"),
    _c("network", "rdma", "the Network Operator / NIC driver pods are ready"),
    _c(
        "network",
        "nccl",
        "nccl-tests all_reduce bus bandwidth on the given nodes (lowest)",
        "GB/s",
        "higher_is_better",
    ),
    _c("network", "cross_node", "bus bandwidth of a multi-node NCCL job", "GB/s", "higher_is_better"),
    # Storage: PVC, object storage, model download, checkpoint
    _c("storage", "pvc", "every PVC in the workload namespaces is Bound", "PVCs"),
    _c("storage", "object_storage", "the object store answers HeadBucket", "ms", "lower_is_better"),
    _c(
        "storage",
        "model_download",
        "model download (or load) time of the inference bench",
        "s",
        "lower_is_better",
    ),
    _c(
        "storage",
        "checkpoint",
        "checkpoint save (or restore) time of the training bench",
        "s",
        "lower_is_better",
    ),
    # Training: start, throughput, convergence slice, recovery
    _c("training", "start", "the representative training Job starts and completes"),
    _c("training", "throughput", "training samples per second", "samples/s", "higher_is_better"),
    _c(
        "training",
        "convergence",
        "loss falls over the convergence slice (last loss)",
        "loss",
        "lower_is_better",
    ),
    _c("training", "recovery", "time to resume from a checkpoint", "s", "lower_is_better"),
    # Inference: model load, TTFT/TPOT, scaling, canary
    _c("inference", "model_load", "model load time of the inference bench", "s", "lower_is_better"),
    _c("inference", "ttft", "time to first token, p50", "ms", "lower_is_better"),
    _c("inference", "tpot", "time per output token, p50", "ms", "lower_is_better"),
    _c("inference", "scaling", "an inference Deployment scales out by one replica and back", "s"),
    _c("inference", "canary", "the canary inference Deployment is fully ready"),
    # Governance: Kueue, RBAC, policy, audit, cost labels
    _c("governance", "kueue", "every Kueue ClusterQueue is active (not held)", "queues"),
    _c("governance", "rbac", "the required ClusterRoles and bindings exist"),
    _c("governance", "policy", "the policy admission webhooks are registered"),
    _c("governance", "audit", "the API server writes an audit log"),
    _c("governance", "cost_labels", "every pod in the workload namespaces carries the cost labels", "pods"),
)

BY_KEY: dict[str, CheckSpec] = {spec.key: spec for spec in CATALOGUE}


def select(selectors: list[str]) -> list[CheckSpec]:
    """The checks named by layers (`gpu`) or keys (`network/nccl`), in catalogue order; every
    check when empty. An unknown name is an error naming the nearest valid one."""
    if not selectors:
        return list(CATALOGUE)
    wanted: set[str] = set()
    for selector in selectors:
        name = selector.strip().lower()
        if name in LAYERS:
            wanted |= {spec.key for spec in CATALOGUE if spec.layer == name}
        elif name in BY_KEY:
            wanted.add(name)
        else:
            choices = [*LAYERS, *BY_KEY]
            near = difflib.get_close_matches(name, choices, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ValueError(
                f"unknown acceptance layer or check {selector!r}{hint} "
                f"(layers: {', '.join(LAYERS)}; checks are <layer>/<name>, e.g. network/nccl)"
            )
    return [spec for spec in CATALOGUE if spec.key in wanted]
