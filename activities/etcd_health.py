"""`etcd.health`: is the etcd cluster fit to be upgraded, in etcd's own words (the rules:
`pitstop/etcd_health.py`). Read-only: `etcdctl member list`, `endpoint status`, `alarm list`
and each endpoint's `/metrics`, only at endpoints the worker policy allows, with the TLS
material the policy grants for them."""

from __future__ import annotations

import json
import ssl
import time
from typing import Any

import httpx

from activities.etcd import _beat, _probe_timeout, _tail, allowed_endpoints, etcdctl, tls_flags
from activities.module_activity import module_activity
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, make_error
from pitstop.etcd_health import (
    MemberHealth,
    MemberMetrics,
    alarm_names,
    judge,
    member_health,
    parse_metrics,
    window_buckets,
)
from pitstop.module_args.etcd import HEALTH, HealthArgs


def _json(args: HealthArgs, endpoint: str, *command: str, tls: list[str]) -> tuple[Any, str]:
    """(parsed output, "") or (None, why): a member that does not answer is a finding here."""
    done = etcdctl(args, endpoint, *command, "-w", "json", tls=tls, command_timeout_s=_probe_timeout(args))
    if done.returncode != 0:
        return None, _tail(done.stderr or done.stdout, 2).replace("\n", " ")
    try:
        return json.loads(done.stdout), ""
    except json.JSONDecodeError:
        return None, f"etcdctl {' '.join(command)} printed something that is not JSON"


def _http_client(tls: list[str], timeout: float) -> httpx.Client:
    """A client for `/metrics` with the same TLS material etcdctl got (paths in its flags)."""
    flags = dict(flag.removeprefix("--").split("=", 1) for flag in tls)
    context = ssl.create_default_context(cafile=flags.get("cacert"))
    if "cert" in flags and "key" in flags:
        context.load_cert_chain(flags["cert"], flags["key"])
    # No environment proxies: the request goes exactly where the policy allowed.
    return httpx.Client(verify=context, timeout=timeout, trust_env=False)


def _metrics(client: httpx.Client, endpoint: str) -> MemberMetrics | None:
    try:
        response = client.get(f"{endpoint.rstrip('/')}/metrics")
    except httpx.HTTPError:
        return None
    return parse_metrics(response.text) if response.status_code == 200 else None


@module_activity(HEALTH)
def etcd_health(call: ModuleCall, args: HealthArgs) -> ModuleResult:
    endpoints = allowed_endpoints(args, call)
    with tls_flags(args, call) as tls, _http_client(tls, _probe_timeout(args)) as client:
        statuses: dict[str, tuple[dict[str, Any] | None, str]] = {}
        for endpoint in endpoints:
            _beat(f"status of {endpoint}")
            found, why = _json(args, endpoint, "endpoint", "status", tls=tls)
            entry = found[0].get("Status") if isinstance(found, list) and found else None
            statuses[endpoint] = (entry, why)
        answering = [e for e, (entry, _) in statuses.items() if entry is not None]
        if not answering:
            said = "; ".join(f"{e}: {why}" for e, (_, why) in statuses.items())
            raise make_error(ErrorType.ETCD_UNAVAILABLE, f"no etcd endpoint answered: {said}")
        members, _ = _json(args, answering[0], "member", "list", tls=tls)
        alarms, _ = _json(args, answering[0], "alarm", "list", tls=tls)
        first = {e: _metrics(client, e) for e in answering}
        windows: dict[str, dict[float, float]] = {}
        if args.sample_seconds > 0:
            deadline = time.monotonic() + args.sample_seconds
            while time.monotonic() < deadline:
                _beat("sampling WAL fsync")
                time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
            for endpoint, before in first.items():
                after = _metrics(client, endpoint)
                if before is not None and after is not None:
                    windows[endpoint] = window_buckets(before.fsync_buckets, after.fsync_buckets)
    per_member: list[MemberHealth] = [
        member_health(e, entry, first.get(e), why, windows.get(e)) for e, (entry, why) in statuses.items()
    ]
    member_count = len((members or {}).get("members") or []) or len(endpoints)
    health = judge(
        member_count,
        per_member,
        alarm_names(alarms or {}),
        expected_members=args.expected_members,
        max_db_ratio=args.max_db_ratio,
        max_fsync_p99_ms=args.max_fsync_p99_ms,
        max_leader_changes=args.max_leader_changes,
    )
    summary = (
        f"{health.answered} of {health.members} member(s) answered (quorum {health.quorum}), "
        f"leader {health.leader or 'none'}"
    )
    msg = (
        f"etcd not fit for the change: {'; '.join(health.problems)} ({summary})"
        if health.problems
        else (f"etcd healthy: {summary}, no alarm")
    )
    return ModuleResult(
        changed=False,
        failed=bool(health.problems) and args.fail_on == "any",
        msg=msg,
        data=health.model_dump(),
    )
