"""The one way past PodDisruptionBudgets: `kube.drain` with `disable_eviction: true`.

With it, the drain DELETEs pods instead of asking the Eviction API, so no PDB is honoured.
That is a human decision, so the runbook language allows it only where a human made it:

1. The value is the YAML boolean `true` (or `false`) written in the runbook or its task file:
   never a template, so no extra var (`-e`), runbook/stage/task var, inventory var or
   registered result can turn it on.
2. The task is in a stage's `tasks` (block, rescue and always included, imported task files
   too), never in handlers, rollback lists or observe checks.
3. That stage has a `gate` with `before: true` whose `on_timeout` is not `approve`: approvers
   said yes to this stage before any of its hosts started. A per-host `gate:` task does not
   count, because `when`, `--tags` and `--skip-tags` can skip a task but never a stage's gate.

Anything else is refused by the loader at the value's file:line:col. Every stage that uses
it is named by `pitstop validate` and in the plan's status (`bypass_notes`).
"""

from __future__ import annotations

from collections.abc import Iterable

from pitstop.runbook._yaml import Node
from pitstop.runbook.models import Runbook, SourcePos, Stage, Task

MODULE = "kube.drain"
ARG = "disable_eviction"
WARNING = "this stage deletes pods without the Eviction API: PDBs are NOT honoured"
RULE = (
    "it turns off the Eviction API (PodDisruptionBudgets are NOT honoured), so it must be the literal "
    "`true` written in the runbook, in a stage whose `gate` has `before: true`"
)


def literal_error(node: Node) -> None:
    """Refuse a `disable_eviction` that is not a YAML boolean (a template, a string...)."""
    value = node.value
    if isinstance(value, bool):
        return
    raise node.error(
        f"'{ARG}' must be the literal true or false, got {value!r}: {RULE}; "
        "a template (and so -e, vars or the inventory) can never set it"
    )


def bypasses(task: Task) -> bool:
    return task.module == MODULE and task.args.get(ARG) is True


def _walk(tasks: Iterable[Task]) -> list[Task]:
    return [t for top in tasks for t in top.walk()]


def _stage_gated(stage: Stage) -> bool:
    gate = stage.gate
    return gate is not None and gate.before and gate.on_timeout != "approve"


def check(runbook: Runbook, values: dict[SourcePos, Node]) -> None:
    """Apply rules 2 and 3; `values` maps a bypassing task's position to its value's node."""

    def refuse(task: Task, why: str) -> None:
        node = values.get(task.source)
        if node is None:  # pragma: no cover - every bypassing task was recorded by the parser
            raise ValueError(f"{task.source.path}:{task.source.line}: '{ARG}: true' {why}")
        raise node.error(f"'{ARG}: true' {why}: {RULE}")

    for stage in runbook.stages:
        for task in _walk(stage.tasks):
            if not bypasses(task):
                continue
            gate = stage.gate
            if gate is None or not gate.before:
                refuse(task, f"in stage '{stage.name}', which has no gate before it")
            elif gate.on_timeout == "approve":
                refuse(task, f"in stage '{stage.name}', whose gate approves itself on timeout")
        checks = stage.observe_checks()
        for where, tasks in (("handlers", stage.handlers), ("rollback", stage.rollback), ("observe", checks)):
            for task in _walk(tasks):
                if bypasses(task):
                    refuse(task, f"in the {where} of stage '{stage.name}'; only a stage's tasks may use it")
    for where, tasks in (("handlers", runbook.handlers), ("rollback", runbook.rollback)):
        for task in _walk(tasks):
            if bypasses(task):
                refuse(task, f"in the runbook's {where}; only a stage's tasks may use it")


def bypass_notes(runbook: Runbook) -> dict[str, str]:
    """Stage name -> the warning `pitstop validate` and the plan show, for every stage that
    deletes pods without the Eviction API."""
    notes: dict[str, str] = {}
    for stage in runbook.stages:
        where = [f"{t.source.path}:{t.source.line}" for t in _walk(stage.tasks) if bypasses(t)]
        if where and _stage_gated(stage):
            notes[stage.name] = f"{WARNING} (kube.drain with {ARG}: true at {', '.join(where)})"
    return notes
