"""Args of `inventory.versions`: the platform's version inventory
(docs/upgrade-process.md "Version inventory"), read-only.

Component keys (targets, validation) are the design's: os, kernel, gpu-firmware, kubernetes,
kube-controller-manager, kube-scheduler, kubelet, kubectl, container-runtime, cni, csi,
gpu-driver, cuda, container-toolkit, device-plugin, gpu-operator, dcgm, nic-driver,
network-operator, kueue, jobset, lws, trainer, kuberay, kserve, vllm, sglang, triton,
model-formats, python-frameworks. How each is detected and rolled back is data:
`<compat dir>/components.yaml`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator

from pitstop.kube.selectors import check_selector
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults
from pitstop.versions.components import unknown_keys_message

DEFAULT_GPU_SELECTOR = "nvidia.com/gpu.present=true"


def _as_text(value: Any) -> Any:
    # YAML reads `kueue: 0.10` as a number; a version is text.
    if isinstance(value, dict):
        return {k: str(v) if isinstance(v, int | float) else v for k, v in value.items()}
    return value


class VersionsArgs(ModuleArgs):
    """One row per component key with current version (and where it was read), target,
    vendor support source, validation state and rollback method; plus `current`, `target`,
    `diff` and `skew` maps for compat.check. Runs against the cluster API (and the SSH facts it
    is given); changes nothing, so it runs the same in check mode."""

    targets: dict[str, str] = Field(
        default_factory=dict,
        description="Component key -> target version (a component not named keeps its current version).",
    )
    ssh_facts: list[Any] | dict[str, Any] | None = Field(
        default=None,
        description=(
            "Registered ssh.facts results: the `results` of a looped task (e.g. '{{ facts.results }}'), "
            "or a mapping node -> facts. Adds driver, firmware, NIC driver, kubelet/containerd/kubeadm "
            "and package versions as the nodes report them."
        ),
    )
    validation: dict[str, str] = Field(
        default_factory=dict,
        description="Component key -> validation state (e.g. 'passed in staging'); default 'not validated'.",
    )
    acceptance: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "A registered acceptance.check result: each component's validation state becomes the "
            "outcome of the checks that exercise it (`validated_by` in runbooks/compat/components.yaml); "
            "`validation` entries win over it."
        ),
    )
    acceptance_label: str = Field(
        default="acceptance", description="How the validation state names that acceptance run."
    )
    nodes_selector: str = Field(
        default=DEFAULT_GPU_SELECTOR,
        description="Label selector of the GPU nodes (for the GPU driver, CUDA, firmware and NIC driver).",
    )

    @field_validator("targets", "validation", mode="before")
    @classmethod
    def _text_values(cls, value: Any) -> Any:
        return _as_text(value)

    @field_validator("targets")
    @classmethod
    def _known_targets(cls, value: dict[str, str]) -> dict[str, str]:
        message = unknown_keys_message(list(value), "targets")
        if message:
            raise ValueError(message)
        return value

    @field_validator("validation")
    @classmethod
    def _known_validation(cls, value: dict[str, str]) -> dict[str, str]:
        message = unknown_keys_message(list(value), "validation")
        if message:
            raise ValueError(message)
        return value

    @field_validator("nodes_selector")
    @classmethod
    def _selector_parses(cls, value: str) -> str:
        return check_selector(value) or ""


VERSIONS: ModuleSpec[VersionsArgs] = ModuleSpec(
    name="inventory.versions",
    args_model=VersionsArgs,
    summary="The platform's version inventory: current, target, support source, validation, rollback.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=3),
    retry=RetryDefaults(maximum_attempts=3),
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [VERSIONS]
