"""How the command line reports an error: one line on stderr, `error: <what> <what to do>`,
never a traceback and never wrapped (terminals, CI logs and scripts read it as one line)."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

# Resolves sys.stderr when it prints (CliRunner swaps it in tests).
err_console = Console(stderr=True)


def one_line(message: str) -> str:
    """The message with every run of whitespace (newlines included) made one space."""
    return " ".join(message.split())


def fail(message: str, code: int = 1) -> NoReturn:
    # Text, not markup: a message may hold brackets (`[Errno 2]`, a list) that are not styles.
    err_console.print(
        Text.assemble(("error:", "red"), " ", one_line(message)), soft_wrap=True, highlight=False
    )
    raise typer.Exit(code)
