"""The secrets rule: a secret is bound to one purpose, and may be scoped further.

`fleet-ssh-key: {purpose: ssh_key, clusters: [prod]}` may only be the SSH key of prod's nodes;
`backup-s3: {purpose: s3_credentials, endpoints: [aws]}` only S3 credentials sent to AWS. A
secret the policy does not name is granted to nothing. The check runs before the secret is
read, so a refused secret is never even loaded.
"""

from __future__ import annotations

from pitstop.policy.effective import Grant, WorkerPolicy
from pitstop.policy.errors import POLICY_ENV, policy_violation
from pitstop.policy.load import current_policy
from pitstop.policy.model import PURPOSE_WORDS, Purpose


def _fix(name: str, purpose: Purpose) -> str:
    return (
        f"ask the worker's operator to grant it in {POLICY_ENV} (secrets.{name}: {{purpose: {purpose}}}) "
        "if that is what it is for"
    )


def check_grant(
    name: str,
    purpose: Purpose,
    *,
    what: str,
    cluster: str | None = None,
    endpoints: list[str] | None = None,
    policy: WorkerPolicy | None = None,
) -> Grant:
    """The grant allowing secret `name` for `purpose` (in `cluster`, towards `endpoints`, given
    normalized), or a PolicyViolation that names the rule."""
    policy = policy or current_policy()
    use = PURPOSE_WORDS[purpose]
    grant = policy.secrets.get(name)
    if grant is None:
        listed = ", ".join(sorted(policy.secrets)) or "none"
        raise policy_violation(
            f"{what}: secret {name!r} is not granted to any use on this worker (policy secrets: {listed})",
            fix=_fix(name, purpose),
        )
    if grant.purpose != purpose:
        raise policy_violation(
            f"{what}: secret {name!r} may only be used as {PURPOSE_WORDS[grant.purpose]}, not as {use} "
            f"(policy secrets.{name}.purpose: {grant.purpose}, {grant.origin})",
            fix=None,
        )
    if grant.clusters is not None and cluster not in grant.clusters:
        raise policy_violation(
            f"{what}: secret {name!r} may be used as {use} of cluster(s) {', '.join(grant.clusters)} only, "
            f"not of {cluster!r} (policy secrets.{name}.clusters, {grant.origin})",
            fix=None,
        )
    if grant.endpoints is not None:
        outside = [e for e in endpoints or [] if e not in grant.endpoints]
        if outside:
            raise policy_violation(
                f"{what}: secret {name!r} may be sent to {', '.join(grant.endpoints)} only, not to "
                f"{', '.join(outside)} (policy secrets.{name}.endpoints, {grant.origin})",
                fix=None,
            )
    return grant
