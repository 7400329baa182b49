"""`pitstop keys new|show`: make a worker or vote key, and tell which keys this machine holds.

`show` prints each key's origin and a fingerprint (its id), never the key: two workers that
refuse each other's messages ("the workers of this task queue do not share one worker key")
show different ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pitstop.keys import KeyConfigError, how_to_make, load_key, write_key_file

keys_app = typer.Typer(
    name="keys",
    help="The worker key (signs a run's internal messages) and the vote key (verified votes).",
    no_args_is_help=True,
)
console = Console()
# soft_wrap: an error stays one line however narrow the terminal (scripts and CI logs grep it).
err_console = Console(stderr=True, soft_wrap=True)


@keys_app.command()
def new(path: Annotated[Path, typer.Argument(help="File to write the key to (created 0600).")]) -> None:
    """Write a new random key (32 bytes, hex) to PATH; never overwrites a file."""
    try:
        write_key_file(path)
    except FileExistsError:
        err_console.print(f"[red]error:[/red] {path} exists; keys are never overwritten (remove it first)")
        raise typer.Exit(1) from None
    except OSError as exc:
        err_console.print(f"[red]error:[/red] cannot write {path}: {exc.strerror}")
        raise typer.Exit(1) from None
    console.print(f"wrote a new key to {path} (mode 0600)")


@keys_app.command()
def show() -> None:
    """Which worker key and vote key this machine uses, where from, and their ids."""
    from pitstop.settings import Settings

    home = Settings.from_env().home
    table = Table()
    for column in ("key", "from", "id (fingerprint)", "keys"):
        table.add_column(column)
    failed = False
    for kind in ("worker", "vote"):
        try:
            ring = load_key(kind, home=home)
        except KeyConfigError as exc:
            table.add_row(kind, f"[red]{exc}[/red]", "", "")
            failed = True
            continue
        if ring is None:
            table.add_row(kind, f"none: {how_to_make(kind)}", "", "")
        else:
            table.add_row(kind, ring.origin, ring.key_id, str(len(ring.keys)))
    console.print(table)
    if failed:
        raise typer.Exit(1)
