"""Test-only modules that run as real activities, so engine tests can count every call.

They are registered in the module registry like shipped modules; each activity records
its calls in `CALLS` (host, task path, args), in the worker process of the test.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pydantic import Field
from temporalio import activity
from temporalio.exceptions import ApplicationError

from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.modules import ModuleArgs, ModuleSpec, RetryDefaults, get_module, register

CALLS: list[tuple[str, str, dict[str, Any]]] = []


@dataclass(frozen=True)
class CallRecord:
    """One `test.step` call with its start and end on the worker's monotonic clock, so tests
    can measure concurrency and barriers from the order of calls, not from the wall clock."""

    host: str
    task: str
    args: dict[str, Any]
    check_mode: bool
    attempt: int
    started: float
    ended: float


RECORDS: list[CallRecord] = []


def calls_per(host_task: bool = True) -> Counter[tuple[str, str]]:
    return Counter((h, t) for h, t, _ in CALLS)


class StepArgs(ModuleArgs):
    value: Any = None
    fail_hosts: list[str] = Field(default_factory=list)
    sleep: float = 0.0
    changed: bool = True
    # Fail (as a module result) the first N calls of this task on this host: for retries/until.
    fail_times: int = 0
    # A document the step "wrote" ({name, uri}), as records modules return it.
    artifact: dict[str, str] | None = None


class ReadArgs(ModuleArgs):
    value: Any = None


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
            name="test.read",
            args_model=ReadArgs,
            summary="Test read: records the call, changes nothing; a local activity (like ssh.facts).",
            supports_check_mode=True,
            local="always",
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


# Hosts whose `test.step` calls wait (after being recorded in CALLS) until the test releases
# them: a test that must act while a call is certainly in progress waits on conditions, not on
# a sleep being long enough. The worker runs on the test's event loop, so an Event is enough.
HELD_HOSTS: dict[str, asyncio.Event] = {}


def hold(host: str) -> None:
    HELD_HOSTS[host] = asyncio.Event()


def release(host: str) -> None:
    held = HELD_HOSTS.pop(host, None)
    if held is not None:
        held.set()


@activity.defn(name="module.test.step")
async def test_step(call: ModuleCall) -> ModuleResult:
    CALLS.append((call.host, call.task_path, dict(call.args)))
    args = StepArgs.model_validate(call.args)
    started = time.monotonic()
    attempt = sum(1 for r in RECORDS if (r.host, r.task) == (call.host, call.task_path)) + 1
    try:
        held = HELD_HOSTS.get(call.host)
        if held is not None:
            await held.wait()
        if args.sleep:
            await asyncio.sleep(args.sleep)
    finally:
        ended = time.monotonic()
        RECORDS.append(
            CallRecord(call.host, call.task_path, dict(call.args), call.check_mode, attempt, started, ended)
        )
    if call.check_mode:
        return ModuleResult(changed=args.changed, msg=f"would step {args.value}")
    if call.host in args.fail_hosts:
        return ModuleResult(failed=True, msg=f"step failed on {call.host}")
    if attempt <= args.fail_times:
        return ModuleResult(failed=True, msg=f"step failed on attempt {attempt}", data={"attempt": attempt})
    if args.value == "raise":
        raise ApplicationError("bad args", type="InvalidArgs", non_retryable=True)
    data: dict[str, Any] = {"value": args.value, "attempt": attempt}
    if args.artifact is not None:
        data["artifact"] = args.artifact
    return ModuleResult(changed=args.changed, msg=f"step {args.value}", data=data)


@activity.defn(name="module.test.read")
async def test_read(call: ModuleCall) -> ModuleResult:
    CALLS.append((call.host, call.task_path, dict(call.args)))
    value = ReadArgs.model_validate(call.args).value
    if value == "raise":  # a local activity that fails as modules do (an ApplicationError)
        raise ApplicationError("read refused", type="PreconditionFailed", non_retryable=True)
    return ModuleResult(changed=False, msg=f"read {value}", data={"value": value})


@activity.defn(name="module.test.nocheck")
async def test_nocheck(call: ModuleCall) -> ModuleResult:
    CALLS.append((call.host, call.task_path, dict(call.args)))
    return ModuleResult(changed=True, msg="ran")


TEST_ACTIVITIES = [test_step, test_read, test_nocheck]


# --- test.durable_step: calls counted across worker processes ---------------------------
# The engine tests above count calls in `CALLS`, in the memory of the worker process. A
# test that SIGKILLs its worker needs a count that outlives the process: this module
# appends each call to the file named by $PITSTOP_TEST_CALL_LOG, flushed and fsynced.

CALL_LOG_ENV = "PITSTOP_TEST_CALL_LOG"
# While the file named by $PITSTOP_TEST_HOLD_FILE exists, calls wait before completing, so a
# test can kill the worker at a moment when calls are certainly in the middle of running.
HOLD_FILE_ENV = "PITSTOP_TEST_HOLD_FILE"


class DurableStepArgs(ModuleArgs):
    sleep: float = 0.0


def _register_durable() -> None:
    if get_module("test.durable_step") is not None:
        return
    from datetime import timedelta

    register(
        ModuleSpec(
            name="test.durable_step",
            args_model=DurableStepArgs,
            summary="Test step recorded in a file (start and completion), for worker-kill tests.",
            supports_check_mode=True,
            start_to_close=timedelta(seconds=60),
            # A killed worker stops heartbeating: Temporal retries the call after this long,
            # instead of after the whole start-to-close timeout.
            heartbeat_timeout=timedelta(seconds=2),
            retry=RetryDefaults(
                maximum_attempts=10,
                initial_interval=timedelta(seconds=0.2),
                maximum_interval=timedelta(seconds=1),
            ),
        )
    )


_register_durable()


def _log_call(event: str, call: ModuleCall) -> None:
    import os

    path = os.environ.get(CALL_LOG_ENV)
    if not path:
        return
    line = f"{event}\t{call.host}\t{call.task_path}\t{activity.info().attempt}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _held() -> bool:
    import os

    path = os.environ.get(HOLD_FILE_ENV)
    return path is not None and os.path.exists(path)


@activity.defn(name="module.test.durable_step")
async def test_durable_step(call: ModuleCall) -> ModuleResult:
    args = DurableStepArgs.model_validate(call.args)
    _log_call("start", call)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.sleep
    # Heartbeat while working, so that the attempt of a killed worker times out quickly.
    while loop.time() < deadline or _held():
        activity.heartbeat()
        await asyncio.sleep(0.05)
    # Recorded just before returning: a line means "this call completed", so a call killed
    # mid-way leaves only its `start` line and its retry adds the one `done` line.
    _log_call("done", call)
    return ModuleResult(changed=True, msg=f"durable step on {call.host}")


TEST_ACTIVITIES.append(test_durable_step)


# What `python worker.py` serves of this module when PITSTOP_MODULES names it (a real worker
# process of the tests, e.g. the activities-only cluster workers of tests/multicluster.py).
ACTIVITIES = TEST_ACTIVITIES
