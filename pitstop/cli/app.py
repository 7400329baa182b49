"""`pitstop` command line (typer + rich): the root app; sub-commands live in the other modules of
`pitstop.cli`, one area each."""

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

    from pitstop.demo.run import run_demo

    raise typer.Exit(asyncio.run(run_demo(interactive=interactive, codec=codec)))


def _register_subcommands() -> None:
    # Imported here so that `pitstop --help` stays fast and one broken area does not
    # hide the others' commands.
    from pitstop.cli import modules, run, runbook

    runbook.register(app)
    modules.register(app)
    run.register(app)
    from pitstop.cli import codec, dev, keys, schedules, sim, slack

    app.add_typer(dev.dev_app, name="dev")
    app.add_typer(codec.codec_app, name="codec")
    app.add_typer(keys.keys_app, name="keys")
    app.add_typer(sim.sim_app, name="sim")
    app.add_typer(slack.slack_app, name="slack")
    app.add_typer(schedules.schedules_app, name="schedules")


_register_subcommands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
