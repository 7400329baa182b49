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

from pitstop.policy.effective import WorkerPolicy
from pitstop.policy.load import current_policy
from pitstop.policy.urls import allowed_server


def check_prometheus(url: str, what: str, policy: WorkerPolicy | None = None) -> str:
    """The normalized endpoint of `url` when the policy allows it; else a PolicyViolation."""
    policy = policy or current_policy()
    refusal = "a Prometheus or Alertmanager this worker may query (policy prometheus.endpoints"
    return allowed_server(url, what, policy.prometheus, refusal=refusal, base_only=True)
