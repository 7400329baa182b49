"""Running Debian's promtool (package `prometheus`, installed by `make test` when missing)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def require_promtool() -> str:
    if not Path(PROMTOOL).is_file():
        pytest.skip(
            "promtool is not installed (Debian package `prometheus`; `make test` installs it as root)"
        )
    return PROMTOOL


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run promtool; fail the test with its whole output when it does not exit 0."""
    result = subprocess.run(
        [require_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0:
        pytest.fail(
            f"promtool {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}",
            pytrace=False,
        )
    return result
