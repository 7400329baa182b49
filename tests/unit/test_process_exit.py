"""`exit_now`: what a process printed and logged reaches its reader, and its exit code is the
one it meant, although it skips interpreter finalization (pitstop/process_exit.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("code", "status", "stderr"), [("0", 0, ""), ("3", 3, ""), ("'refused'", 1, "refused")]
)
def test_buffered_output_and_logs_survive_and_the_code_is_kept(code: str, status: int, stderr: str) -> None:
    script = (
        "import logging, sys\n"
        "from pitstop.process_exit import exit_now\n"
        "logging.basicConfig(stream=sys.stderr, format='%(message)s')\n"
        "print('result table', end='')\n"  # no newline: still in the buffer of a pipe
        "logging.getLogger('x').warning('logged line')\n"
        f"exit_now({code})\n"
        "print('never')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == status
    assert done.stdout == "result table"
    assert "logged line" in done.stderr and stderr in done.stderr
