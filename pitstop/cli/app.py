"""`pitstop` command line (typer + rich). Sub-commands live in small cli_* modules."""

from __future__ import annotations

import typer

from pitstop import __version__

app = typer.Typer(
    name="pitstop",
    help="Durable, Ansible-style runbooks for GPU Kubernetes platforms, on Temporal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def version() -> None:
    """Print pitstop's version."""
    typer.echo(__version__)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(ctx: typer.Context) -> None:
    """Run a worker (same as `python worker.py`; options after `--`)."""
    import sys

    from pitstop import worker_app

    sys.argv = ["pitstop worker", *ctx.args]
    typer.run(worker_app.main)


@app.command()
def demo(
    interactive: bool = typer.Option(
        False, "--interactive", help="Leave gates to a person (UI, CLI, Slack)."
    ),
    codec: bool = typer.Option(
        False,
        "--codec",
        help="Encrypt payloads (as `pitstop dev up --codec`): history holds ciphertext, the UI "
        "decodes through the stack's codec server.",
    ),
) -> None:
    """Run the main job end to end on the embedded stack (what `make demo` runs)."""
    import asyncio

    from pitstop.demo import run_demo

    raise typer.Exit(asyncio.run(run_demo(interactive=interactive, codec=codec)))


def _register_subcommands() -> None:
    # Imported here so that `pitstop --help` stays fast and one broken area does not
    # hide the others' commands.
    from pitstop import cli_modules, cli_run, cli_runbook

    cli_runbook.register(app)
    cli_modules.register(app)
    cli_run.register(app)
    from pitstop import cli_codec, cli_dev, cli_keys, cli_schedules, cli_sim, cli_slack

    app.add_typer(cli_dev.dev_app, name="dev")
    app.add_typer(cli_codec.codec_app, name="codec")
    app.add_typer(cli_keys.keys_app, name="keys")
    app.add_typer(cli_sim.sim_app, name="sim")
    app.add_typer(cli_slack.slack_app, name="slack")
    app.add_typer(cli_schedules.schedules_app, name="schedules")


_register_subcommands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
