"""`@module_activity(SPEC)`: binds a module's activity to its spec.

The activity is named from the spec (`module.<name>`, never typed again), and its raw
`ModuleCall.args` are parsed into the spec's Args model in one way: a clear, non-retryable
`InvalidArgs` naming the module and each offending field. The decorated function receives the
call and the typed arguments; the registered activity still takes just the `ModuleCall`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError
from temporalio import activity

from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.module_spec import ModuleArgs, ModuleSpec

M = TypeVar("M", bound=BaseModel)
ArgsT = TypeVar("ArgsT", bound=ModuleArgs)
# A module body: `def` (run on the worker's thread pool) or `async def` (on its event loop).
R = TypeVar("R", ModuleResult, Awaitable[ModuleResult])

# The attribute of a module activity that holds its spec (read by the catalogue test).
SPEC_ATTRIBUTE = "module_spec"


def parse_args(model: type[M], call: ModuleCall) -> M:
    """`call.args` as `model`, or InvalidArgs: `<module>: <field>: <problem>; ...`."""
    try:
        return model.model_validate(call.args)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}" for e in exc.errors())
    fail(ErrorType.INVALID_ARGS, f"{call.module}: {problems}")


def module_activity(
    spec: ModuleSpec[ArgsT],
) -> Callable[[Callable[[ModuleCall, ArgsT], R]], Callable[[ModuleCall], R]]:
    """Register `fn(call, args)` as the activity of `spec`, with its arguments parsed."""

    def bind(fn: Callable[[ModuleCall, ArgsT], R]) -> Callable[[ModuleCall], R]:
        body: Callable[[ModuleCall, ArgsT], Any] = fn
        run: Callable[[ModuleCall], Any]
        if inspect.iscoroutinefunction(fn):

            async def run_async(call: ModuleCall) -> ModuleResult:
                result: ModuleResult = await body(call, parse_args(spec.args_model, call))
                return result

            run = run_async
        else:

            def run_sync(call: ModuleCall) -> ModuleResult:
                result: ModuleResult = body(call, parse_args(spec.args_model, call))
                return result

            run = run_sync
        # Not functools.wraps: Temporal reads the activity's parameters from its signature,
        # which must stay `(call: ModuleCall)`, not the body's `(call, args)`.
        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(run, attribute, getattr(fn, attribute))
        setattr(run, SPEC_ATTRIBUTE, spec)
        return cast(Callable[[ModuleCall], R], activity.defn(name=spec.activity_name)(run))

    return bind
