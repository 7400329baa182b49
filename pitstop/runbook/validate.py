"""Runbook loading: YAML shape -> validated `Runbook`, with every cross-reference checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pitstop.modules import get_module
from pitstop.runbook import eviction
from pitstop.runbook._checks import (
    check_inline_secrets,
    check_template_syntax,
    require_mapping,
    type_name,
    validate_model,
)
from pitstop.runbook._yaml import Node, YamlDoc, load_yaml
from pitstop.runbook.errors import RunbookError, suggest
from pitstop.runbook.inventory import Inventory
from pitstop.runbook.models import (
    Gate,
    Observe,
    Rolling,
    Runbook,
    SourcePos,
    Stage,
    Task,
    WaveCanary,
    Waves,
)
from pitstop.runbook.patterns import PatternError
from pitstop.runbook.tasks import TaskParser, check_expressions, parse_gate
from pitstop.runbook.templating import probing_constants

RUNBOOK_KEYS = ["name", "description", "vars", "approvers", "stages", "handlers", "rollback", "cluster"]
STAGE_KEYS = [
    "name",
    "hosts",
    "serial",
    "rolling",
    "max_fail_percentage",
    "any_errors_fatal",
    "gate",
    "tasks",
    "handlers",
    "rollback_when",
    "rollback",
    "rollback_run_once",
    "observe",
    "waves",
    "vars",
    "tags",
]
_RESERVED_STAGE_NAMES = frozenset({"handlers", "rollback"})


def load_runbook(
    path: str | Path,
    inventory: Inventory | None = None,
    *,
    confine_to: Path | None = None,
    imported: set[Path] | None = None,
) -> Runbook:
    """Load and validate a runbook; with an inventory, stage host patterns are resolved too.
    Expressions that use no variable are evaluated (bounded) and refused if they fail.
    With `confine_to` (a real path), task files imported from outside it are refused.
    `imported` receives the real path of every task file the loader read (a bundle sends them)."""
    with probing_constants():
        return parse_runbook(load_yaml(path), inventory, confine_to=confine_to, imported=imported)


def parse_runbook(
    doc: YamlDoc,
    inventory: Inventory | None = None,
    *,
    confine_to: Path | None = None,
    imported: set[Path] | None = None,
) -> Runbook:
    root = doc.root()
    raw = require_mapping(root, "a runbook")
    # In a one-stage runbook, keys both levels know (vars, handlers, rollback) stay run-level.
    single_stage_keys = [k for k in STAGE_KEYS if k not in RUNBOOK_KEYS]
    root.check_keys([*RUNBOOK_KEYS, *single_stage_keys], "runbook")
    check_template_syntax(root)
    parser = TaskParser(root=confine_to)

    stage_nodes: list[tuple[Node, dict[str, Any]]] = []
    if "stages" in raw:
        for key in single_stage_keys:
            if key in raw:
                raise root.child(key).error(
                    f"'{key}' belongs in a stage: with 'stages', put it under the stage", at_key=True
                )
        stages_node = root.child("stages")
        if not isinstance(raw["stages"], list) or not raw["stages"]:
            raise stages_node.error("'stages' must be a non-empty list of stages")
        for index in range(len(raw["stages"])):
            node = stages_node.child(index)
            stage_raw = require_mapping(node, "a stage")
            node.check_keys(STAGE_KEYS, "stage")
            stage_nodes.append((node, stage_raw))
    else:
        if "tasks" not in raw:
            raise root.error("a runbook needs 'stages', or 'hosts' and 'tasks' for a single stage")
        stage_raw = {k: v for k, v in raw.items() if k in single_stage_keys}
        stage_raw["name"] = raw.get("name") or Path(doc.path).stem
        stage_nodes.append((root, stage_raw))

    name = raw.get("name") or Path(doc.path).stem
    for key in ("vars",):
        if key in raw and raw[key] is not None:
            require_mapping(root.child(key), "vars")
            check_inline_secrets(root.child(key))

    stages: list[Stage] = []
    seen: dict[str, Node] = {}
    for index, (node, stage_raw) in enumerate(stage_nodes):
        stage = _parse_stage(node, stage_raw, index, parser)
        if stage.name in seen:
            raise node.child("name").error(f"duplicate stage name '{stage.name}'")
        seen[stage.name] = node
        stages.append(stage)

    data = {k: v for k, v in raw.items() if k in RUNBOOK_KEYS}
    data["name"] = name
    data["stages"] = stages
    data["handlers"] = (
        parser.parse_list(root.child("handlers"), "handlers", "handlers") if "handlers" in raw else []
    )
    data["rollback"] = (
        parser.parse_list(root.child("rollback"), "rollback", "rollback") if "rollback" in raw else []
    )
    data["path"] = doc.path
    if data.get("description") is None:
        data.pop("description", None)
    runbook = validate_model(Runbook, data, root, "runbook")
    if imported is not None:
        imported.update(parser.imported_files())
    _check_cross_references(runbook, parser, stage_nodes)
    _check_waves(runbook, stage_nodes)
    eviction.check(runbook, parser.eviction_bypasses)
    if inventory is not None:
        for stage, (node, _) in zip(runbook.stages, stage_nodes, strict=True):
            _resolve_hosts(stage, node, inventory)
    return runbook


def _parse_stage(node: Node, raw: dict[str, Any], index: int, parser: TaskParser) -> Stage:
    name = raw.get("name")
    if name is None:
        name = f"stage-{index + 1}"
    if not isinstance(name, str) or not name:
        raise node.child("name").error("a stage name must be a non-empty string")
    if name in _RESERVED_STAGE_NAMES:
        raise node.child("name").error(f"'{name}' is reserved and cannot name a stage")
    if "hosts" not in raw:
        raise node.error(f"stage '{name}' needs 'hosts' (an inventory group, host or pattern)", key="hosts")
    if "serial" in raw and "rolling" in raw:
        raise node.child("rolling").error(
            f"stage '{name}' states both 'serial' and 'rolling'; choose one", at_key=True
        )
    if "rollback_when" in raw:
        check_expressions(node.child("rollback_when"))
    if "vars" in raw and raw["vars"] is not None:
        require_mapping(node.child("vars"), "stage vars")
        check_inline_secrets(node.child("vars"))
    data = {k: v for k, v in raw.items() if k in STAGE_KEYS}
    data["name"] = name
    if isinstance(raw.get("rolling"), dict):
        node.child("rolling").check_keys(list(Rolling.model_fields), "rolling")
    if "gate" in raw:
        gate = parse_gate(node.child("gate"))
        parser.gates.append((gate, node.child("gate")))
        data["gate"] = gate
    for key in ("tasks", "handlers", "rollback"):
        if key in raw:
            prefix = name if key == "tasks" else f"{name}/{key}"
            data[key] = parser.parse_list(node.child(key), prefix, key)
    if "observe" in raw:
        data["observe"] = _parse_observe(node.child("observe"), name, parser)
    if "waves" in raw:
        data["waves"] = _parse_waves(node.child("waves"), name, parser)
    line, column = node.pos()
    data["source"] = SourcePos(path=node.path, line=line, column=column)
    stage = validate_model(Stage, data, node, f"stage '{name}'")
    _check_disruptive(stage, node, raw)
    return stage


def _parse_observe(node: Node, stage_name: str, parser: TaskParser) -> Observe:
    raw = require_mapping(node, "observe")
    node.check_keys(list(Observe.model_fields), "observe")
    data = dict(raw)
    if "checks" in raw:
        data["checks"] = parser.parse_list(node.child("checks"), f"{stage_name}/observe", "checks")
    return validate_model(Observe, data, node, "observe")


def _parse_waves(node: Node, stage_name: str, parser: TaskParser) -> Waves:
    raw = require_mapping(node, "waves")
    node.check_keys(list(Waves.model_fields), "waves")
    data = dict(raw)
    if "gate" in raw:
        gate = parse_gate(node.child("gate"))
        if gate.before or gate.after:
            at = node.child("gate").child("before" if gate.before else "after")
            raise at.error(
                f"stage '{stage_name}': a wave's gate opens before every wave after the first; "
                "'before'/'after' do not apply (use the stage's own gate for the first wave)",
                at_key=True,
            )
        parser.gates.append((gate, node.child("gate")))
        data["gate"] = gate
    if "observe" in raw:
        data["observe"] = _parse_observe(node.child("observe"), f"{stage_name}/wave/observe", parser)
    if "checks" in raw:
        data["checks"] = parser.parse_list(node.child("checks"), f"{stage_name}/wave/checks", "checks")
    if isinstance(raw.get("canary"), dict):
        node.child("canary").check_keys(list(WaveCanary.model_fields), "waves.canary")
    return validate_model(Waves, data, node, "waves")


def _check_waves(runbook: Runbook, stage_nodes: list[tuple[Node, dict[str, Any]]]) -> None:
    """A wave's canary stage is an earlier stage of the same runbook."""
    earlier: list[str] = []
    for stage, (node, _) in zip(runbook.stages, stage_nodes, strict=True):
        canary = stage.waves.canary if stage.waves else None
        if canary is not None and canary.stage not in earlier:
            at = node.child("waves").child("canary").child("stage")
            known = [s.name for s in runbook.stages]
            where = (
                "this stage"
                if canary.stage == stage.name
                else "a later stage"
                if canary.stage in known
                else "not a stage of this runbook"
            )
            raise at.error(
                f"stage '{stage.name}': waves.canary.stage '{canary.stage}' is {where}; "
                "name a stage that runs before this one",
                suggestion=suggest(canary.stage, earlier),
            )
        earlier.append(stage.name)


def _check_disruptive(stage: Stage, node: Node, raw: dict[str, Any]) -> None:
    if stage.serial is not None or stage.rolling is not None:
        return
    for top in (*stage.tasks, *stage.handlers):
        for task in top.walk():
            spec = get_module(task.module) if task.module else None
            if spec is not None and spec.disruptive:
                at = node.child("hosts") if "hosts" in raw else node
                raise at.error(
                    f"stage '{stage.name}' runs disruptive module '{spec.name}' "
                    f"({task.source.path}:{task.source.line}) but states neither 'serial' nor 'rolling'",
                    at_key=True,
                )


def _check_cross_references(
    runbook: Runbook, parser: TaskParser, stage_nodes: list[tuple[Node, dict[str, Any]]]
) -> None:
    for gate, node in parser.gates:
        _check_gate(runbook, gate, node)
    handler_names = {t.name for t in runbook.handlers if t.name}
    for stage in runbook.stages:
        handler_names.update(t.name for t in stage.handlers if t.name)
    for handler, node in parser.notifies:
        if handler not in handler_names:
            raise node.error(
                f"notify names handler '{handler}', which is not defined in 'handlers'",
                suggestion=suggest(handler, handler_names),
            )


def _check_gate(runbook: Runbook, gate: Gate, node: Node) -> None:
    if gate.on_timeout == "escalate" and not gate.escalate_to:
        at = node.child("on_timeout")
        raise at.error("on_timeout: escalate needs 'escalate_to' (who to notify when the gate times out)")
    users = runbook.expand_approvers(gate.approvers)
    if gate.quorum > len(users):
        at = node.child("quorum") if node.has("quorum") else node
        raise at.error(
            f"gate quorum {gate.quorum} exceeds the {len(users)} distinct approver(s) "
            f"({', '.join(sorted(users))}) its approvers expand to"
        )


def _resolve_hosts(stage: Stage, node: Node, inventory: Inventory) -> None:
    at = node.child("hosts")
    if stage.hosts.strip() in ("localhost", "127.0.0.1") and "localhost" not in inventory.hosts:
        return  # implicit localhost, as in Ansible: the worker itself
    try:
        inventory.resolve(stage.hosts)
    except PatternError as exc:
        raise at.error(str(exc), suggestion=exc.suggestion) from None


def validate_task_list(doc: YamlDoc) -> list[Task]:
    """Validate a task file (a YAML list of tasks) on its own."""
    check_template_syntax(doc.root())
    if not isinstance(doc.data, list):
        raise doc.root().error(f"a task file must be a YAML list of tasks, got {type_name(doc.data)}")
    return TaskParser().parse_list(doc.root(), "tasks")


def load_any(path: str | Path, inventory: Inventory | None = None) -> Runbook | Inventory | list[Task]:
    """Validate a runbook, inventory (top-level `all:`) or task file (top-level list)."""
    from pitstop.runbook.inventory import parse_inventory

    doc = load_yaml(path)
    with probing_constants():
        if isinstance(doc.data, list):
            return validate_task_list(doc)
        if isinstance(doc.data, dict) and "all" in doc.data:
            return parse_inventory(doc)
        return parse_runbook(doc, inventory)


__all__ = ["RunbookError", "load_any", "load_runbook", "parse_runbook"]
