"""The JSON Schema is valid and accepts every shipped runbook, task file and inventory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from pitstop.cli.app import app
from pitstop.modules import module_names
from pitstop.runbook import inventory_json_schema, runbook_json_schema
from pitstop.runbook._yaml import load_yaml
from pitstop.runbook.schema import task_file_json_schema

REPO = Path(__file__).resolve().parents[2]


def _shipped() -> list[Path]:
    root = REPO / "runbooks"
    return [
        p
        for p in sorted(root.rglob("*.yaml"))
        # Compatibility data, schedules, simulator scenarios, Kubernetes manifests and the
        # Prometheus alert pack (its rules and promtool tests) are other formats.
        if p.relative_to(root).parts[0] not in ("compat", "scenarios", "manifests", "monitoring")
        and not p.name.startswith("schedules")
    ]


def test_schemas_are_valid_draft_2020_12() -> None:
    Draft202012Validator.check_schema(runbook_json_schema())
    Draft202012Validator.check_schema(inventory_json_schema())
    Draft202012Validator.check_schema(task_file_json_schema())


def test_runbook_schema_lists_every_module_with_templated_args() -> None:
    task = runbook_json_schema()["$defs"]["Task"]["properties"]
    for name in module_names():
        assert name in task
    validator = Draft202012Validator(task_file_json_schema())
    assert validator.is_valid([{"pause": {"seconds": "{{ n }}"}}])
    assert validator.is_valid([{"debug": "free form"}])
    assert not validator.is_valid([{"pause": {"seconds": "many"}}])
    assert not validator.is_valid([{"debgu": "x"}])


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_file_validates_against_the_schema(path: Path) -> None:
    data: Any = load_yaml(path).data
    if isinstance(data, list):
        schema = task_file_json_schema()
    elif isinstance(data, dict) and "all" in data:
        schema = inventory_json_schema()
    else:
        schema = runbook_json_schema()
    errors = sorted(Draft202012Validator(schema).iter_errors(data), key=str)
    assert not errors, errors[0]


def test_shipped_files_exist() -> None:
    assert len(_shipped()) >= 3


@pytest.mark.parametrize(("kind", "title"), [([], "pitstop runbook"), (["inventory"], "pitstop inventory")])
def test_schema_command_prints_json(kind: list[str], title: str) -> None:
    result = CliRunner().invoke(app, ["schema", *kind])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["title"] == title
