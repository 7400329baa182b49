"""The one error type of the runbook language: a message pinned to file:line:column."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RunbookError(Exception):
    """A runbook or inventory is invalid; `str(e)` is the one line `pitstop validate` prints."""

    def __init__(
        self,
        message: str,
        *,
        path: str,
        line: int,
        column: int,
        key: str | None = None,
        suggestion: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.column = column
        self.key = key
        self.suggestion = suggestion
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.path}:{self.line}:{self.column}: {self.message}"
        if self.suggestion:
            text += f" (did you mean '{self.suggestion}'?)"
        return text


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """The nearest valid name for a typo, or None when nothing is close enough."""
    matches = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return matches[0] if matches else None
