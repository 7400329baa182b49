"""One call of a task's module: its arguments rendered, check mode, `delegate_to`, then a
pure module (`pitstop.core_modules`, evaluated here) or an activity on the cluster's queue.

Deterministic workflow code: the only way out is `workflow.execute_activity`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

from workflows.host_state import HostControl, HostRun

with workflow.unsafe.imports_passed_through():
    from pitstop.contracts import ModuleCall, ModuleExec, ModuleResult
    from pitstop.core_modules import PureCall, run_pure
    from pitstop.local_tasks import runs_local
    from pitstop.runbook.models import Task
    from pitstop.runbook.scope import VarScope
    from pitstop.runbook.templating import TemplateError, render


def check_mode(host: HostControl, task: Task) -> bool:
    return task.check_mode if task.check_mode is not None else host.inp.check_mode


def render_args(task: Task, variables: dict[str, Any]) -> Any:
    if task.module == "assert":
        # `assert.that` holds expressions, evaluated once by the module, not rendered first.
        rest = render({k: v for k, v in task.args.items() if k != "that"}, variables)
        return {**rest, "that": task.args.get("that")}
    return render(task.args, variables)


async def call_module(host: HostControl, task: Task, state: HostRun, scope: VarScope) -> ModuleResult:
    """One attempt of `task` with the variables of `scope`."""
    assert task.module is not None
    spec = host.inp.modules.get(task.module)
    if spec is None:
        return ModuleResult(failed=True, msg=f"module {task.module!r} is not in the plan")
    variables = scope.variables()
    try:
        args = render_args(task, variables)
    except TemplateError as exc:
        return ModuleResult(failed=True, msg=f"arguments: {exc}")
    check = check_mode(host, task)
    if check and not spec.supports_check_mode:
        return ModuleResult(
            skipped=True,
            msg=(
                f"{task.module} cannot run in check mode; skipped "
                "(set `check_mode: false` on the task to run it for real)"
            ),
        )
    if spec.pure:
        return await _call_pure(host, task, state, args, variables, check)
    target = host.inp.host
    if task.delegate_to:
        # The delegate is rendered with this host's variables (and the loop item).
        try:
            target = str(render(task.delegate_to, variables))
        except TemplateError as exc:
            return ModuleResult(failed=True, msg=f"delegate_to: {exc}")
    return await call_activity(host, task, spec, args, check, target)


async def _call_pure(
    host: HostControl, task: Task, state: HostRun, args: Any, variables: dict[str, Any], check: bool
) -> ModuleResult:
    assert task.module is not None
    owner, facts = host.inp.host, state.facts
    if task.delegate_facts and task.delegate_to:
        # Ansible's `delegate_facts` (the loader allows it on `set_fact` only): the facts
        # belong to the delegate, e.g. a canary's figures set on localhost, where the change
        # record reads run-wide results.
        try:
            owner = str(render(task.delegate_to, variables))
        except TemplateError as exc:
            return ModuleResult(failed=True, msg=f"delegate_to: {exc}")
        facts = state.delegated.setdefault(owner, {})
    call = PureCall(
        variables=variables, check_mode=check, host=host.inp.host, owner=owner, facts=facts, sleep=host.sleep
    )
    return await run_pure(task.module, args, call)


async def call_activity(
    host: HostControl, task: Task, spec: ModuleExec, args: Any, check: bool, target: str
) -> ModuleResult:
    call = ModuleCall(
        module=spec.module,
        host=target,
        args=args if isinstance(args, dict) else {"_raw": args},
        check_mode=check,
        run_id=host.inp.run_id,
        task_path=task.task_id,
        # Connection settings are the target's: a delegated task runs *on* the delegate.
        host_vars=host.inp.hostvars.get(target, {"inventory_hostname": target}),
        cluster=host.inp.cluster,
    )
    retry = spec.retry
    policy = RetryPolicy(
        maximum_attempts=retry.maximum_attempts,
        initial_interval=timedelta(seconds=retry.initial_interval_s),
        backoff_coefficient=retry.backoff_coefficient,
        maximum_interval=timedelta(seconds=retry.maximum_interval_s),
        non_retryable_error_types=list(retry.non_retryable_error_types),
    )
    timeout = timedelta(seconds=task.timeout or spec.start_to_close_s)
    try:
        result: ModuleResult
        # `spec.local` is "never" when the run's activities are on another queue (plan.load).
        if runs_local(spec.local, task, call.args):
            # No server round trip (see pitstop/local_tasks.py for when this is safe).
            result = await workflow.execute_local_activity(
                spec.activity,
                call,
                result_type=ModuleResult,
                start_to_close_timeout=timeout,
                retry_policy=policy,
            )
        else:
            result = await workflow.execute_activity(
                spec.activity,
                call,
                result_type=ModuleResult,
                task_queue=host.inp.task_queue,
                start_to_close_timeout=timeout,
                heartbeat_timeout=timedelta(seconds=spec.heartbeat_s) if spec.heartbeat_s else None,
                retry_policy=policy,
            )
        return result
    except ActivityError as err:
        # `str()` of an ApplicationError already carries its type; name it once.
        cause = err.cause
        message = cause.message if isinstance(cause, FailureError) else str(err)
        kind = cause.type if isinstance(cause, ApplicationError) and cause.type else None
        return ModuleResult(failed=True, msg=f"{kind}: {message}" if kind else message)
    except ApplicationError as err:
        # temporalio 1.35 resolves a failed *local* activity with the activity's own
        # ApplicationError, not wrapped in an ActivityError: still the task's failure (for
        # ignore_errors, rescue, failed_when), never the host workflow's.
        return ModuleResult(failed=True, msg=f"{err.type}: {err.message}" if err.type else err.message)
