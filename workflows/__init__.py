"""Workflow definitions: deterministic code only (no I/O, no wall clock, no randomness).

`WORKFLOWS` is the registry `python worker.py` serves; add each workflow class here.
"""

from __future__ import annotations

from workflows.host import HostWorkflow
from workflows.runbook import RunbookWorkflow

WORKFLOWS: list[type] = [RunbookWorkflow, HostWorkflow]
