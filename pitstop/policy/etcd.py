"""The etcd rule: which etcd client URLs modules may connect to.

A client certificate's private key never crosses the wire, but where the worker connects still
matters: a snapshot taken from a server the runbook chose would be uploaded as the cluster's
backup (and retention would then prune real ones), and the cluster's client certificate would
be presented to whoever runs that server. So etcd endpoints are an allow-list, as S3 endpoints
are, and an `etcd_tls` grant may narrow where its certificate is used.

The one exception is a restore drill's own scratch member: an etcd this worker started
(`etcd.scratch_member`) on a loopback port, on data in a directory the run may write (its work
directory or the policy's files.write). It is recognised from the process table (the etcd
binary, its --listen-client-urls and --data-dir), not from anything a runbook could write.
"""

from __future__ import annotations

from pathlib import Path

from pitstop.policy.effective import WorkerPolicy
from pitstop.policy.errors import ASK_OPERATOR, policy_violation
from pitstop.policy.files import run_work_dir
from pitstop.policy.load import current_policy
from pitstop.policy.urls import normalize_endpoint


def _scratch_member_urls(roots: list[Path]) -> set[str]:
    """Client URLs of loopback etcd processes serving data inside one of `roots`."""
    from pitstop.devstack import MissingBinaryError, etcd_tool

    try:
        binary = str(etcd_tool("etcd")).encode()
    except MissingBinaryError:
        return set()
    prefixes = tuple(str(root).rstrip("/").encode() + b"/" for root in roots)
    urls: set[str] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or argv[0] != binary:
            continue
        flags = dict(arg.split(b"=", 1) for arg in argv[1:] if arg.startswith(b"--") and b"=" in arg)
        data_dir = flags.get(b"--data-dir", b"")
        client = flags.get(b"--listen-client-urls", b"")
        if data_dir.startswith(prefixes) and client.startswith(b"http://127.0.0.1:"):
            urls.add(normalize_endpoint(client.decode()))
    return urls


def check_etcd(
    endpoints: list[str], *, run_id: str, what: str, policy: WorkerPolicy | None = None
) -> list[str]:
    """The normalized endpoints, when every one is allowed; else a PolicyViolation."""
    policy = policy or current_policy()
    allowed = {rule.endpoint for rule in policy.etcd}
    normalized: list[str] = []
    scratch: set[str] | None = None
    for url in endpoints:
        try:
            endpoint = normalize_endpoint(url)
        except ValueError as exc:
            raise policy_violation(f"{what}: endpoint {exc}", fix=None) from None
        if endpoint not in allowed:
            if scratch is None:
                roots = [run_work_dir(run_id, policy), *(rule.path for rule in policy.write)]
                scratch = _scratch_member_urls(roots)
            if endpoint not in scratch:
                listed = ", ".join(rule.shown for rule in policy.etcd) or "none"
                raise policy_violation(
                    f"{what}: etcd endpoint {url} is not one this worker may connect to (policy "
                    f"etcd.endpoints: {listed}; nor is it this run's scratch member)",
                    fix=ASK_OPERATOR,
                )
        normalized.append(endpoint)
    return normalized
