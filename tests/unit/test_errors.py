"""The error vocabulary and `@module_activity`: the strings histories hold, what is retried,
and the one way a module's arguments are parsed."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.module_activity import module_activity, parse_args
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import NON_RETRYABLE, ErrorType, fail, make_error, non_retryable_types
from pitstop.module_args.etcd import ETCD_RETRY, SnapshotStatusArgs
from pitstop.module_args.ssh import SSH_RETRY
from pitstop.module_args.storage import STORAGE_RETRY
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults

BASE = ("InvalidArgs", "PreconditionFailed", "Unauthorized", "PolicyViolation")


def test_retry_policies_keep_the_recorded_lists_in_order() -> None:
    # These lists reach the plan and the activity schedules in history: same strings, same order.
    assert RetryDefaults().non_retryable_error_types == BASE
    assert tuple(NON_RETRYABLE) == BASE
    assert ETCD_RETRY.non_retryable_error_types == (*BASE, "SnapshotCorrupt")
    assert STORAGE_RETRY.non_retryable_error_types == (*BASE, "ChecksumMismatch", "NotFound")
    assert SSH_RETRY.non_retryable_error_types == (
        *BASE,
        "HostKeyMismatch",
        "FirmwareUpdateFailed",
        "RebootTimeout",
    )
    assert all(type(t) is str for t in non_retryable_types(ErrorType.NOT_FOUND))


@pytest.mark.parametrize("kind", list(ErrorType))
def test_fail_raises_the_type_non_retryable_exactly_when_listed(kind: ErrorType) -> None:
    with pytest.raises(ApplicationError) as raised:
        fail(kind, "why")
    assert raised.value.type == kind.value and raised.value.message == "why"
    assert raised.value.non_retryable is (kind in NON_RETRYABLE)


def test_fail_says_otherwise_when_told_and_carries_details() -> None:
    err = make_error(ErrorType.TIMEOUT, "late", details=({"node": "n1"},), non_retryable=True)
    assert (err.type, err.non_retryable, err.details) == ("Timeout", True, ({"node": "n1"},))
    assert make_error(ErrorType.INVALID_ARGS, "x", non_retryable=False).non_retryable is False


class _Args(ModuleArgs):
    count: int


SPEC: ModuleSpec[_Args] = ModuleSpec(name="test.typed", args_model=_Args, summary="typed args")


@module_activity(SPEC)
def _sync_body(call: ModuleCall, args: _Args) -> ModuleResult:
    return ModuleResult(msg=f"{call.host}: {args.count + 1}")


@module_activity(SPEC)
async def _async_body(call: ModuleCall, args: _Args) -> ModuleResult:
    return ModuleResult(msg=f"{call.host}: {args.count * 2}")


def _call(args: dict[str, Any]) -> ModuleCall:
    return ModuleCall(module="test.typed", host="h1", task_path="t", run_id="r1", args=args)


async def test_the_activity_is_named_from_its_spec_and_gets_typed_args() -> None:
    for fn in (_sync_body, _async_body):
        definition = activity._Definition.from_callable(fn)
        assert definition is not None and definition.name == "module.test.typed"
        assert definition.arg_types == [ModuleCall]
    env = ActivityEnvironment()
    assert env.run(_sync_body, _call({"count": 2})).msg == "h1: 3"
    assert (await env.run(_async_body, _call({"count": 2}))).msg == "h1: 4"


async def test_bad_args_are_one_non_retryable_invalid_args_naming_module_and_fields() -> None:
    env = ActivityEnvironment()
    with pytest.raises(ApplicationError) as sync_error:
        env.run(_sync_body, _call({"count": "many", "extra": 1}))
    with pytest.raises(ApplicationError) as async_error:
        await env.run(_async_body, _call({}))
    assert sync_error.value.type == "InvalidArgs" and sync_error.value.non_retryable
    assert sync_error.value.message == (
        "test.typed: count: Input should be a valid integer, unable to parse string as an integer; "
        "extra: Extra inputs are not permitted"
    )
    assert async_error.value.message == "test.typed: count: Field required"
    # Nothing chained: the pydantic error (and the values it quotes) stays out of the failure.
    assert sync_error.value.__cause__ is None and sync_error.value.__context__ is None


def test_shipped_args_models_parse_through_the_same_path() -> None:
    call = ModuleCall(module="etcd.snapshot_status", host="h", task_path="t", run_id="r1", args={})
    with pytest.raises(ApplicationError) as raised:
        parse_args(SnapshotStatusArgs, call)
    assert raised.value.message == "etcd.snapshot_status: path: Field required"
