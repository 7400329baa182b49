"""The S3 rule: which endpoints (and AWS itself) and which buckets modules may use.

The endpoint judged is the one the client will use: the module's `endpoint_url`, else the
worker's AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else `aws`. The S3 client is then built with
exactly that endpoint (and told to ignore endpoints configured elsewhere), so nothing is
signed or sent to an endpoint the policy does not list.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping

from pitstop.policy.effective import S3Rule, WorkerPolicy
from pitstop.policy.errors import ASK_OPERATOR, policy_violation
from pitstop.policy.load import current_policy
from pitstop.policy.urls import AWS, normalize_endpoint


def effective_endpoint(endpoint_url: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The endpoint URL the client will use; None for AWS's own."""
    return endpoint_url or environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL") or None


def check_s3(endpoint_url: str | None, bucket: str, what: str, policy: WorkerPolicy | None = None) -> S3Rule:
    """The rule allowing `bucket` at the endpoint, or a PolicyViolation naming the rule."""
    policy = policy or current_policy()
    shown = endpoint_url or "AWS (no endpoint_url)"
    try:
        endpoint = normalize_endpoint(endpoint_url) if endpoint_url else AWS
    except ValueError as exc:
        raise policy_violation(f"{what}: endpoint_url {exc}", fix=None) from None
    listed = ", ".join(rule.shown for rule in policy.s3) or "none"
    rules = [rule for rule in policy.s3 if rule.endpoint == endpoint]
    if not rules:
        raise policy_violation(
            f"{what}: S3 endpoint {shown} is not one this worker may use (policy s3.endpoints: {listed})",
            fix=ASK_OPERATOR,
        )
    for rule in rules:
        if any(fnmatch.fnmatchcase(bucket, pattern) for pattern in rule.buckets):
            return rule
    allowed = ", ".join(pattern for rule in rules for pattern in rule.buckets)
    raise policy_violation(
        f"{what}: bucket {bucket!r} at {shown} is not one this worker may use (policy s3.endpoints "
        f"{rules[0].shown} buckets: {allowed})",
        fix=ASK_OPERATOR,
    )
