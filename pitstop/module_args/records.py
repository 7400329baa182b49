"""Args of the `records.*` modules: what a run leaves behind for people (drill reports, change
records, the run's own report)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator

from pitstop.contracts import RunVars
from pitstop.module_args.storage import DEFAULT_PREFIX, STORAGE_RETRY, S3Args, http_link_base
from pitstop.module_spec import ModuleArgs, ModuleSpec


def _none_is_empty(value: object) -> object:
    return {} if value is None else value


class DrillReportArgs(S3Args):
    """The registered results of the drill's steps; a step never reached is `{}`.

    Write them as `"{{ download | default({}) }}"`: the report says which step failed (its
    `msg`) or was not reached, and measures RTO and RPO from the steps' own timestamps.
    """

    cluster: str = Field(description="Cluster whose snapshot was drilled.")
    prefix: str = Field(default=DEFAULT_PREFIX, description="Where reports go when no snapshot was found.")
    snapshot: dict[str, Any] = Field(default_factory=dict, description="Result of `storage.latest`.")
    download: dict[str, Any] = Field(default_factory=dict, description="Result of `storage.download`.")
    status: dict[str, Any] = Field(default_factory=dict, description="Result of `etcd.snapshot_status`.")
    restore: dict[str, Any] = Field(default_factory=dict, description="Result of `etcd.restore`.")
    member: dict[str, Any] = Field(
        default_factory=dict, description="Result of `etcd.scratch_member: start`."
    )
    verify: dict[str, Any] = Field(default_factory=dict, description="Result of `etcd.verify`.")
    rto_target_s: float | None = Field(default=None, gt=0, description="Fail the drill if RTO exceeds this.")
    rpo_target_s: float | None = Field(default=None, gt=0, description="Fail the drill if RPO exceeds this.")
    channel: str | None = Field(
        default=None,
        description="Notification channel for the summary (Slack arrives with the notify modules).",
    )

    @field_validator("snapshot", "download", "status", "restore", "member", "verify", mode="before")
    @classmethod
    def _empty(cls, value: object) -> object:
        return _none_is_empty(value)

    @field_validator("channel", mode="before")
    @classmethod
    def _blank(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value


DRILL_REPORT: ModuleSpec[DrillReportArgs] = ModuleSpec(
    name="records.drill_report",
    args_model=DrillReportArgs,
    summary="Restore-drill report: RTO, RPO, sizes, checksums, pass/fail with reasons (JSON + Markdown).",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=5),
    retry=STORAGE_RETRY,
)


class CanaryArgs(ModuleArgs):
    hosts: list[str] = Field(default_factory=list, description="Hosts of the canary stage.")
    scope: str | None = Field(default=None, description="What the canary covers (pool, share, workloads).")


class ObservationArgs(ModuleArgs):
    window: str | None = Field(default=None, description="How long the widened pool was observed, e.g. 30m.")
    result: Any = Field(default=None, description="The observation's registered result (None: not reached).")
    stage: str | None = Field(
        default=None,
        description="Or the stage whose `observe` phase was the window: "
        "its outcome in `run.stages` is the result.",
    )


class ChangeRecordArgs(S3Args):
    """The change record of a platform upgrade (docs/upgrade-process.md "Change record"), from
    the run's registered results.

    Pass each result as `"{{ x | default({}) }}"`: a step never reached is shown as "not
    reached", never invented. `run` is the engine's `run` variable (stages, gates, rollback reason).
    """

    cluster: str = Field(min_length=1, description="Cluster the change applies to.")
    prefix: str = Field(default="change-records", min_length=1, description="Key prefix of the records.")
    goal: str | None = Field(default=None, description="Why the upgrade is done.")
    risk: str | None = Field(default=None, description="What could go wrong and how bad it would be.")
    inventory: dict[str, Any] = Field(
        default_factory=dict, description="Result of `inventory.versions` before the change (the plan)."
    )
    inventory_after: dict[str, Any] = Field(
        default_factory=dict,
        description="Result of `inventory.versions` after the change: what runs, and each row's validation.",
    )
    compat: dict[str, Any] = Field(default_factory=dict, description="Result of `compat.check`.")
    deprecations: dict[str, Any] = Field(default_factory=dict, description="Result of `kube.deprecations`.")
    crd_webhooks: dict[str, Any] = Field(
        default_factory=dict, description="Result of `kube.crd_webhook_check`."
    )
    canary: CanaryArgs = Field(default_factory=CanaryArgs)
    acceptance: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Stage name -> result of `acceptance.check` after it."
    )
    observation: ObservationArgs = Field(default_factory=ObservationArgs)
    rollback_triggers: list[str] = Field(default_factory=list, description="The declared rollback triggers.")
    run: RunVars = Field(default_factory=RunVars, description="The engine's `run` variable.")
    follow_ups: list[str] = Field(default_factory=list, description="Follow-ups written by people.")
    failure: str | None = Field(
        default=None,
        description="What failed, as a rescue saw it: "
        "`{{ ansible_failed_task.name }}: {{ ansible_failed_result.msg }}`.",
    )
    create_bucket: bool = Field(
        default=False, description="Create the bucket when missing (the embedded stack; not for production)."
    )

    @field_validator(
        "inventory", "inventory_after", "compat", "deprecations", "crd_webhooks", "run", mode="before"
    )
    @classmethod
    def _empty(cls, value: object) -> object:
        return _none_is_empty(value)

    @field_validator("acceptance", mode="before")
    @classmethod
    def _stages(cls, value: object) -> object:
        if isinstance(value, dict):
            return {k: _none_is_empty(v) for k, v in value.items()}
        return _none_is_empty(value)

    @field_validator("failure", mode="before")
    @classmethod
    def _no_failure(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("canary", "observation", mode="before")
    @classmethod
    def _empty_section(cls, value: object) -> object:
        return _none_is_empty(value)


CHANGE_RECORD: ModuleSpec[ChangeRecordArgs] = ModuleSpec(
    name="records.change_record",
    args_model=ChangeRecordArgs,
    summary="Change record of an upgrade: goal and risk, version diff, compatibility sources, "
    "canary, validation, observation, rollback triggers, failures and follow-ups (JSON + Markdown).",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=5),
    retry=STORAGE_RETRY,
)


class RunReportArgs(S3Args):
    """Where the run's report goes. The run is always the one the task belongs to (its own id,
    never an argument: a runbook cannot read other runs through this module)."""

    prefix: str = Field(default="run-reports", min_length=1, description="Key prefix of the reports.")
    cluster: str | None = Field(
        default=None,
        description="Folder under the prefix; default: the inventory's cluster name (else `local`).",
    )
    link_base: str | None = Field(
        default=None,
        description="https URL where the bucket's keys are served (a bucket website, a docs host): the "
        "link in the run's artifacts is this + `/` + the HTML's key; default: its s3:// URI.",
    )
    create_bucket: bool = Field(
        default=False, description="Create the bucket when missing (the embedded stack; not for production)."
    )

    @field_validator("cluster", mode="before")
    @classmethod
    def _blank(cls, value: object) -> object:
        # `"{{ report_link_base | default('') }}"` renders to "" when the site leaves it unset.
        return None if isinstance(value, str) and not value.strip() else value

    _link_base = field_validator("link_base", mode="before")(http_link_base)


RUN_REPORT: ModuleSpec[RunReportArgs] = ModuleSpec(
    name="records.run_report",
    args_model=RunReportArgs,
    summary="The run's own report so far (`pitstop report`: timeline, failure-domain availability, "
    "validation, gates; HTML, Markdown, PNGs, data) in S3, linked from the run's artifacts; "
    "as the run's last task it covers everything but itself.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=10),
    # Reading a large run's ended hosts (32 at a time) beats as it goes.
    heartbeat_timeout=timedelta(minutes=2),
    retry=STORAGE_RETRY,
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [DRILL_REPORT, CHANGE_RECORD, RUN_REPORT]
