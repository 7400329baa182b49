"""The worker runs the `workflows` package without the sandbox (`pitstop.sandbox`): what
makes that safe, checked on its source, since the sandbox no longer checks it at run time.

Code outside the sandbox runs with the real stdlib, so a clock, a random number, a file or a thread
in it would not be refused by the sandbox; nor would module-level state shared by every
workflow instance. The replayer keeps the full sandbox (`workflow_runner()` re-imports the
package under every restriction), and this test refuses those things in the source itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from pitstop.sandbox import ENGINE_MODULES, PASSTHROUGH_MODULES, workflow_runner

WORKFLOWS_DIR = Path(__file__).resolve().parents[2] / "workflows"
SOURCES = sorted(WORKFLOWS_DIR.glob("*.py"))
# Stdlib modules that hold no clock, randomness, I/O or threads.
PURE_STDLIB = {
    "__future__",
    "asyncio",
    "collections",
    "contextlib",
    "dataclasses",
    "datetime",
    "enum",
    "functools",
    "itertools",
    "json",
    "math",
    "re",
    "typing",
}
ALLOWED_ROOTS = PURE_STDLIB | {"temporalio", "pydantic", "pitstop", "workflows"}
# Calls that read the clock or leave the workflow's event loop, from an allowed module
# (`workflow.now()` is the deterministic clock; `asyncio.sleep` is a durable timer there).
FORBIDDEN_ATTRIBUTES = {
    "datetime": {"now", "utcnow", "today", "fromtimestamp"},
    "date": {"today"},
    "asyncio": {"run", "get_event_loop", "new_event_loop", "to_thread", "run_in_executor"},
}
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}
# Module-level values that a workflow may change, shared by every instance once passed through.
MUTABLE_LITERALS = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_workflow_code_imports_only_pure_modules(path: Path) -> None:
    bad = []
    for node in ast.walk(_tree(path)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        bad += [f"line {node.lineno}: {n}" for n in names if n.split(".")[0] not in ALLOWED_ROOTS]
    assert bad == [], f"{path.name} imports modules the sandbox would restrict: {bad}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_workflow_code_reads_no_clock_and_does_no_io(path: Path) -> None:
    bad = []
    for node in ast.walk(_tree(path)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
            bad.append(f"line {node.lineno}: {func.id}()")
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.attr in FORBIDDEN_ATTRIBUTES.get(func.value.id, set())
        ):
            bad.append(f"line {node.lineno}: {func.value.id}.{func.attr}()")
    assert bad == [], f"{path.name} calls what workflow code must not: {bad}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_workflow_code_keeps_no_mutable_state_at_module_level(path: Path) -> None:
    bad = []
    for node in _tree(path).body:
        if isinstance(node, ast.Global):
            bad.append(f"line {node.lineno}: global")
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        # `__all__` is read by `import *` only; a mutable constant must be named as one and
        # is still flagged unless it is never changed (checked below).
        if isinstance(value, MUTABLE_LITERALS) and names != ["__all__"]:
            mutated = _mutated_names(path)
            bad += [f"line {node.lineno}: {n} is changed" for n in names if n in mutated]
    for func in ast.walk(_tree(path)):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            bad += [
                f"line {g.lineno}: global {', '.join(g.names)}"
                for g in ast.walk(func)
                if isinstance(g, ast.Global)
            ]
    assert bad == [], f"{path.name} keeps state at module level that workflow instances would share: {bad}"


def _mutated_names(path: Path) -> set[str]:
    """Names that code in the file changes in place (`X[k] = v`, `X.append(...)`, ...)."""
    changers = {
        "append",
        "extend",
        "insert",
        "pop",
        "popitem",
        "clear",
        "update",
        "setdefault",
        "add",
        "remove",
        "discard",
    }
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            found |= {
                t.value.id for t in targets if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
            }
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in changers
            and isinstance(node.func.value, ast.Name)
        ):
            found.add(node.func.value.id)
    return found


def test_only_the_worker_runs_the_engine_outside_the_sandbox() -> None:
    assert isinstance(workflow_runner(engine=True), UnsandboxedWorkflowRunner)
    replayer = workflow_runner()
    assert isinstance(replayer, SandboxedWorkflowRunner)
    passed = replayer.restrictions.passthrough_modules
    # The replayer re-imports the engine under every restriction, for each recorded history.
    assert set(PASSTHROUGH_MODULES) <= passed and not set(ENGINE_MODULES) & passed
