"""Task lists: Ansible's parsing rule (keywords vs one module key), module args, imports."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pitstop.modules import ModuleSpec, get_module, module_names
from pitstop.runbook import eviction
from pitstop.runbook._checks import (
    check_inline_secrets,
    check_secret_ref_fields,
    check_template_syntax,
    field_keys,
    require_mapping,
    templated_at,
    type_name,
    validate_model,
)
from pitstop.runbook._yaml import Node, YamlDoc, load_yaml
from pitstop.runbook.errors import RunbookError, suggest
from pitstop.runbook.keyword_types import check_keyword_types
from pitstop.runbook.models import Gate, SourcePos, Task
from pitstop.runbook.templating import TemplateError, check_expression

TASK_KEYWORDS: frozenset[str] = frozenset(
    {
        "name",
        "when",
        "register",
        "loop",
        "loop_control",
        "retries",
        "delay",
        "until",
        "timeout",
        "ignore_errors",
        "failed_when",
        "changed_when",
        "notify",
        "tags",
        "run_once",
        "delegate_to",
        "delegate_facts",
        "check_mode",
        "block",
        "rescue",
        "always",
        "gate",
        "vars",
        "import_tasks",
    }
)
_EXPRESSION_KEYS = ("when", "until", "failed_when", "changed_when")
# Tasks one runbook may hold once every import_tasks is expanded. Imports multiply (a file
# imported twice that imports another twice...), and the whole plan travels in the run's
# history: the largest shipped runbook has about a hundred and fifty.
MAX_RUNBOOK_TASKS = 2000
_IMPORT_KEYS = frozenset({"import_tasks", "name", "when", "tags", "vars"})
_GATE_KEYS = field_keys(Gate)


def check_expressions(node: Node) -> None:
    """`when`-style values (a string or a list of strings) must compile as expressions."""
    value = node.value
    items = (
        [(node, value)] if not isinstance(value, list) else [(node.child(i), v) for i, v in enumerate(value)]
    )
    for item_node, item in items:
        if isinstance(item, str):
            try:
                check_expression(item)
            except TemplateError as exc:
                raise item_node.error(str(exc)) from None


def parse_gate(node: Node) -> Gate:
    if isinstance(node.value, dict):
        node.check_keys(_GATE_KEYS, "gate")
    return validate_model(Gate, require_mapping(node, "gate"), node, "gate")


@dataclass
class _Inherited:
    """What an `import_tasks` passes down to every imported task."""

    when: list[Any] = field(default_factory=list)
    tags: list[Any] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskParser:
    """Parses task lists of one runbook; remembers what later checks need to point at."""

    # (gate, node of the gate mapping) for the approver/quorum check.
    gates: list[tuple[Gate, Node]] = field(default_factory=list)
    # (handler name, node of the name) for the notify check.
    notifies: list[tuple[str, Node]] = field(default_factory=list)
    # Position of each `kube.drain` task with `disable_eviction: true` -> the value's node, for
    # the stage rule of `pitstop.runbook.eviction`.
    eviction_bypasses: dict[SourcePos, Node] = field(default_factory=dict)
    # On a worker: the directory task files must come from (the runbook directory or the run's
    # bundle); an import resolving outside it is refused before the file is read.
    root: Path | None = None
    _import_stack: list[Path] = field(default_factory=list)
    # Display path of each loaded task file -> its real path, to resolve nested imports.
    _real_paths: dict[str, Path] = field(default_factory=dict)
    # Each imported file is read once, however often it is imported.
    _docs: dict[Path, YamlDoc] = field(default_factory=dict)
    _task_count: int = 0

    def imported_files(self) -> set[Path]:
        """The real path of every task file read through `import_tasks` (also those that only
        import others)."""
        return set(self._docs)

    def parse_list(self, node: Node, prefix: str, what: str = "tasks") -> list[Task]:
        value = node.value
        if value is None:
            return []
        if not isinstance(value, list):
            raise node.error(f"{what} must be a list of tasks, got {type_name(value)}")
        return self._parse_items(node, prefix, _Inherited())

    def _parse_items(self, node: Node, prefix: str, inherited: _Inherited) -> list[Task]:
        tasks: list[Task] = []
        for index in range(len(node.value)):
            item = node.child(index)
            if isinstance(item.value, dict) and "import_tasks" in item.value:
                for task in self._import(item, inherited):
                    tasks.append(self._renumber(task, f"{prefix}/{len(tasks)}"))
            else:
                tasks.append(self._parse_task(item, f"{prefix}/{len(tasks)}", inherited))
        return tasks

    def _renumber(self, task: Task, task_id: str) -> Task:
        # Imported tasks get ids in the including list, so ids stay unique in the runbook.
        def nested(tasks: list[Task] | None, label: str) -> list[Task] | None:
            if tasks is None:
                return None
            return [self._renumber(t, f"{task_id}/{label}/{i}") for i, t in enumerate(tasks)]

        return task.model_copy(
            update={
                "task_id": task_id,
                "block": nested(task.block, "block"),
                "rescue": nested(task.rescue, "rescue") or [],
                "always": nested(task.always, "always") or [],
            }
        )

    def _import(self, node: Node, inherited: _Inherited) -> list[Task]:
        raw = node.value
        for key in raw:
            if key not in _IMPORT_KEYS:
                raise node.child(key).error(
                    f"'{key}' cannot be used with import_tasks (only {', '.join(sorted(_IMPORT_KEYS))})",
                    at_key=True,
                )
        check_keyword_types(node, raw)
        target_node = node.child("import_tasks")
        target = raw["import_tasks"]
        if not isinstance(target, str) or not target:
            raise target_node.error("import_tasks needs a file path")
        including = self._real_paths.get(node.path) or Path(node.path).resolve()
        path = (including.parent / target).resolve()
        stack = self._import_stack or [including]
        if self.root is not None and not (path == self.root or self.root in path.parents):
            raise target_node.error(
                f"import_tasks: {target} is outside the runbook directory; a worker reads task files "
                "only from there (or from the run's bundle)"
            )
        if path in stack:
            chain = [*stack[stack.index(path) :], path]
            raise target_node.error("import cycle: " + " -> ".join(self._show(p) for p in chain))
        if not path.is_file():
            raise target_node.error(f"imported file not found: {target}")
        doc = self._docs.get(path)
        if doc is None:
            doc = load_yaml(path, display_path=self._show(path))
            self._docs[path] = doc
            check_template_syntax(doc.root())
        self._real_paths[doc.path] = path
        if not isinstance(doc.data, list):
            raise doc.root().error(
                f"a file used with import_tasks must be a YAML list of tasks, got {type_name(doc.data)}"
            )
        if "when" in raw:
            check_expressions(node.child("when"))
        if "vars" in raw:
            require_mapping(node.child("vars"), "vars")
            check_inline_secrets(node.child("vars"))
        added = _Inherited(
            when=[*inherited.when, *_as_list(raw.get("when"))],
            tags=[*inherited.tags, *_as_list(raw.get("tags"))],
            vars={**inherited.vars, **(raw.get("vars") or {})},
        )
        previous = self._import_stack
        self._import_stack = [*stack, path]
        try:
            return self._parse_items(doc.root(), "import", added)
        finally:
            self._import_stack = previous

    @staticmethod
    def _show(path: Path) -> str:
        # Paths as the user can open them from where pitstop runs.
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return str(path)

    def _parse_task(self, node: Node, task_id: str, inherited: _Inherited) -> Task:
        raw = require_mapping(node, "a task")
        self._task_count += 1
        if self._task_count > MAX_RUNBOOK_TASKS:
            raise node.error(
                f"the runbook holds more than {MAX_RUNBOOK_TASKS} tasks once import_tasks are "
                "expanded (MAX_RUNBOOK_TASKS); import fewer files or fewer times"
            )
        modules = self._task_modules(node, raw)
        data = self._task_data(node, raw, task_id, inherited, modules)
        task = validate_model(Task, data, node, "task")
        if eviction.bypasses(task):
            self.eviction_bypasses[task.source] = node.child(task.module or "", eviction.ARG)
        notify_node = node.child("notify")
        for index, handler in enumerate(task.notify):
            self.notifies.append(
                (handler, notify_node.child(index) if notify_node.has(index) else notify_node)
            )
        return task

    @staticmethod
    def _task_modules(node: Node, raw: dict[str, Any]) -> list[str]:
        """The task's module (none for a block or gate), once its keys say what kind of task it is;
        its expressions and vars are checked here too, before anything is built from them."""
        modules: list[str] = []
        for key in raw:
            if key in TASK_KEYWORDS:
                continue
            if get_module(key) is not None:
                modules.append(key)
                continue
            raise node.child(key).error(
                f"unknown task keyword or module '{key}'",
                at_key=True,
                suggestion=suggest(key, [*TASK_KEYWORDS, *module_names()]),
            )
        # Before anything reads them: `when: 5` must not reach the expression checks below.
        check_keyword_types(node, raw)
        if len(modules) > 1:
            raise node.child(modules[1]).error(
                f"a task runs exactly one module, but this one names '{modules[0]}' and '{modules[1]}'",
                at_key=True,
            )
        kinds = [k for k in raw if k in ("block", "gate") or k in modules]
        if not kinds:
            raise node.error(
                "task has no module: give exactly one of a module, 'block', 'gate' or 'import_tasks'"
            )
        if len(kinds) > 1:
            raise node.child(kinds[1]).error(
                f"a task has exactly one of a module, 'block' or 'gate', but this one has '{kinds[0]}' "
                f"and '{kinds[1]}'",
                at_key=True,
            )
        for key in ("rescue", "always"):
            if key in raw and "block" not in raw:
                raise node.child(key).error(f"'{key}' needs a 'block' in the same task", at_key=True)
        if raw.get("delegate_facts") and (modules != ["set_fact"] or "delegate_to" not in raw):
            raise node.child("delegate_facts").error(
                "'delegate_facts' gives the facts of a `set_fact` to its `delegate_to` host: "
                "it needs both in the same task",
                at_key=True,
            )
        for key in _EXPRESSION_KEYS:
            if key in raw:
                check_expressions(node.child(key))
        if "vars" in raw:
            require_mapping(node.child("vars"), "task vars")
            check_inline_secrets(node.child("vars"))
        return modules

    def _task_data(
        self, node: Node, raw: dict[str, Any], task_id: str, inherited: _Inherited, modules: list[str]
    ) -> dict[str, Any]:
        """The fields of the Task model: keywords, what the task inherits from its blocks, the
        module's validated args, nested tasks and the gate, and where it is written."""
        data: dict[str, Any] = {
            k: v
            for k, v in raw.items()
            if k in TASK_KEYWORDS and k not in ("block", "rescue", "always", "gate")
        }
        data.pop("loop_control", None)
        if "loop_control" in raw:
            control_node = node.child("loop_control")
            control = require_mapping(control_node, "loop_control")
            control_node.check_keys(["loop_var"], "loop_control")
            if "loop_var" in control:
                data["loop_var"] = control["loop_var"]
        if inherited.when:
            data["when"] = [*inherited.when, *_as_list(raw.get("when"))]
        if inherited.tags:
            data["tags"] = [*inherited.tags, *_as_list(raw.get("tags"))]
        if inherited.vars:
            data["vars"] = {**inherited.vars, **(raw.get("vars") or {})}
        if modules:
            spec = get_module(modules[0])
            assert spec is not None
            data["module"] = spec.name
            data["args"] = self._module_args(spec, node.child(spec.name))
        for key in ("block", "rescue", "always"):
            if key in raw:
                child = node.child(key)
                if not isinstance(child.value, list) or (key == "block" and not child.value):
                    raise child.error(f"'{key}' must be a non-empty list of tasks")
                data[key] = self._parse_items(child, f"{task_id}/{key}", _Inherited())
        if "gate" in raw:
            gate = parse_gate(node.child("gate"))
            self.gates.append((gate, node.child("gate")))
            data["gate"] = gate
        line, column = node.pos()
        data["source"] = SourcePos(path=node.path, line=line, column=column)
        data["task_id"] = task_id
        return data

    def _module_args(self, spec: ModuleSpec[Any], node: Node) -> dict[str, Any]:
        raw = node.value
        if raw is None:
            raw = {}
        if isinstance(raw, str):
            if spec.free_form_arg is None:
                raise node.error(f"module '{spec.name}' takes a mapping of arguments, not a string")
            raw = {spec.free_form_arg: raw}
            # Free-form strings are validated in place; errors point at the string itself.
            return self._validate_args(spec, raw, node, free_form=True)
        if not isinstance(raw, dict):
            raise node.error(f"arguments of module '{spec.name}' must be a mapping, got {type_name(raw)}")
        check_inline_secrets(node)
        check_secret_ref_fields(spec.args_model, node)
        if spec.name == eviction.MODULE and eviction.ARG in raw:
            eviction.literal_error(node.child(eviction.ARG))
        return self._validate_args(spec, raw, node, free_form=False)

    def _validate_args(
        self, spec: ModuleSpec[Any], raw: dict[str, Any], node: Node, *, free_form: bool
    ) -> dict[str, Any]:
        model = spec.args_model
        known = field_keys(model)
        allows_extra = model.model_config.get("extra") == "allow"
        if not free_form and not allows_extra:
            for key in raw:
                if key not in known:
                    raise node.child(key).error(
                        f"unknown argument '{key}' for module '{spec.name}'",
                        at_key=True,
                        suggestion=suggest(str(key), known),
                    )
        try:
            model.model_validate(raw)
        except ValidationError as exc:
            errors = [e for e in exc.errors(include_url=False) if not templated_at(raw, tuple(e["loc"]))]
        else:
            errors = []
        # Templated values are rendered (and checked again) at run time, so only errors
        # about literal values count here.
        if errors:
            error = errors[0]
            loc = tuple(error["loc"])
            name = str(loc[0]) if loc else spec.name
            if error["type"] == "missing":
                raise node.error(f"module '{spec.name}' needs argument '{name}'", key=name)
            target = node
            if not free_form:
                for part in loc:
                    if target.has(part):
                        target = target.child(part)
            message = str(error["msg"]).removeprefix("Value error, ")
            raise target.error(
                f"invalid value for argument '{name}' of module '{spec.name}': {message}", key=name
            )
        return dict(raw)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def load_task_file(path: Path) -> tuple[YamlDoc, list[Task]]:
    """Validate a stand-alone task file (a YAML list of tasks)."""
    doc = load_yaml(path, display_path=str(path))
    check_template_syntax(doc.root())
    if not isinstance(doc.data, list):
        raise doc.root().error(f"a task file must be a YAML list of tasks, got {type_name(doc.data)}")
    parser = TaskParser()
    return doc, parser.parse_list(doc.root(), "tasks")


__all__ = [
    "MAX_RUNBOOK_TASKS",
    "TASK_KEYWORDS",
    "RunbookError",
    "TaskParser",
    "check_expressions",
    "load_task_file",
    "parse_gate",
]
