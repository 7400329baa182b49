"""`pitstop report RUN_ID [--out DIR]`: the run's report (finished or in progress) as one HTML
file with its pictures embedded, Markdown with PNGs beside it, and the data that drove them.

The run is read through Temporal as `pitstop status` reads it (a finished run from its
history, needing no worker; a run in progress from its `status` Query and its ended hosts).
`--from FILE` redraws a report from a saved `<run>.data.json` (or a RunSource JSON) instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from rich.console import Console

from pitstop.cli.errors import fail as _fail
from pitstop.settings import Settings

if TYPE_CHECKING:
    from pitstop.report.source import RunSource

console = Console()


def report(
    run_id: Annotated[str | None, typer.Argument(help="Run (workflow) id.")] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Directory to write into (default: $PITSTOP_HOME/reports)."),
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option("--from", help="Redraw from a saved <run>.data.json instead of reading Temporal."),
    ] = None,
    slack: Annotated[
        bool,
        typer.Option("--slack", help="Post the report's link in the run's Slack thread (SLACK_BOT_TOKEN)."),
    ] = False,
    link_base: Annotated[
        str | None,
        typer.Option(
            "--link-base", help="URL where DIR is served: the Slack link is this URL + the HTML's name."
        ),
    ] = None,
) -> None:
    """Write a run's report: timeline per node, failure-domain availability, validation figures
    against baseline, gates and the change record (HTML and Markdown)."""
    from pitstop.report.source import ReportSourceError
    from pitstop.report.write import write_report

    settings = Settings.from_env()
    if from_file is not None:
        source = _saved(from_file)
    elif run_id is None:
        _fail("name a run: pitstop report RUN_ID (or --from FILE)")
    else:
        from pitstop.cli.run import _client, _run
        from pitstop.report.source import read_run

        async def go() -> RunSource:
            return await read_run(await _client(settings), run_id)

        try:
            source = _run(go)
        except ReportSourceError as exc:
            _fail(str(exc))
    files = write_report(source, out or settings.home / "reports")
    console.print(f"report of {source.report.run_id} ({source.report.status})", highlight=False)
    for path in files.all():
        console.print(f"  {path}", highlight=False, soft_wrap=True)
    if slack:
        _link_in_slack(source, files.html, link_base)


def _link_in_slack(source: RunSource, html: Path, link_base: str | None) -> None:
    from pitstop.report.slack_link import ReportLinkError, post_link, report_url
    from pitstop.slack.config import SlackConfigError, SlackSettings

    thread = source.slack_thread
    if thread is None:
        _fail(
            f"run {source.report.run_id} has no Slack thread (its worker had no SLACK_DEFAULT_CHANNEL "
            "and no gate names a slack_channel); the report is written, nothing was posted"
        )
    url = report_url(html, link_base)
    try:
        posted = post_link(thread, source.report.run_id, url, SlackSettings.from_env())
    except (ReportLinkError, SlackConfigError) as exc:
        _fail(f"the report is written, but its link was not posted: {exc}")
    console.print(
        f"linked in the run's Slack thread ({posted.channel}, reply {posted.ts}): {url}", highlight=False
    )


def _saved(path: Path) -> RunSource:
    from pitstop.report.source import RunSource

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        # A report's data file holds its source under "source"; a fixture is the source itself.
        return RunSource.model_validate(raw.get("source", raw) if isinstance(raw, dict) else raw)
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        _fail(f"--from {path}: not a saved report ({str(exc).splitlines()[0]}); give a <run>.data.json")


def register(app: typer.Typer) -> None:
    app.command()(report)
