"""`pitstop modules [NAME]`: each module's documentation, generated from its Args model."""

from __future__ import annotations

import inspect
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pitstop.modules import all_modules, get_module, module_names


def modules(name: Annotated[str | None, typer.Argument(help="Module to describe.")] = None) -> None:
    """List modules, or describe one (arguments, defaults, check mode)."""
    console = Console()
    if name is None:
        table = Table(title="modules")
        table.add_column("module")
        table.add_column("check mode")
        table.add_column("runs")
        table.add_column("summary")
        for each in all_modules():
            runs = "in the workflow" if each.pure else "activity"
            table.add_row(each.name, "yes" if each.supports_check_mode else "no", runs, each.summary)
        console.print(table)
        return
    spec = get_module(name)
    if spec is None:
        import difflib

        near = difflib.get_close_matches(name, module_names(), n=1)
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        typer.echo(f"unknown module '{name}'{hint}", err=True)
        raise typer.Exit(1)
    console.print(f"[bold]{spec.name}[/bold]: {spec.summary}")
    flags = [
        f"check mode: {'supported' if spec.supports_check_mode else 'not supported (reported skipped)'}",
        f"timeout: {spec.start_to_close}",
        f"retries: {spec.retry.maximum_attempts or 'unlimited'}",
    ]
    if spec.disruptive:
        flags.append("disruptive: the stage must state serial or rolling")
    console.print("; ".join(flags))
    doc = spec.args_model.__doc__  # the module's own docstring only (not inherited)
    if doc:
        # Paragraphs reflowed: the terminal wraps them, not the source file's line breaks.
        paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(doc).split("\n\n")]
        console.print("\n\n".join(paragraphs), highlight=False, markup=False)
    table = Table()
    table.add_column("argument")
    table.add_column("type")
    table.add_column("default")
    table.add_column("description")
    for field_name, field in spec.args_model.model_fields.items():
        required = field.is_required()
        default = "required" if required else repr(field.default)
        annotation = getattr(field.annotation, "__name__", None) or str(field.annotation)
        table.add_row(field_name, annotation.replace("typing.", ""), default, field.description or "")
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command()(modules)
