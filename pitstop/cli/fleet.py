"""`pitstop fleet status [--clusters a,b] [--markdown FILE] [--html FILE]`: many clusters at
once, read only from Temporal (pitstop/fleet/source.py): each cluster's version inventory, the
skew between clusters, the last etcd backup and restore drill, the runs in progress."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from pitstop.cli.errors import fail
from pitstop.settings import Settings

if TYPE_CHECKING:
    from pitstop.fleet.models import FleetStatus

fleet_app = typer.Typer(
    name="fleet",
    help="Many clusters at once: versions, skew, backups and drills, runs.",
    no_args_is_help=True,
)


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or exc}")


@fleet_app.command()
def status(
    clusters: Annotated[
        str | None,
        typer.Option("--clusters", help="Comma-separated cluster names (default: every cluster runs name)."),
    ] = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Also write the view as Markdown.")
    ] = None,
    html: Annotated[Path | None, typer.Option("--html", help="Also write the view as HTML.")] = None,
) -> None:
    """Each cluster's version inventory (from its newest run that took one), the skew between
    clusters, its last etcd backup and restore drill (RTO/RPO), and its runs in progress."""
    from pitstop.cli.run import _client, _run
    from pitstop.fleet import render
    from pitstop.fleet.source import FleetSourceError, read_fleet

    settings = Settings.from_env()
    names = [n.strip() for n in clusters.split(",") if n.strip()] if clusters is not None else None
    if clusters is not None and not names:
        fail("--clusters: name at least one cluster (a,b,...)")

    async def go() -> FleetStatus:
        return await read_fleet(await _client(settings), names)

    try:
        fleet = _run(go)
    except FleetSourceError as exc:
        fail(str(exc))
    Console(soft_wrap=False).print(render.terminal(fleet))
    if markdown is not None:
        _write(markdown, render.markdown(fleet))
        typer.echo(f"wrote {markdown}")
    if html is not None:
        _write(html, render.html(fleet))
        typer.echo(f"wrote {html}")
