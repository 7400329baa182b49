"""The runbook language: load and validate runbooks and inventories, render expressions.

Public API: `load_runbook`, `load_inventory`, `RunbookError`, the models, and the
templating functions the engine calls at run time.
"""

from pitstop.runbook.durations import parse_duration
from pitstop.runbook.errors import RunbookError
from pitstop.runbook.inventory import ClusterConfig, FromNodes, Group, Inventory, SSHConfig, load_inventory
from pitstop.runbook.models import (
    Gate,
    Observe,
    Rolling,
    Runbook,
    Serial,
    SourcePos,
    Stage,
    Task,
)
from pitstop.runbook.patterns import PatternError
from pitstop.runbook.schema import inventory_json_schema, runbook_json_schema
from pitstop.runbook.templating import (
    TemplateError,
    check_syntax,
    evaluate,
    evaluate_bool,
    is_template,
    render,
    version_compare,
)
from pitstop.runbook.validate import load_any, load_runbook

__all__ = [
    "ClusterConfig",
    "FromNodes",
    "Gate",
    "Group",
    "Inventory",
    "Observe",
    "PatternError",
    "Rolling",
    "Runbook",
    "RunbookError",
    "SSHConfig",
    "Serial",
    "SourcePos",
    "Stage",
    "Task",
    "TemplateError",
    "check_syntax",
    "evaluate",
    "evaluate_bool",
    "inventory_json_schema",
    "is_template",
    "load_any",
    "load_inventory",
    "load_runbook",
    "parse_duration",
    "render",
    "runbook_json_schema",
    "version_compare",
]
