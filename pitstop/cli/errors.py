"""How the command line reports an error: one line on stderr, `error: <what> <what to do>`,
never a traceback and never wrapped (terminals, CI logs and scripts read it as one line).
Usage errors too (a missing argument, an unknown option), which click would draw as a box."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

# Resolves sys.stderr when it prints (CliRunner swaps it in tests).
err_console = Console(stderr=True)

# Typer raises the exceptions of the click it runs on: the `click` package in older releases, a
# vendored copy (typer._click) in newer ones. Found from typer's own BadParameter either way.
_MRO = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
UsageError: type[Exception] = _MRO["UsageError"]
ClickException: type[Exception] = _MRO["ClickException"]
NoArgsIsHelpError: type[Exception] = getattr(
    sys.modules[UsageError.__module__], "NoArgsIsHelpError", type("NoArgsIsHelpError", (Exception,), {})
)


def one_line(message: str) -> str:
    """The message with every run of whitespace (newlines included) made one space."""
    return " ".join(message.split())


def print_error(message: str) -> None:
    # Text, not markup: a message may hold brackets (`[Errno 2]`, a list) that are not styles.
    err_console.print(
        Text.assemble(("error:", "red"), " ", one_line(message)), soft_wrap=True, highlight=False
    )


def fail(message: str, code: int = 1) -> NoReturn:
    print_error(message)
    raise typer.Exit(code)


class OneLineErrors(TyperGroup):
    """The root command: click's usage errors as one line naming the command's --help."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            done = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except NoArgsIsHelpError as exc:
            exc.show()  # type: ignore[attr-defined]  # the help, as `pitstop` alone asks for it
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        except UsageError as exc:
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else "pitstop"
            print_error(f"{exc.format_message()} (see `{where} --help`)")  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        except ClickException as exc:
            print_error(exc.format_message())  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        except typer.Abort:
            print_error("aborted")
            sys.exit(1)
        # Without standalone mode click returns a command's exit code (typer.Exit) or None.
        sys.exit(done if isinstance(done, int) else 0)
