"""The workflow sandbox configuration shared by the worker and the replayer.

Modules passed through are loaded once, outside the sandbox: pitstop's own pure modules
(models, templating, rules), pydantic, and Jinja2 with MarkupSafe. Jinja2 imports parts of
itself lazily and guards its template cache with a lock; re-importing it inside every
workflow run would be slow and trips the sandbox's restriction on `threading.Lock`.
Everything passed through is deterministic: no clock, randomness or I/O is reachable
from workflow code through it.
"""

from __future__ import annotations

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

PASSTHROUGH_MODULES = ("pitstop", "pydantic", "pydantic_core", "jinja2", "markupsafe", "annotated_types")


def workflow_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )
