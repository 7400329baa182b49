"""JSON Schema of runbooks and inventories, for editors (`pitstop schema`).

Sub-objects (gate, rolling, cluster, module args) come from the pydantic models; the task and
stage shapes are written here because their YAML form (one module key per task) is not the
model's form.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from pitstop.modules import all_modules
from pitstop.runbook.durations import DURATION_JSON_SCHEMA, TEMPLATED_DURATION_JSON_SCHEMA
from pitstop.runbook.inventory import ClusterConfig, FromNodes
from pitstop.runbook.models import COUNT_OR_PERCENT_SCHEMA, Gate, Rolling

_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_REF = "#/$defs/{model}"
TEMPLATE_STRING: dict[str, Any] = {
    "type": "string",
    "pattern": r"\{[{%]",
    "description": "Jinja template, rendered at run time.",
}
_STRING_OR_LIST: dict[str, Any] = {
    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
}
_EXPRESSIONS: dict[str, Any] = {
    "anyOf": [
        {"type": "string"},
        {"type": "boolean"},
        {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "boolean"}]}},
    ],
    "description": "Jinja expression(s), without braces as in Ansible.",
}
_TASKS: dict[str, Any] = {"type": "array", "items": {"$ref": "#/$defs/Task"}}


def _model_schema(model: type[BaseModel], defs: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template=_REF)
    defs.update(schema.pop("$defs", {}))
    return schema


def _templated(schema: dict[str, Any]) -> dict[str, Any]:
    """Each argument, and each value nested in a mapping or list argument, also accepts a
    template string (rendered at run time): `metrics: {busbw: "{{ nccl.avg }}"}`."""
    out = copy.deepcopy(schema)
    for name, prop in out.get("properties", {}).items():
        out["properties"][name] = {"anyOf": [_templated(prop), TEMPLATE_STRING]}
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = {"anyOf": [_templated(out["additionalProperties"]), TEMPLATE_STRING]}
    if isinstance(out.get("items"), dict):
        out["items"] = {"anyOf": [_templated(out["items"]), TEMPLATE_STRING]}
    if isinstance(out.get("anyOf"), list):
        out["anyOf"] = [_templated(option) if isinstance(option, dict) else option for option in out["anyOf"]]
    return out


def _module_properties(defs: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    # Models nested in module arguments (e.g. `canary: {hosts, scope}`) accept templates in
    # their fields too, as the arguments themselves do.
    nested: dict[str, Any] = {}
    for spec in all_modules():
        args = _templated(_model_schema(spec.args_model, nested))
        options: list[dict[str, Any]] = [args, {"type": "null"}]
        if spec.free_form_arg is not None:
            options.append({"type": "string"})
        props[spec.name] = {"description": spec.summary, "anyOf": options}
    defs.update({name: _templated(schema) for name, schema in nested.items()})
    return props


def _task_schema(defs: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "name": {"type": "string"},
        "when": _EXPRESSIONS,
        "register": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
        "loop": {"description": "A list, or a template giving one."},
        "loop_control": {
            "type": "object",
            "properties": {"loop_var": {"type": "string"}},
            "additionalProperties": False,
        },
        "retries": {"type": "integer", "minimum": 0},
        "delay": DURATION_JSON_SCHEMA,
        "until": {"type": "string"},
        "timeout": DURATION_JSON_SCHEMA,
        "ignore_errors": {"type": "boolean"},
        "failed_when": _EXPRESSIONS,
        "changed_when": _EXPRESSIONS,
        "notify": _STRING_OR_LIST,
        "tags": _STRING_OR_LIST,
        "run_once": {"type": "boolean"},
        "delegate_to": {"type": "string"},
        "delegate_facts": {"type": "boolean"},
        "check_mode": {"type": ["boolean", "null"]},
        "block": _TASKS,
        "rescue": _TASKS,
        "always": _TASKS,
        "gate": {"$ref": "#/$defs/Gate"},
        "vars": {"type": "object"},
        "import_tasks": {"type": "string", "description": "Task file, relative to this file."},
    }
    properties.update(_module_properties(defs))
    return {"type": "object", "properties": properties, "additionalProperties": False}


_OBSERVE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "duration": TEMPLATED_DURATION_JSON_SCHEMA,
        "interval": DURATION_JSON_SCHEMA,
        "checks": _TASKS,
    },
    "required": ["duration"],
    "additionalProperties": False,
}


def _stage_properties() -> dict[str, Any]:
    return {
        "hosts": {"type": "string", "description": "Inventory group, host or pattern."},
        "serial": {
            "anyOf": [
                COUNT_OR_PERCENT_SCHEMA,
                {"type": "array", "items": COUNT_OR_PERCENT_SCHEMA, "minItems": 1},
            ]
        },
        "rolling": {"$ref": "#/$defs/Rolling"},
        "max_fail_percentage": {"type": "number", "minimum": 0, "maximum": 100},
        "any_errors_fatal": {"type": "boolean"},
        "gate": {"$ref": "#/$defs/Gate"},
        "tasks": _TASKS,
        "handlers": _TASKS,
        "rollback_when": _EXPRESSIONS,
        "rollback": _TASKS,
        "rollback_run_once": {"type": "boolean"},
        "observe": _OBSERVE,
        "waves": {
            "type": "object",
            "description": "The stage's hosts one wave (e.g. one failure domain) at a time.",
            "properties": {
                "by": {"type": "string", "description": "Expression giving a host's wave."},
                "order": _STRING_OR_LIST,
                "gate": {"$ref": "#/$defs/Gate"},
                "observe": _OBSERVE,
                "canary": {
                    "type": "object",
                    "properties": {"stage": {"type": "string"}, "cover": _STRING_OR_LIST},
                    "required": ["stage", "cover"],
                    "additionalProperties": False,
                },
                "checks": _TASKS,
            },
            "additionalProperties": False,
        },
        "vars": {"type": "object"},
        "tags": _STRING_OR_LIST,
    }


def runbook_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a runbook file, module arguments included."""
    defs: dict[str, Any] = {}
    defs["Gate"] = _model_schema(Gate, defs)
    defs["Rolling"] = _model_schema(Rolling, defs)
    defs["Task"] = _task_schema(defs)
    stage_props = _stage_properties()
    defs["Stage"] = {
        "type": "object",
        "properties": {"name": {"type": "string"}, **stage_props},
        "required": ["hosts"],
        "additionalProperties": False,
    }
    return {
        "$schema": _DIALECT,
        "title": "pitstop runbook",
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "description": {"type": "string"},
            "vars": {"type": "object"},
            "approvers": {"type": "object", "additionalProperties": _STRING_OR_LIST},
            "stages": {"type": "array", "items": {"$ref": "#/$defs/Stage"}, "minItems": 1},
            "handlers": _TASKS,
            "rollback": _TASKS,
            "cluster": {"type": "string"},
            # A one-stage runbook may write the stage's keys at top level.
            **stage_props,
        },
        "additionalProperties": False,
        "$defs": defs,
    }


def task_file_json_schema() -> dict[str, Any]:
    """JSON Schema of a task file (a YAML list of tasks, used with import_tasks)."""
    schema = runbook_json_schema()
    return {"$schema": _DIALECT, "title": "pitstop task file", **_TASKS, "$defs": schema["$defs"]}


def inventory_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of an inventory file."""
    defs: dict[str, Any] = {}
    defs["ClusterConfig"] = _model_schema(ClusterConfig, defs)
    defs["FromNodes"] = _model_schema(FromNodes, defs)
    defs["Group"] = {
        "type": ["object", "null"],
        "properties": {
            "hosts": {
                "type": ["object", "null"],
                "additionalProperties": {"type": ["object", "null"]},
                "description": "Host names, each with its host vars (or nothing).",
            },
            "vars": {"type": ["object", "null"]},
            "children": {"type": ["object", "null"], "additionalProperties": {"$ref": "#/$defs/Group"}},
            "from_nodes": {"$ref": "#/$defs/FromNodes"},
        },
        "additionalProperties": False,
    }
    return {
        "$schema": _DIALECT,
        "title": "pitstop inventory",
        "type": "object",
        "properties": {"all": {"$ref": "#/$defs/Group"}, "cluster": {"$ref": "#/$defs/ClusterConfig"}},
        "required": ["all"],
        "additionalProperties": False,
        "$defs": defs,
    }
