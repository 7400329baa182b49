"""The http rule: which http(s) endpoints modules may send requests to (`http.endpoints`).

A runbook names URLs (a container registry, a model registry); without this rule a hostile
runbook could make the worker probe its own network (cloud metadata at 169.254.169.254, an
internal admin port) and read the answers back from the task's result. Endpoints are compared
as scheme, host and port (`pitstop.policy.urls`); redirects are not followed by the modules, so
an allowed server cannot send the worker on to one that is not.
"""

from __future__ import annotations

from pitstop.policy.effective import WorkerPolicy
from pitstop.policy.load import current_policy
from pitstop.policy.urls import allowed_server


def check_http(url: str, what: str, policy: WorkerPolicy | None = None) -> str:
    """The normalized endpoint of `url` when the policy allows it; else a PolicyViolation."""
    policy = policy or current_policy()
    refusal = "an endpoint this worker may send requests to (policy http.endpoints"
    return allowed_server(url, what, policy.http, refusal=refusal)
