"""The workflow sandbox configuration shared by the worker and the replayer.

Modules passed through are loaded once, outside the sandbox: pitstop's own pure modules
(models, templating, rules), pydantic, and Jinja2 with MarkupSafe. Jinja2 imports parts of
itself lazily and guards its template cache with a lock; re-importing it inside every
workflow run would be slow and trips the sandbox's restriction on `threading.Lock`.
Everything passed through is deterministic: no clock, randomness or I/O is reachable
from workflow code through it.

The worker also passes through the engine's own workflow code, the `workflows` package
(`workflow_runner(engine=True)`). Otherwise the sandbox re-imports it for every new workflow
instance: 12 modules, ~100 ms of CPU for each host of a run, more than the host's tasks cost
Temporal (bench/engine_overhead.py). It is safe because:
- importing it does no I/O and starts nothing: its modules import only the pure stdlib
  (typing, dataclasses, datetime types, asyncio, json, math), temporalio, pydantic, pitstop;
- it keeps no mutable state at module level: a run's state lives in its workflow instance,
  module globals are constants (tests/unit/test_workflow_passthrough.py checks both);
- its determinism is still checked in the full sandbox: the replayer (`engine=False`, the
  default) re-imports it under every restriction for each recorded history, and the same
  test refuses clocks, randomness, I/O and threads in its source.
"""

from __future__ import annotations

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

PASSTHROUGH_MODULES = ("pitstop", "pydantic", "pydantic_core", "jinja2", "markupsafe", "annotated_types")
# The engine's workflow code, passed through by the worker only (see above).
ENGINE_MODULES = ("workflows",)


def workflow_runner(*, engine: bool = False) -> SandboxedWorkflowRunner:
    """The sandbox; `engine=True` passes the `workflows` package through too (the worker)."""
    modules = (*PASSTHROUGH_MODULES, *ENGINE_MODULES) if engine else PASSTHROUGH_MODULES
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*modules)
    )
