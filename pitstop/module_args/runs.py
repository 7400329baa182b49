"""Args of `runs.require`: another pitstop run must have done something first (the
rehearsal of docs/upgrade-process.md "Upgrade order": the upgrade was verified on a lab cluster before it
touches this one)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator

from pitstop.module_spec import ModuleArgs, ModuleSpec
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

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [REQUIRE_RUN]
