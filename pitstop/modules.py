"""Module registry: module name -> Args model, defaults, check-mode support.

Every module a runbook can name is registered here with the pydantic model of its
arguments. The loader validates task arguments against these models, `pitstop schema`
exports them, and the engine reads the execution defaults (timeouts, retry policy) from
the spec. `pure` modules (debug, set_fact, assert, fail, pause) are evaluated inside the
workflow itself and never become activities: they have no side effects, and an activity
round trip would cost ~40 ms each for nothing.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ModuleArgs(BaseModel):
    """Base of every module's Args model: unknown arguments are an error, as in Ansible."""

    model_config = ConfigDict(extra="forbid")


class SecretRef(BaseModel):
    """A reference to a secret, resolved inside an activity; the value never enters history."""

    model_config = ConfigDict(extra="forbid")

    secret: str = Field(description="Name of the secret (environment, file or Kubernetes Secret).")
    key: str | None = Field(default=None, description="Key inside the secret, when it holds several.")


class RetryDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    maximum_attempts: int = 5
    initial_interval: timedelta = timedelta(seconds=1)
    backoff_coefficient: float = 2.0
    maximum_interval: timedelta = timedelta(seconds=60)
    non_retryable_error_types: tuple[str, ...] = (
        "InvalidArgs",
        "PreconditionFailed",
        "Unauthorized",
        "PolicyViolation",
    )


class ModuleSpec(BaseModel):
    """What the engine and the validator need to know about one module."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: str
    args_model: type[ModuleArgs]
    summary: str
    supports_check_mode: bool = False
    # Evaluated inside the workflow (no I/O); never scheduled as an activity.
    pure: bool = False
    # Takes capacity away from the cluster (drain, reboot...): the stage must state
    # `serial` or `rolling`, otherwise `pitstop validate` refuses the runbook.
    disruptive: bool = False
    start_to_close: timedelta = timedelta(minutes=5)
    heartbeat_timeout: timedelta | None = None
    retry: RetryDefaults = RetryDefaults()
    # Arguments accepted as a bare string (`debug: "hello"` == `debug: {msg: "hello"}`).
    free_form_arg: str | None = None

    @property
    def activity_name(self) -> str:
        return f"module.{self.name}"


_REGISTRY: dict[str, ModuleSpec] = {}


def register(spec: ModuleSpec) -> ModuleSpec:
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise ValueError(f"module {spec.name!r} registered twice")
    _REGISTRY[spec.name] = spec
    return spec


_loaded = False


def _ensure_loaded() -> None:
    # Importing the catalogue registers every shipped module exactly once. Site-specific
    # modules (like Ansible's library path) are Python modules named in PITSTOP_MODULES,
    # comma-separated; importing them registers their specs the same way.
    global _loaded
    if _loaded:
        return
    _loaded = True
    from pitstop import module_catalog  # noqa: F401

    for name in os.environ.get("PITSTOP_MODULES", "").split(","):
        if name.strip():
            importlib.import_module(name.strip())


def get_module(name: str) -> ModuleSpec | None:
    _ensure_loaded()
    return _REGISTRY.get(name)


def all_modules() -> Iterable[ModuleSpec]:
    _ensure_loaded()
    return sorted(_REGISTRY.values(), key=lambda s: s.name)


def module_names() -> list[str]:
    return [s.name for s in all_modules()]


def args_schema(spec: ModuleSpec) -> dict[str, Any]:
    return spec.args_model.model_json_schema()
