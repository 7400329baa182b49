"""What a module is: the base of its arguments model, its retry defaults and its spec.

Every spec is declared next to its Args model in `pitstop/module_args/<family>.py` (pure
modules in `pitstop/core_modules.py`), listed in that file's `SPECS` and joined in
`pitstop/module_catalog.py`. This file imports no module: the arrows go one way, from the
family files to here.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from pitstop.errors import non_retryable_types


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
    non_retryable_error_types: tuple[str, ...] = non_retryable_types()


ArgsT = TypeVar("ArgsT", bound=ModuleArgs)
LocalMode = Literal["never", "always", "when_rerun_safe"]


class ModuleSpec(BaseModel, Generic[ArgsT]):
    """What the engine and the validator need to know about one module. Generic in its Args
    model, so `@module_activity(SPEC)` hands the activity arguments of the right type."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: str
    args_model: type[ArgsT]
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
    # When the engine may run it as a Temporal *local* activity, in the worker that runs the
    # host's workflow: no server round trip per task (~10x fewer), but a worker that dies may
    # run again every local task since the host's last workflow task completed (seconds), not
    # only the one in flight. So only where running twice is harmless: `always` for read-only
    # modules; `when_rerun_safe` when the task says so (see `pitstop.local_tasks`).
    local: LocalMode = "never"

    @property
    def activity_name(self) -> str:
        return f"module.{self.name}"
