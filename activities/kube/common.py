"""What every kube module shares: its client, its node, its deadline, its heartbeats, and one
translation of Kubernetes errors into pitstop's error types.

Errors: 401/403 -> Unauthorized; 400/415/422 -> InvalidArgs; 404 -> PreconditionFailed (all
non-retryable). 409 conflicts, 429s, 5xx and unreachable servers are raised as retryable
errors, so Temporal's retry policy backs off and tries again (drain handles a PDB's 429 in its
own wait loop instead).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, CancelledError

from activities.kube.client import ApiStatus, Kube, KubeConfigError, Unreachable, api_client
from activities.module_activity import module_activity
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail, make_error
from pitstop.kube.names import InvalidName, check_name
from pitstop.kube.redact import collecting, redact_tree, scrub_text, scrub_tree
from pitstop.module_spec import ModuleArgs, ModuleSpec

ArgsT = TypeVar("ArgsT", bound=ModuleArgs)

# Stop this long before the activity's own timeout, to report instead of being killed.
DEADLINE_MARGIN = timedelta(seconds=5)


def kube_for(call: ModuleCall) -> Kube:
    try:
        api = api_client(call.cluster, call.module)
    except KubeConfigError as exc:
        fail(ErrorType.PRECONDITION_FAILED, str(exc))
    return Kube(api, call.cluster.name if call.cluster else "default cluster")


def node_name(call: ModuleCall, explicit: str | None) -> str:
    """The `node` argument, else the host's `node_name` var, else the host's inventory name;
    refused (InvalidArgs) unless it is a name the apiserver accepts for a node."""
    if explicit:
        name, origin = explicit, "the `node` argument"
    elif call.host_vars.get("node_name"):
        name, origin = str(call.host_vars["node_name"]), f"host {call.host}'s `node_name` var"
    else:
        name, origin = call.host, "the host's inventory name (set `node_name` for this host)"
    try:
        return check_name(name, "node name")
    except InvalidName as exc:
        fail(ErrorType.INVALID_ARGS, f"{call.module}: {exc}; it came from {origin}")


# --- time -------------------------------------------------------------------------------------


def activity_deadline() -> float:
    """Monotonic time by which this activity must have answered: the task's timeout counted from
    the first attempt (a retried drain does not get the whole timeout again), and never after
    this attempt's own start-to-close timeout."""
    info = activity.info()
    timeout = info.start_to_close_timeout
    if not timeout:
        return float("inf")
    now = datetime.now(UTC)
    ends = [info.started_time + timeout, info.scheduled_time + timeout]
    margin = min(DEADLINE_MARGIN, timeout * 0.05)
    remaining = (min(ends) - margin - now).total_seconds()
    return time.monotonic() + remaining


class Deadline:
    """min(the activity's deadline, now + the module's own timeout)."""

    def __init__(self, timeout_seconds: float | None = None) -> None:
        self.started = time.monotonic()
        self.at = activity_deadline()
        if timeout_seconds is not None:
            self.at = min(self.at, self.started + timeout_seconds)

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def passed(self) -> bool:
        return self.remaining() <= 0

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def beat(*details: Any) -> None:
    activity.heartbeat(*details)


def pause(seconds: float, *details: Any) -> None:
    """Sleep, heartbeating; a cancelled activity stops here."""
    end = time.monotonic() + max(0.0, seconds)
    while True:
        beat(*details)
        left = end - time.monotonic()
        if activity.is_cancelled():
            raise CancelledError("cancelled while waiting")
        if left <= 0:
            return
        activity.wait_for_cancelled_sync(timeout=min(left, 5.0))


def first_details() -> Any:
    """The last heartbeat details of a previous attempt (None on the first one)."""
    details = activity.info().heartbeat_details
    return details[0] if details else None


# --- errors -----------------------------------------------------------------------------------


def translate(exc: ApiStatus, what: str) -> NoReturn:
    """Raise the pitstop error for an API answer (see the module docstring)."""
    text = f"{what}: {exc.message}"
    if exc.status in (401, 403):
        fail(
            ErrorType.UNAUTHORIZED,
            f"{text} (HTTP {exc.status}; check the credentials and RBAC of the kubeconfig)",
        )
    if exc.status in (400, 415, 422):
        fail(ErrorType.INVALID_ARGS, f"{text} (HTTP {exc.status} {exc.reason})")
    if exc.status == 404:
        fail(ErrorType.PRECONDITION_FAILED, text)
    fail(ErrorType.KUBE_API_ERROR, f"{text} (HTTP {exc.status} {exc.reason}; will retry)")


@contextmanager
def api_errors(what: str) -> Iterator[None]:
    try:
        yield
    except InvalidName as exc:
        # Refused before any request: the apiserver would refuse it too (or, worse, the HTTP
        # stack would normalise it into another resource's path).
        fail(ErrorType.INVALID_ARGS, f"{what}: {exc}")
    except ApiStatus as exc:
        translate(exc, what)
    except Unreachable as exc:
        raise make_error(ErrorType.CLUSTER_UNREACHABLE, f"{what}: {exc}") from None


def scrubbed_result(result: ModuleResult, seen: set[str]) -> ModuleResult:
    """`result` with every object in its data redacted and no redacted value anywhere in it."""
    texts = {key: scrub_text(getattr(result, key), seen) for key in ("msg", "stdout", "stderr", "diff")}
    return result.model_copy(update={"data": scrub_tree(redact_tree(result.data), seen), **texts})


def kube_module(
    spec: ModuleSpec[ArgsT],
) -> Callable[[Callable[[ModuleCall, ArgsT], ModuleResult]], Callable[[ModuleCall], ModuleResult]]:
    """`@module_activity(spec)` plus the error translation and scrubbing above."""

    def wrap(fn: Callable[[ModuleCall, ArgsT], ModuleResult]) -> Callable[[ModuleCall], ModuleResult]:
        @functools.wraps(fn)
        def run(call: ModuleCall, args: ArgsT) -> ModuleResult:
            with collecting() as seen:
                try:
                    with api_errors(spec.name):
                        result = fn(call, args)
                except ApplicationError as exc:
                    scrubbed = scrub_text(exc.message, seen)
                    if scrubbed == exc.message:
                        raise
                    raise ApplicationError(
                        scrubbed or "", *exc.details, type=exc.type, non_retryable=exc.non_retryable
                    ) from None
                return scrubbed_result(result, seen)

        return module_activity(spec)(run)

    return wrap
