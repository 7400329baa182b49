"""The two ways the worker policy says no.

`PolicyError`: the policy file itself is invalid (the worker refuses to start; the message is
one line naming file:line:column and the fix). `policy_violation(...)`: a runbook, an inventory
or a Temporal client asked for something the policy does not allow; it is a non-retryable
`ApplicationError(type="PolicyViolation")` raised before any side effect, and its message names
the rule and how to allow it.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from pitstop.errors import ErrorType

POLICY_ENV = "PITSTOP_WORKER_POLICY"
VIOLATION = ErrorType.POLICY_VIOLATION.value
ASK_OPERATOR = f"ask the worker's operator to add it to {POLICY_ENV}"


class PolicyError(ValueError):
    """The policy file cannot be used; `str(e)` is `file:line:col: message`."""


def policy_violation(message: str, *, fix: str | None = ASK_OPERATOR) -> ApplicationError:
    """The error every refusal raises: non-retryable, type PolicyViolation."""
    text = f"{message}; {fix}" if fix else message
    return ApplicationError(text, type=VIOLATION, non_retryable=True)
