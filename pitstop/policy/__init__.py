"""The worker policy: what runbooks, inventories and Temporal clients may make this worker touch.

One file the operator owns (`PITSTOP_WORKER_POLICY`, YAML; see docs/policy.md): which
directories modules may read and write, which clusters the worker acts on (and how it reaches
them), which S3 endpoints and buckets and which etcd endpoints modules may use, and which
secret may be used for what. Anything else is refused before any side effect with a
non-retryable `PolicyViolation` naming the rule and how to allow it.
"""

from pitstop.policy.effective import ClusterRule, WorkerPolicy
from pitstop.policy.errors import POLICY_ENV, VIOLATION, PolicyError, policy_violation
from pitstop.policy.load import DEFAULT_FILE_NAME, current_policy, load_policy, policy_file

__all__ = [
    "DEFAULT_FILE_NAME",
    "POLICY_ENV",
    "VIOLATION",
    "ClusterRule",
    "PolicyError",
    "WorkerPolicy",
    "current_policy",
    "load_policy",
    "policy_file",
    "policy_violation",
]
