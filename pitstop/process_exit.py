"""Ending a pitstop process without Python's interpreter finalization.

The Temporal SDK's Rust core keeps threads (Tokio, gRPC) that can outlive the Python objects
using them; when CPython finalizes while one of them calls back into Python, the process dies
with `Fatal Python error: PyGILState_Release` and SIGABRT, after all its work is done
(temporalio/sdk-python#300, open; seen here on a worker that had stopped cleanly, under load).
A user would read that as a failed command. So the CLI and the worker, once their work is
done and reported, flush what they wrote and leave with `os._exit`. Nothing is lost: the
worker has already stopped polling, finished its activities and shut tracing down; the CLI
has printed its result. It also saves the CLI the ~0.1-0.2 s finalization takes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn


def exit_now(code: int | str | None) -> NoReturn:
    """Flush stdout, stderr and logging, then end the process with `code` (as SystemExit reads
    it: None is 0, a string is printed to stderr and is 1)."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # A closed pipe or stream: nothing more can be said.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code or 0)


__all__ = ["exit_now"]
