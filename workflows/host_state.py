"""What a host workflow keeps while it runs its tasks, and how a task's ending is recorded.

Deterministic workflow code (the only clock read is `workflow.now()`). `HostWorkflow`
(`workflows/host.py`) owns one `HostRun`; the task modules beside it (`host_tasks`,
`host_calls`, `host_messages`) read and write it through `HostControl`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import (
        Artifact,
        GateClosed,
        HostInput,
        ModuleResult,
        RunOnceReply,
        TaskOutcome,
        TaskStatus,
    )
    from pitstop.runbook.models import Task
    from pitstop.runbook.scope import VarScope

# What Ansible registers for a task whose `when` was false.
SKIPPED_BY_CONDITION: dict[str, Any] = {
    "changed": False,
    "failed": False,
    "skipped": True,
    "msg": "condition false",
    "skip_reason": "Conditional result was False",
}


@dataclass
class Flow:
    """Outcome of running a list of tasks."""

    failed: bool = False
    aborted: bool = False
    msg: str = ""
    failed_task: str | None = None
    failed_task_id: str | None = None
    result: dict[str, Any] | None = None


@dataclass(frozen=True)
class BlockScope:
    """What a block hands down to every task inside it, as in Ansible: its tags, its
    `when` conditions (evaluated again for each task) and its vars."""

    tags: tuple[str, ...] = ()
    when: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)
    by_tags: bool = True


@dataclass
class HostRun:
    """One host's state across its task list."""

    inp: HostInput
    # `set_fact` results; above task and block vars, as Ansible's precedence puts them.
    facts: dict[str, Any] = field(default_factory=dict)
    # Facts set for other hosts (`delegate_facts`), carried to them by the parent.
    delegated: dict[str, dict[str, Any]] = field(default_factory=dict)
    registered: dict[str, Any] = field(default_factory=dict)
    outcomes: list[TaskOutcome] = field(default_factory=list)
    notified: list[str] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    changed: int = 0

    def scope(self, task_vars: Mapping[str, Any]) -> VarScope:
        """The variables of one task attempt (see `pitstop.runbook.scope` for the order)."""
        return VarScope(
            {"input": self.inp.vars, "task": task_vars, "facts": self.facts, "registered": self.registered},
            hostvars=self.inp.hostvars,
        )

    # --- recording a task's ending ----------------------------------------------------------
    def record(
        self,
        task: Task,
        status: TaskStatus,
        msg: str,
        started: datetime,
        attempts: int = 1,
        result: ModuleResult | None = None,
    ) -> None:
        self.outcomes.append(
            TaskOutcome(
                task_id=task.task_id,
                name=task.name or task.module or task.task_id,
                module=task.module,
                status=status,
                msg=msg,
                attempts=attempts,
                started_at=started,
                ended_at=workflow.now(),
                data=small(result.data) if result is not None else {},
            )
        )

    def fail(self, task: Task, msg: str, started: datetime) -> Flow:
        self.record(task, "failed", msg, started)
        return Flow(failed=True, msg=msg, failed_task=task.name or task.task_id, failed_task_id=task.task_id)

    def finish(self, task: Task, result: ModuleResult, attempts: int, started: datetime) -> Flow:
        """Register, collect the artifact, notify handlers and record: a module task's end."""
        value = result.as_var()
        if task.register:
            self.registered[task.register] = value
        self._collect_artifact(task, result)
        if result.changed:
            self.changed += 1
            for handler in task.notify:
                if handler not in self.notified:
                    self.notified.append(handler)
        status = status_of(result)
        if result.failed and task.ignore_errors:
            status = "ignored"
        self.record(task, status, result.msg, started, attempts, result)
        if result.failed and not task.ignore_errors:
            return Flow(
                failed=True,
                msg=result.msg,
                failed_task=task.name or task.task_id,
                failed_task_id=task.task_id,
                result=value,
            )
        return Flow()

    def _collect_artifact(self, task: Task, result: ModuleResult) -> None:
        artifact = result.data.get("artifact")
        if isinstance(artifact, dict) and artifact.get("uri"):
            self.artifacts.append(
                Artifact(
                    name=str(artifact.get("name") or task.name or task.task_id),
                    uri=str(artifact["uri"]),
                    host=self.inp.host,
                    stage=self.inp.stage,
                    task=task.name or task.task_id,
                )
            )

    def rescue(self, flow: Flow) -> None:
        """Before a block's `rescue`: what failed, as Ansible names it, and its outcome marked."""
        self.registered["ansible_failed_task"] = {"name": flow.failed_task, "id": flow.failed_task_id}
        self.registered["ansible_failed_result"] = flow.result or {"failed": True, "msg": flow.msg}
        for outcome in reversed(self.outcomes):
            if outcome.status == "failed" and outcome.task_id == flow.failed_task_id:
                outcome.status = "rescued"
                return


class HostControl(Protocol):
    """What the task modules need of the host workflow: its input, whether it was aborted,
    the parent's answers, a durable timer and a way to message the run."""

    inp: HostInput
    abort_reason: str | None
    gate_results: dict[str, GateClosed]
    run_once: dict[str, RunOnceReply]

    async def sleep(self, seconds: float) -> None: ...

    async def to_parent(self, signal: Any, message: BaseModel) -> None: ...


def status_of(result: ModuleResult) -> TaskStatus:
    if result.failed:
        return "failed"
    if result.skipped:
        return "skipped"
    return "changed" if result.changed else "ok"


def small(data: dict[str, Any], limit: int = 4096) -> dict[str, Any]:
    """Keep task data in reports only while it is small; big outputs stay in the registered var."""
    text = json.dumps(data, default=str)
    return data if len(text) <= limit else {"truncated": True, "bytes": len(text)}


def bounded_registered(registered: dict[str, Any]) -> dict[str, Any]:
    return {k: small(v) if isinstance(v, dict) else v for k, v in registered.items()}
