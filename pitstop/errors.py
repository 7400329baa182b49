"""The one error vocabulary of pitstop's activities: every error type an activity raises, the
types no retry policy ever retries, and `fail()`, the one way to raise them.

The values are the strings Temporal records as the failure's type, in histories and in the
messages people read (`PreconditionFailed: ...`): never rename one. This file imports nothing
but Temporal's exception type, so workflows, activities and the module specs can all use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, NoReturn

from temporalio.exceptions import ApplicationError


class ErrorType(StrEnum):
    """The type of an `ApplicationError` raised by pitstop (its `.type`)."""

    # What the runbook, the inventory or the cluster's state makes impossible: never retried.
    INVALID_ARGS = "InvalidArgs"
    PRECONDITION_FAILED = "PreconditionFailed"
    UNAUTHORIZED = "Unauthorized"
    POLICY_VIOLATION = "PolicyViolation"
    # Non-retryable in the families that raise them (their retry policy lists them).
    NOT_FOUND = "NotFound"
    CHECKSUM_MISMATCH = "ChecksumMismatch"
    SNAPSHOT_CORRUPT = "SnapshotCorrupt"
    HOST_KEY_MISMATCH = "HostKeyMismatch"
    FIRMWARE_UPDATE_FAILED = "FirmwareUpdateFailed"
    REBOOT_TIMEOUT = "RebootTimeout"
    VOTE_REFUSED = "VoteRefused"
    # Retried by Temporal unless raised non-retryable at the spot.
    CONNECTION_LOST = "ConnectionLost"
    HOST_UNREACHABLE = "HostUnreachable"
    CLUSTER_UNREACHABLE = "ClusterUnreachable"
    KUBE_API_ERROR = "KubeApiError"
    S3_ERROR = "S3Error"
    S3_UNAVAILABLE = "S3Unavailable"
    UPLOAD_VERIFY_FAILED = "UploadVerifyFailed"
    ETCD_UNAVAILABLE = "EtcdUnavailable"
    SCRATCH_MEMBER_NOT_READY = "ScratchMemberNotReady"
    TIMEOUT = "Timeout"
    SLACK_UNAVAILABLE = "SlackUnavailable"
    PROMETHEUS_UNAVAILABLE = "PrometheusUnavailable"


# Never retried by any module: the default `non_retryable_error_types` of every module's retry
# policy (families add their own), and what `fail()` raises non-retryable unless told. Retrying
# cannot fix a bad argument, a missing precondition, a refused credential or a policy refusal.
NON_RETRYABLE: tuple[ErrorType, ...] = (
    ErrorType.INVALID_ARGS,
    ErrorType.PRECONDITION_FAILED,
    ErrorType.UNAUTHORIZED,
    ErrorType.POLICY_VIOLATION,
)


def non_retryable_types(*also: ErrorType) -> tuple[str, ...]:
    """A retry policy's `non_retryable_error_types`: `NON_RETRYABLE`, then a family's own types."""
    return tuple(t.value for t in (*NON_RETRYABLE, *also))


def make_error(
    error_type: ErrorType,
    message: str,
    *,
    details: Sequence[Any] = (),
    non_retryable: bool | None = None,
    next_retry_delay: Any = None,
) -> ApplicationError:
    """The `ApplicationError` `fail()` raises, for code that returns it to be raised elsewhere.
    `non_retryable` defaults to whether the type is in `NON_RETRYABLE`."""
    if non_retryable is None:
        non_retryable = error_type in NON_RETRYABLE
    return ApplicationError(
        message,
        *details,
        type=error_type.value,
        non_retryable=non_retryable,
        next_retry_delay=next_retry_delay,
    )


def fail(
    error_type: ErrorType,
    message: str,
    *,
    details: Sequence[Any] = (),
    non_retryable: bool | None = None,
    next_retry_delay: Any = None,
) -> NoReturn:
    """Raise `make_error(...)`: the one way an activity reports an error Temporal should see."""
    raise make_error(
        error_type, message, details=details, non_retryable=non_retryable, next_retry_delay=next_retry_delay
    )
