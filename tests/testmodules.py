"""Test-only modules that run as real activities, so engine tests can count every call.

They are registered in the module registry like shipped modules; each activity records
its calls in `CALLS` (host, task path, args), in the worker process of the test.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from pydantic import Field
from temporalio import activity
from temporalio.exceptions import ApplicationError

from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.modules import ModuleArgs, ModuleSpec, RetryDefaults, get_module, register

CALLS: list[tuple[str, str, dict[str, Any]]] = []


def calls_per(host_task: bool = True) -> Counter[tuple[str, str]]:
    return Counter((h, t) for h, t, _ in CALLS)


class StepArgs(ModuleArgs):
    value: Any = None
    fail_hosts: list[str] = Field(default_factory=list)
    sleep: float = 0.0
    changed: bool = True


class NoCheckArgs(ModuleArgs):
    cmd: str = ""


def _register() -> None:
    if get_module("test.step") is not None:
        return
    register(
        ModuleSpec(
            name="test.step",
            args_model=StepArgs,
            summary="Test step: records the call, optionally fails for some hosts.",
            supports_check_mode=True,
            retry=RetryDefaults(
                maximum_attempts=3, initial_interval=__import__("datetime").timedelta(seconds=0.2)
            ),
        )
    )
    register(
        ModuleSpec(
            name="test.nocheck",
            args_model=NoCheckArgs,
            summary="Test module without check-mode support.",
            supports_check_mode=False,
        )
    )


_register()


@activity.defn(name="module.test.step")
async def test_step(call: ModuleCall) -> ModuleResult:
    CALLS.append((call.host, call.task_path, dict(call.args)))
    args = StepArgs.model_validate(call.args)
    if args.sleep:
        await asyncio.sleep(args.sleep)
    if call.check_mode:
        return ModuleResult(changed=args.changed, msg=f"would step {args.value}")
    if call.host in args.fail_hosts:
        return ModuleResult(failed=True, msg=f"step failed on {call.host}")
    if args.value == "raise":
        raise ApplicationError("bad args", type="InvalidArgs", non_retryable=True)
    return ModuleResult(changed=args.changed, msg=f"step {args.value}", data={"value": args.value})


@activity.defn(name="module.test.nocheck")
async def test_nocheck(call: ModuleCall) -> ModuleResult:
    CALLS.append((call.host, call.task_path, dict(call.args)))
    return ModuleResult(changed=True, msg="ran")


TEST_ACTIVITIES = [test_step, test_nocheck]
