"""`pitstop schedules apply | list | pause | unpause | trigger | delete`: runbooks on Temporal Schedules.

The schedules are ordinary Temporal Schedules: the UI's Schedules page shows them, their
runs and their pause notes.
"""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from temporalio.client import Client

from pitstop.settings import Settings

schedules_app = typer.Typer(
    name="schedules",
    help="Run runbooks on Temporal Schedules (declared in runbooks/schedules.yaml).",
    no_args_is_help=True,
)


def _out(stderr: bool = False) -> Console:
    # Made per call, so the terminal's current width counts; soft_wrap: one line per message
    # however narrow the terminal, so output greps and parses.
    return Console(stderr=stderr, soft_wrap=True)


T = TypeVar("T")

DEFAULT_FILE = Path("runbooks/schedules.yaml")
_STYLE = {"created": "green", "updated": "yellow", "paused": "yellow", "unchanged": "dim"}


def _fail(message: str, code: int = 1) -> None:
    _out(stderr=True).print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def _run(work: Callable[[Client, Settings], Coroutine[Any, Any, T]]) -> T:
    from temporalio.service import RPCError

    from pitstop.client import PitstopConnectionError, connect
    from pitstop.codec import PayloadCodecError
    from pitstop.schedules import ScheduleNotFound

    settings = Settings.from_env()

    async def main() -> T:
        client = await connect(settings, tracing=False)
        return await work(client, settings)

    try:
        return asyncio.run(main())
    except (PitstopConnectionError, ScheduleNotFound, PayloadCodecError) as exc:
        _fail(str(exc))
    except RPCError as exc:
        _fail(f"Temporal refused the request: {exc.message}")
    raise AssertionError("unreachable")


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


@schedules_app.command("apply")
def apply(
    file: Annotated[Path, typer.Argument(help="Schedules file.")] = DEFAULT_FILE,
) -> None:
    """Create missing schedules, update changed ones, leave identical ones alone."""
    from pitstop.runbook import RunbookError
    from pitstop.schedules import apply_schedules, load_schedules

    try:
        desired = load_schedules(file)
    except RunbookError as exc:
        _fail(str(exc))
        return

    async def work(client: Client, settings: Settings) -> None:
        for outcome in await apply_schedules(client, desired, settings.task_queue):
            style = _STYLE[outcome.action]
            detail = f" ({outcome.detail})" if outcome.detail else ""
            _out().print(f"[{style}]{outcome.action:>9}[/{style}] {outcome.id}{detail}", highlight=False)

    _run(work)


@schedules_app.command("list")
def list_() -> None:
    """Schedules pitstop manages, with their next and last runs."""
    from pitstop.schedules import list_rows

    async def work(client: Client, settings: Settings) -> None:
        rows = await list_rows(client)
        if not rows:
            _out().print("no pitstop schedules (create them with `pitstop schedules apply`)")
            return
        table = Table()
        for column in ("schedule", "runbook", "when", "state", "next run", "last run"):
            table.add_column(column)
        for row in rows:
            state = f"paused: {row.note}" if row.paused else "active"
            table.add_row(
                row.id,
                row.runbook,
                row.when,
                state,
                row.next_run.isoformat(timespec="seconds") if row.next_run and not row.paused else "-",
                (row.last_workflow_id or "") if row.last_run else "-",
            )
        _out().print(table)
        _out().print(f"UI: {settings.ui_url}/namespaces/{settings.temporal_namespace}/schedules")

    _run(work)


@schedules_app.command("pause")
def pause(
    schedule_id: Annotated[str, typer.Argument(help="Schedule id.")],
    note: Annotated[str | None, typer.Option("--note", "-n", help="Why (kept by later applies).")] = None,
) -> None:
    """Pause a schedule; the note stays on it (and through `apply`) until unpaused."""
    from pitstop.schedules import require

    text = note or f"paused by {_who()}"

    async def work(client: Client, settings: Settings) -> None:
        await require(client, schedule_id)
        await client.get_schedule_handle(schedule_id).pause(note=text)
        _out().print(f"paused {schedule_id}: {text}", highlight=False)

    _run(work)


@schedules_app.command("unpause")
def unpause(
    schedule_id: Annotated[str, typer.Argument(help="Schedule id.")],
    note: Annotated[str | None, typer.Option("--note", "-n", help="Why.")] = None,
) -> None:
    """Resume a paused schedule."""
    from pitstop.schedules import require

    text = note or f"unpaused by {_who()}"

    async def work(client: Client, settings: Settings) -> None:
        await require(client, schedule_id)
        await client.get_schedule_handle(schedule_id).unpause(note=text)
        _out().print(f"unpaused {schedule_id}", highlight=False)

    _run(work)


@schedules_app.command("trigger")
def trigger(schedule_id: Annotated[str, typer.Argument(help="Schedule id.")]) -> None:
    """Start a run now (the schedule's overlap policy applies)."""
    from pitstop.schedules import require

    async def work(client: Client, settings: Settings) -> None:
        before = await require(client, schedule_id)
        seen = {getattr(a.action, "workflow_id", None) for a in before.info.recent_actions}
        await client.get_schedule_handle(schedule_id).trigger()
        # The server starts the run asynchronously; wait briefly to name it.
        for _ in range(50):
            after = await require(client, schedule_id)
            started = [
                wid
                for a in after.info.recent_actions
                if (wid := getattr(a.action, "workflow_id", None)) is not None and wid not in seen
            ]
            if started:
                _out().print(f"started {started[-1]}", highlight=False)
                _out().print(
                    f"UI: {settings.ui_url}/namespaces/{settings.temporal_namespace}/workflows/{started[-1]}"
                )
                return
            await asyncio.sleep(0.1)
        _out().print(
            f"triggered {schedule_id} (the run has not shown up yet, or the overlap policy skipped it)"
        )

    _run(work)


@schedules_app.command("delete")
def delete(schedule_id: Annotated[str, typer.Argument(help="Schedule id.")]) -> None:
    """Delete a schedule (runs it already started keep running)."""
    from pitstop.schedules import require

    async def work(client: Client, settings: Settings) -> None:
        await require(client, schedule_id)
        await client.get_schedule_handle(schedule_id).delete()
        _out().print(f"deleted {schedule_id}", highlight=False)

    _run(work)
