"""`pitstop validate` and `pitstop schema`: the runbook language on the command line."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table


class SchemaKind(StrEnum):
    runbook = "runbook"
    inventory = "inventory"


def _fail(message: str, code: int) -> None:
    # One line on stderr, never a traceback: editors and CI parse `path:line:col: message`.
    typer.echo(" ".join(message.split()), err=True)
    raise typer.Exit(code)


def validate(
    runbook: Annotated[Path, typer.Argument(help="Runbook, inventory or task file to validate.")],
    inventory: Annotated[
        Path | None, typer.Option("--inventory", "-i", help="Inventory to resolve host patterns against.")
    ] = None,
) -> None:
    """Validate a runbook (and its inventory) before any side effect."""
    from pitstop.runbook import Inventory, Runbook, RunbookError, load_any, load_inventory

    try:
        inv = load_inventory(inventory) if inventory is not None else None
        loaded = load_any(runbook, inv)
    except RunbookError as exc:
        _fail(str(exc), 1)
        return
    except Exception as exc:  # pragma: no cover - a bug in pitstop, still one line
        _fail(f"{runbook}: internal error while validating: {type(exc).__name__}: {exc}", 2)
        return
    console = Console()
    if isinstance(loaded, Inventory):
        console.print(
            f"[green]ok[/green] inventory {runbook}: {len(loaded.hosts)} hosts, "
            f"{len(loaded.groups)} groups ({len(loaded.dynamic_groups())} from nodes)"
        )
        return
    if isinstance(loaded, list):
        console.print(f"[green]ok[/green] task file {runbook}: {sum(len(t.walk()) for t in loaded)} tasks")
        return
    assert isinstance(loaded, Runbook)
    table = Table(title=f"{loaded.name}  ({len(loaded.all_tasks())} tasks)")
    table.add_column("stage")
    table.add_column("hosts")
    table.add_column("rollout")
    table.add_column("tasks", justify="right")
    for stage in loaded.stages:
        hosts = stage.hosts
        if inv is not None:
            hosts = f"{stage.hosts} ({len(inv.stage_hosts(stage.hosts))})"
        rollout = "all at once"
        if stage.serial is not None:
            rollout = "serial " + ", ".join(str(s) for s in stage.serial.root)
        elif stage.rolling is not None:
            rollout = f"rolling, {stage.rolling.max_in_flight} in flight"
        if stage.gate is not None:
            rollout += ", gated"
        table.add_row(stage.name, hosts, rollout, str(sum(len(t.walk()) for t in stage.tasks)))
    console.print(table)
    from pitstop.runbook.eviction import bypass_notes

    for stage_name, note in bypass_notes(loaded).items():
        console.print(f"[bold yellow]warning[/bold yellow] stage '{stage_name}': {note}", highlight=False)
    console.print(f"[green]ok[/green] {runbook}")


def schema(
    kind: Annotated[SchemaKind, typer.Argument(help="Which schema to print.")] = SchemaKind.runbook,
) -> None:
    """Print the JSON Schema of runbooks or inventories (for editors)."""
    from pitstop.runbook import inventory_json_schema, runbook_json_schema

    document = runbook_json_schema() if kind is SchemaKind.runbook else inventory_json_schema()
    typer.echo(json.dumps(document, indent=2, sort_keys=False))


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("schema")(schema)
