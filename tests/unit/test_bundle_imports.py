"""The run request's bundle carries every file the worker's loader will read: a task file that
only imports others (it holds no task of its own) is sent too, and the bundle plans on the
worker as it does locally."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.plan import build_plan
from pitstop.bundle import collect
from pitstop.contracts import RunRequest
from pitstop.runbook import RunbookError


def test_a_task_file_that_only_imports_another_is_in_the_bundle(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "runbook.yaml").write_text(
        "name: chain\nhosts: all\ntasks:\n  - import_tasks: tasks/path.yaml\n"
    )
    (tmp_path / "tasks" / "path.yaml").write_text(
        "- import_tasks: host.yaml\n  when: inventory_hostname == 'a'\n- import_tasks: other.yaml\n"
    )
    (tmp_path / "tasks" / "host.yaml").write_text("- debug: {msg: host}\n")
    (tmp_path / "tasks" / "other.yaml").write_text("- debug: {msg: other}\n")
    (tmp_path / "inventory.yaml").write_text("all:\n  hosts:\n    a: {}\n")
    files, runbook, inventory = collect(tmp_path / "runbook.yaml", tmp_path / "inventory.yaml")
    assert sorted(files) == [
        "inventory.yaml",
        "runbook.yaml",
        "tasks/host.yaml",
        "tasks/other.yaml",
        "tasks/path.yaml",
    ]
    plan = build_plan(RunRequest(runbook=runbook, inventory=inventory, files=files))
    assert [t.args for t in plan.runbook.stages[0].tasks] == [{"msg": "host"}, {"msg": "other"}]


def test_a_path_written_outside_an_import_is_never_read_or_sent(tmp_path: Path) -> None:
    """A hostile runbook cannot make `pitstop run` upload a file of the person running it: only
    files the loader read as task files go, and an `import_tasks` of a file that is not a task
    list is refused before anything is sent."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=abc123\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "runbook.yaml").write_text(
        "name: hostile\nhosts: all\n"
        "vars: {a: {import_tasks: ../secret.txt}, b: {import_tasks: /proc/self/environ}}\n"
        "tasks:\n  - debug: {msg: '{{ a }}'}\n"
    )
    (work / "inventory.yaml").write_text("all:\n  hosts:\n    a: {}\n")
    files, _, _ = collect(work / "runbook.yaml", work / "inventory.yaml")
    assert sorted(files) == ["inventory.yaml", "runbook.yaml"]
    assert not any("abc123" in text for text in files.values())
    (work / "runbook.yaml").write_text("name: hostile\nhosts: all\ntasks:\n  - import_tasks: ../secret.txt\n")
    with pytest.raises(RunbookError, match="must be a YAML list of tasks"):
        collect(work / "runbook.yaml", work / "inventory.yaml")
