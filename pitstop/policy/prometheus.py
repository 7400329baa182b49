"""The prometheus rule: which Prometheus and Alertmanager endpoints `prom.*` may query.

A runbook names the URL (a template, an inventory variable): without this rule a hostile runbook
could make the worker send requests into its own network (cloud metadata at 169.254.169.254, an
internal admin port) and read the answers back from the task's result and message — and, with a
bearer token granted, present that token to a server the runbook chose. So endpoints are an
allow-list compared as scheme, host and port (`pitstop.policy.urls`). The URL's path stays the
runbook's to say: Prometheus behind `--web.route-prefix` or an API server's service proxy lives
below `/`. Redirects are not followed (see `pitstop.prom.http`), so an allowed server cannot
send the worker on to one that is not.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pitstop.policy.effective import WorkerPolicy
from pitstop.policy.errors import ASK_OPERATOR, policy_violation
from pitstop.policy.load import current_policy
from pitstop.policy.urls import normalize_endpoint


def prometheus_endpoint(url: str) -> str:
    """`scheme://host:port` of a URL that may carry a path; ValueError naming the problem."""
    parts = urlsplit(url.strip())
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{url!r} carries user information; credentials belong in secrets")
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r} has a query or fragment; give the server's base URL")
    return normalize_endpoint(f"{parts.scheme}://{parts.netloc}")


def check_prometheus(url: str, what: str, policy: WorkerPolicy | None = None) -> str:
    """The normalized endpoint of `url` when the policy allows it; else a PolicyViolation."""
    policy = policy or current_policy()
    try:
        endpoint = prometheus_endpoint(url)
    except ValueError as exc:
        raise policy_violation(f"{what}: url {exc}", fix=None) from None
    if endpoint not in {rule.endpoint for rule in policy.prometheus}:
        listed = ", ".join(rule.shown for rule in policy.prometheus) or "none"
        raise policy_violation(
            f"{what}: {url} is not a Prometheus or Alertmanager this worker may query (policy "
            f"prometheus.endpoints: {listed})",
            fix=ASK_OPERATOR,
        )
    return endpoint
