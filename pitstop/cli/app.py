"""`pitstop` command line (typer + rich): the root app; sub-commands live in the other modules of
`pitstop.cli`, one area each."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

import typer

from pitstop import __version__
from pitstop.process_exit import exit_now


def version() -> None:
    """Print pitstop's version."""
    typer.echo(__version__)


def worker(ctx: typer.Context) -> None:
    """Run a worker (same as `python worker.py`; options after `--`)."""
    import sys

    from pitstop import worker_app

    sys.argv = ["pitstop worker", *ctx.args]
    typer.run(worker_app.main)


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


def _runbook(app: typer.Typer) -> None:
    from pitstop.cli import runbook

    runbook.register(app)


def _modules(app: typer.Typer) -> None:
    from pitstop.cli import modules

    modules.register(app)


def _runs(app: typer.Typer) -> None:
    from pitstop.cli import run

    run.register(app)


def _report(app: typer.Typer) -> None:
    from pitstop.cli import report

    report.register(app)


def _group(name: str) -> Callable[[typer.Typer], None]:
    def add(app: typer.Typer) -> None:
        area = importlib.import_module(f"pitstop.cli.{name}")
        app.add_typer(getattr(area, f"{name}_app"), name=name)

    return add


# Each area of the command line, imported only when it is used: `pitstop run` does not pay
# for the simulator's, the dev stack's or the module catalogue's imports (~0.4 s of its start).
AREAS: dict[str, Callable[[typer.Typer], None]] = {
    "runbook": _runbook,
    "modules": _modules,
    "run": _runs,
    "report": _report,
    **{name: _group(name) for name in ("dev", "codec", "keys", "sim", "slack", "schedules", "fleet")},
}
# Top-level command -> its area (the groups are their own names).
COMMAND_AREA = {
    "validate": "runbook",
    "schema": "runbook",
    "modules": "modules",
    "report": "report",
    **dict.fromkeys(
        ("run", "plan", "status", "approve", "reject", "pause", "resume", "abort", "skip-host", "rollback"),
        "run",
    ),
    **{name: name for name in ("dev", "codec", "keys", "sim", "slack", "schedules", "fleet")},
}


def build_app(areas: list[str] | None = None) -> typer.Typer:
    """The command line with the given areas (default: all of them)."""
    from pitstop.cli.errors import OneLineErrors

    app = typer.Typer(
        cls=OneLineErrors,
        name="pitstop",
        help="Durable, Ansible-style runbooks for GPU Kubernetes platforms, on Temporal.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.command()(version)
    app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(worker)
    app.command()(demo)
    # One broken area must not hide the others' commands, so each registers on its own.
    for area in AREAS if areas is None else areas:
        AREAS[area](app)
    return app


def __getattr__(name: str) -> typer.Typer:
    # `from pitstop.cli.app import app` (tests, docs generators): the whole command line.
    if name == "app":
        full = build_app()
        globals()["app"] = full
        return full
    raise AttributeError(name)


def app_for(argv: list[str]) -> typer.Typer:
    """The command line `main` runs for these arguments: the first word that is not an option
    names the command and only its area is loaded; anything else (`pitstop`, `pitstop --help`,
    a typo) gets the whole command line."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    area = COMMAND_AREA.get(command or "")
    return build_app([area] if area else None)


def main() -> None:
    try:
        app_for(sys.argv[1:])()
        code: int | str | None = 0
    except SystemExit as done:
        code = done.code
    # Past this point everything is printed: leave without interpreter finalization, which can
    # abort the process after a Temporal client was used (pitstop/process_exit.py).
    exit_now(code)


if __name__ == "__main__":
    main()
