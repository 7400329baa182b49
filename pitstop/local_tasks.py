"""Which module calls the engine runs as Temporal *local* activities.

A regular activity costs a round trip through the Temporal server per task (schedule, dispatch,
complete, next workflow task): about 30 ms and a share of the server's ~30-80 activities a
second here, which is most of a short SSH command's cost. A local activity runs in the worker
that is running the host's workflow, right away, and its result is written to history (one
marker per task, shown like any task result) when that workflow task completes.

The price: if that worker dies, every local task since the host's last completed workflow task
runs again (up to a few seconds of work), not only the task in flight. So a call runs locally
only when running it twice is harmless and reports the same:

* the module is read-only (`ModuleSpec.local == "always"`: `ssh.facts`);
* or the module allows it (`"when_rerun_safe"`: `ssh.command`, `ssh.script`) and the task
  says so: `changed_when: false` (it changes nothing) or `retry_on_disconnect: true` (the
  author declared it safe to run twice).

Commands guarded by `creates`/`removes` stay regular activities even though a retry is safe:
run again after it completed, the guard would report "did not run" (changed: false), and a
handler it notified would not fire.

Local activities run in whichever worker runs the workflow, so the engine uses them only when
the run's activities are on the workflow's own task queue (the default worker serves both).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pitstop.module_spec import LocalMode
from pitstop.runbook.models import Task

# `changed_when: false` as YAML writes it (a boolean, kept as the expression "False") or as text.
_CHANGES_NOTHING = ({"False"}, {"false"})


def changes_nothing(task: Task) -> bool:
    """The task declares it changes nothing: `changed_when: false`."""
    return task.changed_when is not None and set(task.changed_when) in _CHANGES_NOTHING


def runs_local(mode: LocalMode, task: Task, args: Mapping[str, Any]) -> bool:
    """Whether this call (arguments already rendered) may run as a local activity."""
    if mode == "always":
        return True
    if mode == "when_rerun_safe":
        return changes_nothing(task) or args.get("retry_on_disconnect") is True
    return False


__all__ = ["changes_nothing", "runs_local"]
