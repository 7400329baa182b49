"""`pitstop slack serve`: the Slack approvals bridge (mounted by `pitstop.cli` as `slack`)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

slack_app = typer.Typer(
    name="slack", help="Slack approvals bridge: gate buttons in Slack become votes.", no_args_is_help=True
)


@slack_app.callback()
def slack() -> None:
    """Slack approvals bridge: gate buttons in Slack become votes."""
    # A callback keeps `serve` a sub-command when this app runs on its own (tests, benchmarks).


@slack_app.command()
def serve(
    port: Annotated[int, typer.Option(help="HTTP port for Slack's Request URL (POST /slack/events).")] = 3000,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    socket_mode: Annotated[
        bool, typer.Option("--socket-mode", help="Connect to Slack over Socket Mode (needs SLACK_APP_TOKEN).")
    ] = False,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
) -> None:
    """Serve Slack interactivity: verify each click, map the user, send the vote to the run."""
    from pitstop.client import PitstopConnectionError, connect
    from pitstop.keys import KeyConfigError, require_key
    from pitstop.logs import configure_logging
    from pitstop.settings import Settings
    from pitstop.slack.config import SlackConfigError, SlackSettings
    from pitstop.slack.identity import ApproverMapError
    from pitstop.slack.server import serve as serve_bridge
    from pitstop.telemetry import setup_tracing, shutdown_tracing

    configure_logging(log_level)
    try:
        slack = SlackSettings.from_env()
        slack.require_bridge(socket_mode=socket_mode)
        # The bridge signs every vote it forwards: without the vote key, none would be verified.
        vote_key = require_key("vote", home=Settings.from_env().home)
    except (SlackConfigError, KeyConfigError) as exc:
        typer.echo(f"pitstop slack serve: {exc}", err=True)
        raise typer.Exit(2) from None
    setup_tracing("pitstop-slack-bridge")

    async def go() -> None:
        temporal = await connect(Settings.from_env())
        await serve_bridge(slack, temporal, host, port, socket_mode, vote_key)

    try:
        asyncio.run(go())
    except (PitstopConnectionError, ApproverMapError) as exc:
        typer.echo(f"pitstop slack serve: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        shutdown_tracing()
