"""The http rule: which http(s) endpoints modules may send requests to (`http.endpoints`).

A runbook names URLs (a container registry, a model registry); without this rule a hostile
runbook could make the worker probe its own network (cloud metadata at 169.254.169.254, an
internal admin port) and read the answers back from the task's result. Endpoints are compared
as scheme, host and port (`pitstop.policy.urls`); redirects are not followed by the modules, so
an allowed server cannot send the worker on to one that is not.
"""

from __future__ import annotations

from pitstop.policy.effective import WorkerPolicy
from pitstop.policy.errors import ASK_OPERATOR, policy_violation
from pitstop.policy.load import current_policy
from pitstop.policy.urls import normalize_endpoint


def endpoint_of(url: str) -> str:
    """`scheme://host:port` of a URL that may carry a path (ValueError naming the problem)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{url!r} carries user information; credentials belong in secrets")
    return normalize_endpoint(f"{parts.scheme}://{parts.netloc}")


def check_http(url: str, what: str, policy: WorkerPolicy | None = None) -> str:
    """The normalized endpoint of `url` when the policy allows it; else a PolicyViolation."""
    policy = policy or current_policy()
    try:
        endpoint = endpoint_of(url)
    except ValueError as exc:
        raise policy_violation(f"{what}: url {exc}", fix=None) from None
    if endpoint not in {rule.endpoint for rule in policy.http}:
        listed = ", ".join(rule.shown for rule in policy.http) or "none"
        raise policy_violation(
            f"{what}: {url} is not an endpoint this worker may send requests to (policy http.endpoints: "
            f"{listed})",
            fix=ASK_OPERATOR,
        )
    return endpoint
