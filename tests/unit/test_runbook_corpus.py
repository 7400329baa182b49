"""Every malformed file in tests/corpus is refused with one line naming the right place."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pitstop.cli.app import app

REPO = Path(__file__).resolve().parents[2]
CORPUS = sorted((REPO / "tests" / "corpus").glob("*.yaml"))
INVENTORY = "tests/corpus/_includes/lab-inventory.yaml"
PITSTOP = Path(sys.executable).parent / "pitstop"


def _header(path: Path) -> dict[str, str]:
    header: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = re.match(r"#\s*(expect|at|file):\s*(.*)$", line)
        if not match:
            break
        header[match.group(1)] = match.group(2).strip()
    return header


def _check(path: Path, exit_code: int, stderr: str) -> None:
    header = _header(path)
    rel = str(path.relative_to(REPO))
    where = header.get("file", rel)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert exit_code == 1, stderr
    assert "Traceback" not in stderr
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{where}:{header['at']}: "), lines[0]
    assert header["expect"] in lines[0]


def test_corpus_is_large_enough_and_every_file_states_its_expectation() -> None:
    assert len(CORPUS) >= 30
    for path in CORPUS:
        header = _header(path)
        assert "expect" in header and re.fullmatch(r"\d+:\d+", header.get("at", "")), path


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_validate_refuses_malformed_file_with_one_positioned_line(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(app, ["validate", str(path.relative_to(REPO)), "-i", INVENTORY])
    _check(path, result.exit_code, result.stderr)
    assert result.stdout == ""


@pytest.mark.parametrize(
    "name",
    [
        "yaml_syntax_error.yaml",
        "import_cycle.yaml",
        "inventory_bad_ssh_port.yaml",
        "unknown_module_debgu.yaml",
    ],
)
def test_validate_subprocess_prints_no_traceback(name: str) -> None:
    path = REPO / "tests" / "corpus" / name
    proc = subprocess.run(
        [str(PITSTOP), "validate", str(path.relative_to(REPO)), "--inventory", INVENTORY],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    _check(path, proc.returncode, proc.stderr)


def test_validate_missing_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(app, ["validate", "runbooks/nope.yaml"])
    assert result.exit_code == 1
    assert result.stderr.strip() == "runbooks/nope.yaml:1:1: file not found"


def test_validate_unexpected_exception_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    import pitstop.runbook

    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("kaboom\nsecond line")

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(pitstop.runbook, "load_any", boom)
    result = CliRunner().invoke(app, ["validate", "runbooks/examples/hello.yaml"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "kaboom" in lines[0] and "Traceback" not in result.stderr


def test_validate_prints_summary_with_hosts_per_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(
        app,
        ["validate", "runbooks/examples/gpu-node-maintenance.yaml", "-i", "runbooks/inventories/lab.yaml"],
    )
    assert result.exit_code == 0, result.output
    assert "canary" in result.stdout and "fleet" in result.stdout
    assert "gpu_fleet:!gpu_canary (3)" in result.stdout


def test_validate_counts_the_implicit_localhost_of_an_inventory_that_does_not_name_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # staging.yaml names no localhost: a `hosts: localhost` stage still runs on the worker, as
    # the plan runs it (this crashed with a traceback before).
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(
        app, ["validate", "runbooks/platform-upgrade.yaml", "-i", "runbooks/inventories/staging.yaml"]
    )
    assert result.exit_code == 0, result.output
    assert "localhost (1)" in result.stdout and "Traceback" not in result.output
