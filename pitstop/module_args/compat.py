"""Args of `compat.check`: is an upgrade from the current versions to the target supported?"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator

from pitstop.compat.components import COMPONENT_KEYS
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults
from pitstop.runbook.errors import suggest


def unknown_components(keys: list[str]) -> str | None:
    """The error message for component keys that are not in the inventory, or None."""
    unknown = [key for key in keys if key not in COMPONENT_KEYS]
    if not unknown:
        return None
    parts = []
    for key in unknown:
        near = suggest(key, COMPONENT_KEYS)
        parts.append(f"'{key}'" + (f" (did you mean '{near}'?)" if near else ""))
    return f"unknown component {', '.join(parts)}; valid keys: {', '.join(COMPONENT_KEYS)}"


def _versions(value: object) -> object:
    # YAML reads `kueue: 0.10` as a number; a version is always text.
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(key): str(text) for key, text in value.items()}
    return value


class CompatCheckArgs(ModuleArgs):
    """Versions now and after the upgrade, by component key (`kubernetes`, `gpu-operator`...).

    Either give `current`/`target`/`kubelets` (and optionally `skew`), or hand in the registered
    result of `inventory.versions` as `inventory`: its `current`, `target` and `skew` are used,
    and `target` entries given here override the inventory's.
    """

    current: dict[str, str] = Field(default_factory=dict, description="Component key -> version now.")
    target: dict[str, str] = Field(
        default_factory=dict, description="Component key -> version after the upgrade (others stay)."
    )
    kubelets: dict[str, str] = Field(default_factory=dict, description="Node -> kubelet version now.")
    skew: dict[str, Any] | None = Field(
        default=None,
        description="The `skew` block of inventory.versions (apiserver, controller_manager, scheduler, "
        "kubelets, kubectl).",
    )
    inventory: dict[str, Any] | None = Field(
        default=None, description="Registered result of inventory.versions (current, target, skew)."
    )
    matrices: list[str] = Field(
        default_factory=list, description="Vendor matrices to check, by component (default: all)."
    )
    vendor_matrices: bool = Field(
        default=True,
        description="false: judge only the Version Skew Policy — a step's check on the cluster as it "
        "is now, when the vendor matrices were judged for the whole order in preflight (an accepted "
        "in-between window is then not refused again at every step).",
    )
    phases: list[list[str]] = Field(
        default_factory=list,
        description="Groups of component keys in the order the runbook upgrades them; vendor matrices "
        "are then also judged after each group (default: the target state only).",
    )
    in_between: Literal["fail", "warn"] = Field(
        default="fail",
        description="An unsupported combination after a phase (not at the target): refuse the plan, or "
        "report it as a warning — a window of known risk for the change record.",
    )

    @field_validator("current", "target", "kubelets", mode="before")
    @classmethod
    def _text(cls, value: object) -> object:
        return _versions(value)

    @field_validator("current", "target")
    @classmethod
    def _known_components(cls, value: dict[str, str]) -> dict[str, str]:
        problem = unknown_components(list(value))
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("phases")
    @classmethod
    def _known_phase_components(cls, value: list[list[str]]) -> list[list[str]]:
        problem = unknown_components([key for group in value for key in group])
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("inventory", "skew", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value in ({}, "", None) else value


COMPAT_CHECK: ModuleSpec[CompatCheckArgs] = ModuleSpec(
    name="compat.check",
    args_model=CompatCheckArgs,
    summary=(
        "Refuse unsupported upgrades: Kubernetes version skew rules and vendor support matrices "
        "(installable is not supported), each violation citing its rule and source."
    ),
    supports_check_mode=True,
    start_to_close=timedelta(minutes=1),
    retry=RetryDefaults(maximum_attempts=3),
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [COMPAT_CHECK]
