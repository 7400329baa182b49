"""The command line loads only the area of the command it runs (pitstop/cli/app.py): `pitstop
run` must not pay for the simulator's, the dev stack's or paramiko's imports. Checked in a
fresh interpreter, where nothing else has imported them yet."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from pitstop.cli.app import AREAS, COMMAND_AREA, build_app

REPO = Path(__file__).resolve().parents[2]


def test_every_command_of_the_full_command_line_names_its_area() -> None:
    app = build_app()
    commands = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    groups = {g.name for g in app.registered_groups}
    root = {"version", "worker", "demo"}
    assert (commands | groups) - root == set(COMMAND_AREA), "a command without an area loads everything"
    assert set(COMMAND_AREA.values()) == set(AREAS)
    for command, area in COMMAND_AREA.items():  # and its area really holds it
        alone = build_app([area])
        names = {c.name or (c.callback.__name__ if c.callback else "") for c in alone.registered_commands}
        assert command in names | {g.name for g in alone.registered_groups}, (command, area)


def _loaded_after(argv: list[str], prefixes: tuple[str, ...]) -> list[str]:
    code = textwrap.dedent(
        f"""
        import json, sys
        sys.argv = {["pitstop", *argv]!r}
        from pitstop.cli.app import app_for
        try:
            app_for(sys.argv[1:])()
        except SystemExit:
            pass
        print(json.dumps(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=True
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_run_loads_its_own_area_only(tmp_path: Path) -> None:
    loaded = _loaded_after(["run", "--help"], ("pitstop.cli", "pitstop_sim", "pitstop.devstack", "workflows"))
    # pitstop.cli.errors: how every area reports an error (one line), no area of its own.
    assert loaded == ["pitstop.cli", "pitstop.cli.app", "pitstop.cli.errors", "pitstop.cli.run"]


def test_validating_an_ssh_runbook_does_not_import_paramiko(tmp_path: Path) -> None:
    runbook = tmp_path / "runbook.yaml"
    runbook.write_text("name: x\nhosts: all\ntasks:\n  - ssh.command: uname -r\n")
    (tmp_path / "inventory.yaml").write_text("all:\n  hosts:\n    a: {}\n")
    loaded = _loaded_after(["validate", str(runbook), "-i", str(tmp_path / "inventory.yaml")], ("paramiko",))
    assert loaded == []
    # The validation did run: it loaded the SSH module's argument rules (which need no paramiko).
    assert "pitstop.ssh.protocol" in _loaded_after(["validate", str(runbook)], ("pitstop.ssh",))
