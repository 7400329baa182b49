"""Args of the `records.*` modules: what a run leaves behind for people (drill reports)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator

from pitstop.module_args.storage import DEFAULT_PREFIX, STORAGE_RETRY, S3Args
from pitstop.modules import ModuleSpec, register


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


DRILL_REPORT = register(
    ModuleSpec(
        name="records.drill_report",
        args_model=DrillReportArgs,
        summary="Restore-drill report: RTO, RPO, sizes, checksums, pass/fail with reasons (JSON + Markdown).",
        supports_check_mode=True,
        start_to_close=timedelta(minutes=5),
        retry=STORAGE_RETRY,
    )
)
