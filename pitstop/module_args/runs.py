"""Args of the `runs.*` modules: `runs.require`, another pitstop run must have done something
first (the rehearsal of docs/upgrade-process.md "Upgrade order": the upgrade was verified on a lab
cluster before it touches this one); and a promotion's child runs (`runs.run`, `runs.release`,
`runs.rollback`: runbooks/promotion.yaml), one per cluster of a ring."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator

from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults
from pitstop.runbook.durations import parse_duration


class RequireRunArgs(ModuleArgs):
    """The run named by `run_id` (a workflow id) must be a finished run of `runbook`, for real
    (not a plan), on another cluster than `not_cluster`, no older than `max_age`, with each of
    `stages_ok` ended `ok` and each of `same_vars` at the value given. Read from Temporal, where
    the run's own report and plan are: no one's word."""

    run_id: str = Field(min_length=1, description="Workflow id of the earlier run (e.g. the lab's).")
    runbook: str = Field(min_length=1, description="The runbook that run must have run.")
    stages_ok: list[str] = Field(
        default_factory=list, description="Stages that must have ended ok in it (default: all of them)."
    )
    not_cluster: str | None = Field(
        default=None, description="It must have run on another cluster than this one (the one being changed)."
    )
    max_age: str | None = Field(default=None, description="It must have ended within this long (e.g. '30d').")
    same_vars: dict[str, Any] = Field(
        default_factory=dict,
        description="Variables that run must have used with these very values (its runbook's vars with "
        "its -e on top, read from its plan in Temporal): e.g. the version targets, so that a lab run "
        "of another upgrade does not count.",
    )

    @field_validator("max_age")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("{{"):
            parse_duration(value)
        return value

    @field_validator("not_cluster", mode="before")
    @classmethod
    def _blank(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value


REQUIRE_RUN: ModuleSpec[RequireRunArgs] = ModuleSpec(
    name="runs.require",
    args_model=RequireRunArgs,
    summary="Another run must have done this first (e.g. the lab rehearsal): checked in Temporal.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=1),
)


def _poll(value: str) -> str:
    if not value.startswith("{{"):
        parse_duration(value)
    return value


class ChildRunArgs(ModuleArgs):
    """Run a runbook of the worker's runbook directory on one cluster (this task's host is the
    cluster: a promotion's inventory lists clusters as hosts) as a child of this run, and wait
    until it is held (its stages succeeded: it waits for `runs.release` or `runs.rollback`) or
    has ended. The child's id is `<this run's id>.<host>` (`.<suffix>` added when given): a
    retried or repeated task finds the same run again, never a second one."""

    runbook: str = Field(min_length=1, description="Runbook path in the worker's runbook directory.")
    inventory: str = Field(min_length=1, description="The cluster's inventory, in the runbook directory.")
    vars: dict[str, Any] = Field(default_factory=dict, description="Extra vars of the child run (its -e).")
    hold: bool = Field(
        default=True,
        description="Keep the child open once it succeeds, so that a later ring's failure can roll it back.",
    )
    poll: str = Field(default="5s", description="How often the child's state is read.")
    suffix: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="Another child on the same host (e.g. `inventory-before`): its id is "
        "`<this run's id>.<host>.<suffix>`. Without it, the host's change: the one runs.release "
        "and runs.rollback act on.",
    )

    _duration = field_validator("poll")(_poll)

    @field_validator("suffix", mode="before")
    @classmethod
    def _blank(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value


class ChildActionArgs(ModuleArgs):
    """Act on this host's child run (`<this run's id>.<host>`, started by `runs.run`): a runbook
    names no other run, so it cannot release or roll back anyone else's."""

    reason: str = Field(default="", description="Why (runs.rollback): shown in the child's report.")
    poll: str = Field(default="5s", description="How often the child's state is read while it ends.")

    _duration = field_validator("poll")(_poll)


# A ring may take hours (its own gates and observe windows); the wait heartbeats, so a worker
# that dies is noticed within a minute and the retry finds the same child again.
CHILD_RETRY = RetryDefaults(maximum_attempts=0, maximum_interval=timedelta(seconds=30))

CHILD_RUN: ModuleSpec[ChildRunArgs] = ModuleSpec(
    name="runs.run",
    args_model=ChildRunArgs,
    summary="Run a runbook on one cluster as a child of this run (a promotion's ring) and wait "
    "until it is held or ended.",
    supports_check_mode=True,
    start_to_close=timedelta(days=14),
    heartbeat_timeout=timedelta(seconds=60),
    retry=CHILD_RETRY,
)
CHILD_RELEASE: ModuleSpec[ChildActionArgs] = ModuleSpec(
    name="runs.release",
    args_model=ChildActionArgs,
    summary="Let this host's held child run end (the promotion went through).",
    supports_check_mode=True,
    start_to_close=timedelta(hours=1),
    heartbeat_timeout=timedelta(seconds=60),
    retry=CHILD_RETRY,
)
CHILD_ROLLBACK: ModuleSpec[ChildActionArgs] = ModuleSpec(
    name="runs.rollback",
    args_model=ChildActionArgs,
    summary="Roll back this host's held child run with its runbook's own rollback, and wait for it.",
    supports_check_mode=True,
    start_to_close=timedelta(days=1),
    heartbeat_timeout=timedelta(seconds=60),
    retry=CHILD_RETRY,
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [REQUIRE_RUN, CHILD_RUN, CHILD_RELEASE, CHILD_ROLLBACK]
