"""Which module calls run as local activities: only those that are harmless to run twice."""

from __future__ import annotations

from typing import Any

import pytest

from activities.plan import build_plan
from pitstop.contracts import RunRequest
from pitstop.local_tasks import changes_nothing, runs_local
from pitstop.modules import get_module
from pitstop.runbook.models import Task


def _task(**fields: Any) -> Task:
    where = {"source": {"path": "runbook.yaml", "line": 1, "column": 1}, "task_id": "t0"}
    return Task.model_validate(
        {"name": "t", "module": "ssh.command", "args": {"cmd": "true"}, **where, **fields}
    )


@pytest.mark.parametrize(
    ("fields", "args", "local"),
    [
        ({"changed_when": False}, {}, True),  # YAML `changed_when: false`
        ({"changed_when": "false"}, {}, True),
        ({}, {"retry_on_disconnect": True}, True),
        ({}, {}, False),  # a plain command may change anything
        ({"changed_when": "rc == 2"}, {}, False),  # changes sometimes
        ({"changed_when": [False, "rc == 2"]}, {}, False),
        ({}, {"creates": "/x"}, False),  # a re-run would report "did not run" and miss its handler
        ({}, {"removes": "/x"}, False),
        ({}, {"retry_on_disconnect": "yes"}, False),  # only the rendered boolean counts
    ],
)
def test_a_command_runs_locally_only_when_the_task_says_running_it_twice_is_harmless(
    fields: dict[str, Any], args: dict[str, Any], local: bool
) -> None:
    assert runs_local("when_rerun_safe", _task(**fields), args) is local


def test_modules_declare_it_and_never_means_never() -> None:
    read_only = _task(changed_when=False)
    assert runs_local("always", _task(), {}) and not runs_local(
        "never", read_only, {"retry_on_disconnect": True}
    )
    assert changes_nothing(read_only) and not changes_nothing(_task())
    modes = {name: get_module(name).local for name in ("ssh.command", "ssh.script", "ssh.facts", "ssh.copy")}  # type: ignore[union-attr]
    # Modules that change a node stay regular activities whatever the task says.
    assert modes == {
        "ssh.command": "when_rerun_safe",
        "ssh.script": "when_rerun_safe",
        "ssh.facts": "always",
        "ssh.copy": "never",
    }
    changing = ("ssh.firmware_update", "ssh.reboot", "kube.drain", "kube.cordon")
    assert all(get_module(name).local == "never" for name in changing)  # type: ignore[union-attr]


@pytest.mark.parametrize(("queue", "mode"), [(None, "always"), ("workers-next-to-c1", "never")])
def test_the_plan_allows_local_calls_only_when_the_runs_activities_share_the_workflows_queue(
    queue: str | None, mode: str
) -> None:
    cluster = f"cluster: {{name: c1, task_queue: {queue}}}\n" if queue else ""
    files = {
        "runbook.yaml": "name: r\nhosts: all\ntasks:\n  - ssh.facts: {}\n",
        "inventory.yaml": cluster + "all:\n  hosts:\n    a: {}\n",
    }
    plan = build_plan(RunRequest(runbook="runbook.yaml", inventory="inventory.yaml", files=files), "pitstop")
    # A local activity runs in the worker running the workflow, which may not serve that queue.
    assert plan.task_queue == (queue or "pitstop")
    assert plan.modules["ssh.facts"].local == mode
