"""Module name -> maintenance phase: the one table the timeline's rows are coloured by. Pure."""

from __future__ import annotations

from typing import Literal

Phase = Literal["cordon", "drain", "update", "reboot", "validate", "uncordon", "other"]
# In the order a node goes through them (the legend's order).
PHASES: tuple[Phase, ...] = ("cordon", "drain", "update", "reboot", "validate", "uncordon", "other")

# Exact names first; a family's other modules fall back to PREFIXES.
MODULE_PHASE: dict[str, Phase] = {
    "kube.cordon": "cordon",
    "kube.taint": "cordon",
    # Stopping admission and waiting for checkpoints empty the node as the drain does.
    "kube.stop_admission": "drain",
    "kube.wait_for_workloads": "drain",
    "kube.drain": "drain",
    "ssh.firmware_update": "update",
    "gpu.driver_management": "update",
    "gpu.operator_driver_node": "update",
    "gpu.operator_driver_hold": "update",
    # The reboot is over when the node is Ready again.
    "ssh.reboot": "reboot",
    "kube.wait_node_ready": "reboot",
    "ssh.facts": "validate",
    "gpu.dcgm_diag": "validate",
    "gpu.nccl_test": "validate",
    "gpu.cuda_check": "validate",
    "gpu.p2p_check": "validate",
    "acceptance.check": "validate",
    "baseline.compare": "validate",
    "kube.uncordon": "uncordon",
    "kube.untaint": "uncordon",
    # Giving the node's queues and jobs back belongs to its return to service.
    "kube.resume_admission": "uncordon",
    "kube.resume_workloads": "uncordon",
}
PREFIXES: tuple[tuple[str, Phase], ...] = (
    ("ssh.", "update"),
    ("firmware", "update"),
    ("gpu.", "update"),
    ("acceptance.", "validate"),
)


def phase_of(module: str | None) -> Phase:
    if module is None:
        return "other"
    if module in MODULE_PHASE:
        return MODULE_PHASE[module]
    return next((phase for prefix, phase in PREFIXES if module.startswith(prefix)), "other")
