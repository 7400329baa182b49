"""A module task's attempts: `loop` over items, `retries/until/delay` on durable timers, and
`changed_when`/`failed_when` applied to each result.

Deterministic workflow code; the variables of each attempt are one `VarScope`, extended by
the loop item and by the attempt's result.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow

from workflows.host_calls import call_module
from workflows.host_state import SKIPPED_BY_CONDITION, Flow, HostControl, HostRun

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import ModuleResult
    from pitstop.runbook.models import Task
    from pitstop.runbook.scope import VarScope
    from pitstop.runbook.templating import TemplateError, evaluate_bool, render

# Ansible's defaults for `until` without `retries`/`delay`.
DEFAULT_UNTIL_RETRIES = 3
DEFAULT_DELAY_S = 5.0


def holds(conditions: list[str] | tuple[str, ...], scope: VarScope) -> bool:
    return all(evaluate_bool(c, scope.variables()) for c in conditions)


async def run_loop(
    host: HostControl, task: Task, state: HostRun, scope: VarScope, conditions: list[str], started: datetime
) -> Flow:
    """Every item of `loop`, each with its own `when`; one registered result of them all."""
    try:
        items = render(task.loop, scope.variables())
    except TemplateError as exc:
        return state.fail(task, f"loop: {exc}", started)
    if not isinstance(items, list):
        return state.fail(task, f"loop must give a list, got {type(items).__name__}", started)
    results: list[dict[str, Any]] = []
    calls = 0
    for item in items:
        # `when` is evaluated for every item, with the loop variable set (Ansible).
        item_scope = scope.child(**{task.loop_var: item})
        try:
            wanted = holds(conditions, item_scope)
        except TemplateError as exc:
            result: ModuleResult = ModuleResult(failed=True, msg=f"when: {exc}")
        else:
            if not wanted:
                results.append({**SKIPPED_BY_CONDITION, task.loop_var: item})
                continue
            result, attempts = await run_attempts(host, task, state, item_scope)
            calls += attempts
        results.append({**result.as_var(), task.loop_var: item, "ansible_loop_var": task.loop_var})
    merged = ModuleResult(
        changed=any(r["changed"] for r in results),
        failed=any(r["failed"] for r in results),
        skipped=all(r["skipped"] for r in results),
        msg="; ".join(r["msg"] for r in results if r["failed"] and r["msg"]) or "",
        data={"results": results},
    )
    return state.finish(task, merged, max(calls, 1), started)


def _max_tries(task: Task) -> int:
    if task.until is not None:
        return (task.retries if task.retries is not None else DEFAULT_UNTIL_RETRIES) + 1
    if task.retries is not None:
        return task.retries + 1
    return 1


async def run_attempts(
    host: HostControl, task: Task, state: HostRun, scope: VarScope
) -> tuple[ModuleResult, int]:
    """One call, or `retries/until/delay` on durable timers."""
    max_tries = _max_tries(task)
    delay = task.delay if task.delay is not None else DEFAULT_DELAY_S
    attempt = 0
    while True:
        attempt += 1
        # The scope is read afresh for each attempt: an earlier one may have set facts.
        attempt_scope = scope if attempt == 1 else scope.renewed()
        result = await call_module(host, task, state, attempt_scope)
        result = apply_conditions(task, attempt_scope, result)
        if task.until is not None:
            after = attempt_scope.with_layer("result", result_vars(task, result))
            try:
                done = not result.failed and evaluate_bool(task.until, after.variables())
            except TemplateError as exc:
                return ModuleResult(failed=True, msg=f"until: {exc}"), attempt
        else:
            done = not result.failed
        if done or attempt >= max_tries:
            if not done and task.until is not None and not result.failed:
                result = result.model_copy(
                    update={"failed": True, "msg": f"until condition not met after {attempt} attempts"}
                )
            return result, attempt
        await host.sleep(delay)
        if host.abort_reason is not None:
            return result, attempt


def result_vars(task: Task, result: ModuleResult) -> dict[str, Any]:
    value = result.as_var()
    out = {"result": value}
    if task.register:
        out[task.register] = value
    return out


def apply_conditions(task: Task, scope: VarScope, result: ModuleResult) -> ModuleResult:
    """`changed_when` and `failed_when`, evaluated in `scope` with the result added."""
    if task.changed_when is None and task.failed_when is None:
        return result
    scope = scope.with_layer("result", result_vars(task, result))
    try:
        update: dict[str, Any] = {}
        if task.changed_when is not None:
            update["changed"] = holds(task.changed_when, scope)
        if task.failed_when is not None:
            failed = holds(task.failed_when, scope)
            update["failed"] = failed
            if failed and not result.failed:
                # The module succeeded; the runbook's condition is why the task failed.
                why = "failed_when condition met: " + " and ".join(task.failed_when)
                update["msg"] = f"{why} ({result.msg})" if result.msg else why
    except TemplateError as exc:
        return result.model_copy(update={"failed": True, "msg": f"failed_when/changed_when: {exc}"})
    return result.model_copy(update=update)
