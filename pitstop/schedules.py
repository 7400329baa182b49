"""Runbooks on Temporal Schedules, declared in a YAML file (runbooks/schedules.yaml).

`apply` is an idempotent upsert: a schedule missing on the server is created, one whose
definition changed is updated, an identical one is left alone ("unchanged"). "Identical" is
decided by a hash of the desired definition (everything but the pause state), kept in the
memo of the schedule's workflow action — the part of a schedule an update can rewrite, so
the hash always describes what the server holds, and each scheduled run carries it too.

Pausing is operational state, not definition: an operator's `pitstop schedules pause --note`
survives later `apply`s (the note included). `paused: true` in the file pauses a schedule
that is running; `apply` never unpauses one (that takes `pitstop schedules unpause`).

Each scheduled action starts `RunbookWorkflow` with a `RunRequest` naming the runbook and
inventory relative to the worker's PITSTOP_RUNBOOK_DIR (default `runbooks/`), on the task
queue from the settings (PITSTOP_TASK_QUEUE) unless the file names one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from pitstop.contracts import RunRequest
from pitstop.runbook import RunbookError, load_inventory, load_runbook
from pitstop.runbook._checks import validate_model
from pitstop.runbook._yaml import load_yaml
from pitstop.runbook.durations import Duration

WORKFLOW = "RunbookWorkflow"
MEMO_KEY = "pitstop_schedule"
OverlapName = Literal["skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all"]
_OVERLAP: dict[str, ScheduleOverlapPolicy] = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer_one": ScheduleOverlapPolicy.BUFFER_ONE,
    "buffer_all": ScheduleOverlapPolicy.BUFFER_ALL,
    "cancel_other": ScheduleOverlapPolicy.CANCEL_OTHER,
    "terminate_other": ScheduleOverlapPolicy.TERMINATE_OTHER,
    "allow_all": ScheduleOverlapPolicy.ALLOW_ALL,
}


class ScheduleEntry(BaseModel):
    """One schedule: when, which runbook with which inventory and vars, and its policies."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$", description="Schedule id in Temporal.")
    description: str = ""
    runbook: str = Field(min_length=1, description="Relative to the worker's PITSTOP_RUNBOOK_DIR.")
    inventory: str | None = None
    cron: list[str] = Field(default_factory=list, description="Cron expressions (UTC unless time_zone).")
    every: Duration | None = Field(default=None, gt=0, description="Or an interval, e.g. 1h.")
    offset: Duration | None = Field(default=None, ge=0, description="Phase of the interval.")
    jitter: Duration | None = Field(default=None, ge=0, description="Random delay added to each run.")
    time_zone: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)
    limit: str | None = None
    tags: list[str] = Field(default_factory=list)
    check_mode: bool = False
    overlap: OverlapName = Field(default="skip", description="When the previous run is still going.")
    catchup_window: Duration = Field(
        default=3600.0, gt=0, description="Runs missed while Temporal was down are started if this recent."
    )
    pause_on_failure: bool = False
    paused: bool = Field(
        default=False, description="Create it paused (or pause it); never unpaused by apply."
    )
    note: str | None = Field(default=None, description="Why it is paused.")

    @field_validator("cron", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _when(self) -> Self:
        if not self.cron and self.every is None:
            raise ValueError(f"schedule {self.id!r} needs `cron` or `every`")
        if self.offset is not None and self.every is None:
            raise ValueError(f"schedule {self.id!r}: `offset` goes with `every`")
        return self


class SchedulesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_queue: str | None = Field(default=None, description="Default: the settings' PITSTOP_TASK_QUEUE.")
    schedules: list[ScheduleEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> Self:
        seen: set[str] = set()
        for entry in self.schedules:
            if entry.id in seen:
                raise ValueError(f"schedule id {entry.id!r} appears twice")
            seen.add(entry.id)
        return self


def load_schedules(path: Path, *, check_runbooks: bool = True) -> SchedulesFile:
    """Parse and validate the file; with `check_runbooks`, each runbook (with its inventory)
    is validated too, relative to the file's directory (the repository's runbooks/)."""
    doc = load_yaml(path)
    loaded = validate_model(SchedulesFile, doc.data or {}, doc.root(), "schedules file")
    if check_runbooks:
        base = path.parent
        for index, entry in enumerate(loaded.schedules):
            node = doc.root().child("schedules", index)
            where = "inventory"
            try:
                inventory = load_inventory(base / entry.inventory) if entry.inventory else None
                where = "runbook"
                load_runbook(base / entry.runbook, inventory)
            except RunbookError as exc:
                raise node.child(where).error(
                    f"schedule {entry.id!r}: {exc} (runbook and inventory paths are relative to "
                    f"{base}/, as to the worker's PITSTOP_RUNBOOK_DIR)"
                ) from None
    return loaded


def spec_hash(entry: ScheduleEntry, task_queue: str) -> str:
    body = entry.model_dump(mode="json", exclude={"paused", "note"})
    body["task_queue"] = task_queue
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def run_request(entry: ScheduleEntry) -> RunRequest:
    return RunRequest(
        runbook=entry.runbook,
        inventory=entry.inventory,
        vars=entry.vars,
        limit=entry.limit,
        tags=entry.tags,
        check_mode=entry.check_mode,
        requested_by=f"schedule:{entry.id}",
    )


def _seconds(value: float | None) -> timedelta | None:
    return timedelta(seconds=value) if value is not None else None


def desired_schedule(entry: ScheduleEntry, task_queue: str, state: ScheduleState | None = None) -> Schedule:
    """The Temporal Schedule for `entry`; `state` (pause, note) defaults to the entry's."""
    return Schedule(
        action=ScheduleActionStartWorkflow(
            WORKFLOW,
            run_request(entry),
            id=entry.id,
            task_queue=task_queue,
            memo={
                MEMO_KEY: {
                    "spec_hash": spec_hash(entry, task_queue),
                    "runbook": entry.runbook,
                    "id": entry.id,
                }
            },
        ),
        spec=ScheduleSpec(
            cron_expressions=list(entry.cron),
            intervals=(
                [ScheduleIntervalSpec(every=timedelta(seconds=entry.every), offset=_seconds(entry.offset))]
                if entry.every is not None
                else []
            ),
            jitter=_seconds(entry.jitter),
            time_zone_name=entry.time_zone,
        ),
        policy=SchedulePolicy(
            overlap=_OVERLAP[entry.overlap],
            catchup_window=timedelta(seconds=entry.catchup_window),
            pause_on_failure=entry.pause_on_failure,
        ),
        state=state or ScheduleState(paused=entry.paused, note=entry.note),
    )


async def action_memo(client: Client, description: ScheduleDescription) -> dict[str, Any]:
    """pitstop's memo on a schedule's action ({} for schedules pitstop did not make).

    A described schedule carries its memo as stored, so it goes through the whole data
    converter (the payload codec decrypts it when payloads are encrypted)."""
    action = description.schedule.action
    if not isinstance(action, ScheduleActionStartWorkflow) or not action.memo:
        return {}
    raw = action.memo.get(MEMO_KEY)
    if raw is None:
        return {}
    if isinstance(raw, Payload):
        [value] = await client.data_converter.decode([raw], [dict])
        return dict(value) if isinstance(value, dict) else {}
    return dict(raw) if isinstance(raw, dict) else {}


ApplyAction = Literal["created", "updated", "unchanged", "paused"]


@dataclass(frozen=True)
class ApplyOutcome:
    id: str
    action: ApplyAction
    detail: str = ""


async def apply_schedules(
    client: Client, schedules: SchedulesFile, default_task_queue: str
) -> list[ApplyOutcome]:
    task_queue = schedules.task_queue or default_task_queue
    outcomes = []
    for entry in schedules.schedules:
        outcomes.append(await apply_one(client, entry, task_queue))
    return outcomes


async def _describe(client: Client, schedule_id: str) -> ScheduleDescription | None:
    from temporalio.service import RPCError, RPCStatusCode

    try:
        return await client.get_schedule_handle(schedule_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def apply_one(client: Client, entry: ScheduleEntry, task_queue: str) -> ApplyOutcome:
    current = await _describe(client, entry.id)
    if current is None:
        try:
            await client.create_schedule(entry.id, desired_schedule(entry, task_queue))
        except ScheduleAlreadyRunningError:  # created concurrently: compare on the next apply
            return ApplyOutcome(entry.id, "unchanged", "created concurrently by someone else")
        return ApplyOutcome(entry.id, "created", "paused: " + (entry.note or "") if entry.paused else "")
    state = current.schedule.state
    wants_pause = entry.paused and not state.paused
    if (await action_memo(client, current)).get("spec_hash") == spec_hash(entry, task_queue):
        if wants_pause:
            await client.get_schedule_handle(entry.id).pause(note=entry.note or "paused by schedules file")
            return ApplyOutcome(entry.id, "paused", entry.note or "")
        detail = f"paused on the server: {state.note}" if state.paused else ""
        return ApplyOutcome(entry.id, "unchanged", detail)
    # Keep the live pause state and note: they belong to whoever paused it.
    keep = ScheduleState(
        paused=state.paused or entry.paused,
        note=state.note if state.paused else (entry.note if entry.paused else state.note),
    )
    desired = desired_schedule(entry, task_queue, keep)

    def updater(_: ScheduleUpdateInput) -> ScheduleUpdate:
        return ScheduleUpdate(schedule=desired)

    await client.get_schedule_handle(entry.id).update(updater)
    return ApplyOutcome(entry.id, "updated", f"paused: {keep.note}" if keep.paused else "")


@dataclass(frozen=True)
class ScheduleRow:
    id: str
    runbook: str
    when: str
    paused: bool
    note: str
    next_run: datetime | None
    last_run: datetime | None
    last_workflow_id: str | None
    spec_hash: str


def describe_when(schedule: Schedule) -> str:
    spec = schedule.spec
    parts = [f"cron {c}" for c in spec.cron_expressions]
    parts += [f"every {i.every}" + (f" +{i.offset}" if i.offset else "") for i in spec.intervals]
    if spec.calendars and not parts:
        parts.append(f"{len(spec.calendars)} calendar spec(s)")
    return ", ".join(parts) or "never"


async def row_of(client: Client, schedule_id: str, description: ScheduleDescription) -> ScheduleRow | None:
    memo = await action_memo(client, description)
    if not memo:
        return None
    info = description.info
    recent = info.recent_actions[-1] if info.recent_actions else None
    workflow_id = getattr(recent.action, "workflow_id", None) if recent is not None else None
    return ScheduleRow(
        id=schedule_id,
        runbook=str(memo.get("runbook", "?")),
        when=describe_when(description.schedule),
        paused=description.schedule.state.paused,
        note=description.schedule.state.note or "",
        next_run=info.next_action_times[0] if info.next_action_times else None,
        last_run=recent.started_at if recent is not None else None,
        last_workflow_id=workflow_id,
        spec_hash=str(memo.get("spec_hash", "")),
    )


async def list_rows(client: Client) -> list[ScheduleRow]:
    """Every schedule pitstop made (others in the namespace are left out)."""
    rows = []
    async for listed in await client.list_schedules():
        description = await _describe(client, listed.id)
        if description is not None and (row := await row_of(client, listed.id, description)) is not None:
            rows.append(row)
    return sorted(rows, key=lambda r: r.id)


class ScheduleNotFound(LookupError):
    pass


async def require(client: Client, schedule_id: str) -> ScheduleDescription:
    description = await _describe(client, schedule_id)
    if description is None:
        raise ScheduleNotFound(
            f"no schedule {schedule_id!r} in this namespace (see `pitstop schedules list`)"
        )
    return description


__all__ = [
    "ApplyOutcome",
    "ScheduleEntry",
    "ScheduleNotFound",
    "ScheduleRow",
    "SchedulesFile",
    "apply_schedules",
    "desired_schedule",
    "list_rows",
    "load_schedules",
    "require",
    "run_request",
    "spec_hash",
]
