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


def _register_subcommands() -> None:
    # Imported here so that `pitstop --help` stays fast and one broken area does not
    # hide the others' commands.
    from pitstop import cli_runbook

    cli_runbook.register(app)
    try:
        from pitstop import cli_dev
    except ImportError:  # pragma: no cover - while the module is being written
        return
    app.add_typer(cli_dev.dev_app, name="dev")


_register_subcommands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
