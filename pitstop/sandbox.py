"""The workflow sandbox configuration shared by the worker and the replayer.

Modules passed through are loaded once, outside the sandbox: pitstop's own pure modules
(models, templating, rules), pydantic, and Jinja2 with MarkupSafe. Jinja2 imports parts of
itself lazily and guards its template cache with a lock; re-importing it inside every
workflow run would be slow and trips the sandbox's restriction on `threading.Lock`.
Everything passed through is deterministic: no clock, randomness or I/O is reachable
from workflow code through it.

The worker runs the engine's workflows without the sandbox (`workflow_runner(engine=True)`
is Temporal's `UnsandboxedWorkflowRunner`); the replayer keeps the full sandbox. Measured
reasons (bench/ssh_vs_ansible.py, py-spy on the worker):
- re-importing the `workflows` package for each new workflow instance cost ~100 ms of CPU per
  host (bench/engine_overhead.py), so the worker already passed it through;
- with everything of ours passed through, the sandbox guarded nothing of ours at run time
  (passed-through modules see the real stdlib), yet it still cost ~30% of the worker's event
  loop: every payload the codec encodes or decodes asks the workflow for its serialization
  context through a string the sandbox compiles and `exec`s (temporalio 1.35), and every
  activation enters and leaves its import hooks.
Running without it is safe because:
- the engine's code does no I/O and starts nothing when imported: its modules import only the
  pure stdlib (typing, dataclasses, datetime types, asyncio, json, math), temporalio, pydantic,
  pitstop; runbooks are data (YAML, Jinja in Jinja's own sandbox), never Python;
- it keeps no mutable state at module level: a run's state lives in its workflow instance,
  module globals are constants (tests/unit/test_workflow_passthrough.py checks both);
- its determinism is still checked in the full sandbox: the replayer (`engine=False`, the
  default) re-imports it under every restriction for each recorded history, and the same
  test refuses clocks, randomness, I/O and threads in its source.
"""

from __future__ import annotations

from temporalio.worker import UnsandboxedWorkflowRunner, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

PASSTHROUGH_MODULES = ("pitstop", "pydantic", "pydantic_core", "jinja2", "markupsafe", "annotated_types")
# The engine's workflow code: imported once by the worker (unsandboxed), re-imported under
# every restriction by the replayer.
ENGINE_MODULES = ("workflows",)


def workflow_runner(*, engine: bool = False) -> WorkflowRunner:
    """The replayer's full sandbox; `engine=True`: the worker's runner, without it (see above)."""
    if engine:
        return UnsandboxedWorkflowRunner()
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )
