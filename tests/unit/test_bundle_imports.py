"""The run request's bundle carries every file the worker's loader will read: a task file that
only imports others (it holds no task of its own) is sent too, and the bundle plans on the
worker as it does locally."""

from __future__ import annotations

from pathlib import Path

from activities.plan import build_plan
from pitstop.bundle import collect
from pitstop.contracts import RunRequest


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
