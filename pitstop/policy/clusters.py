"""The clusters rule: an inventory names a cluster; the worker alone knows how to reach it.

A cluster is known to a worker when the policy lists it under `clusters:` or when it is
registered in the clusters directory (`$PITSTOP_HOME/clusters/<name>/` by default) with a
`kubeconfig` and/or a `known_hosts` file — what `pitstop sim serve`, the demo and an operator's
provisioning write. A policy entry overrides the registered files field by field.

Kubeconfigs whose user runs a program (`exec`) or an auth plugin (`auth-provider`) are refused
before the Kubernetes client reads them, unless the policy sets `allow_exec: true` for that
cluster: a kubeconfig is configuration, and configuration must not run code on the worker.
"""

from __future__ import annotations

import copy
import functools
import io
import os
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from pitstop.policy.effective import ClusterRule, WorkerPolicy
from pitstop.policy.errors import POLICY_ENV, policy_violation
from pitstop.policy.load import current_policy
from pitstop.policy.model import NAME

KUBECONFIG = "kubeconfig"
KNOWN_HOSTS = "known_hosts"


def registered_clusters(policy: WorkerPolicy) -> dict[str, ClusterRule]:
    """Clusters registered in the clusters directory, by name."""
    found: dict[str, ClusterRule] = {}
    root = policy.clusters_dir.path
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.is_dir() or not NAME.match(entry.name):
            continue
        kubeconfig, known = entry / KUBECONFIG, entry / KNOWN_HOSTS
        if not (kubeconfig.is_file() or known.is_file()):
            continue
        found[entry.name] = ClusterRule(
            name=entry.name,
            kubeconfig=kubeconfig if kubeconfig.is_file() else None,
            known_hosts=known if known.is_file() else None,
            origin=f"registered in {entry}",
        )
    return found


def known_clusters(policy: WorkerPolicy) -> dict[str, ClusterRule]:
    """Every cluster this worker may act on: registered ones, overridden by the policy's."""
    merged = registered_clusters(policy)
    for name, rule in policy.clusters.items():
        base = merged.get(name)
        if base is None:
            merged[name] = rule
            continue
        merged[name] = rule.model_copy(
            update={
                "kubeconfig": rule.kubeconfig or (None if rule.in_cluster else base.kubeconfig),
                "known_hosts": rule.known_hosts or base.known_hosts,
                "origin": f"{rule.origin} (and {base.origin})",
            }
        )
    return merged


def how_to_register(policy: WorkerPolicy, name: str) -> str:
    where = policy.clusters_dir.path / name
    return (
        f"ask the worker's operator to register it: put its kubeconfig at {where / KUBECONFIG} (and its "
        f"nodes' known_hosts at {where / KNOWN_HOSTS}), or add clusters.{name} to {POLICY_ENV}"
    )


def cluster_rule(name: str | None, what: str, policy: WorkerPolicy | None = None) -> ClusterRule:
    """The worker's rule for the inventory's cluster, or a PolicyViolation."""
    policy = policy or current_policy()
    if not name:
        raise policy_violation(
            f"{what}: the inventory names no cluster; add `cluster: {{name: NAME}}` to the inventory "
            "(the worker holds that cluster's kubeconfig and known_hosts)",
            fix=None,
        )
    clusters = known_clusters(policy)
    rule = clusters.get(name)
    if rule is None:
        known = ", ".join(sorted(clusters)) or "none"
        raise policy_violation(
            f"{what}: cluster {name!r} is not one this worker may act on (known clusters: {known}; "
            f"policy clusters and {policy.clusters_dir.path})",
            fix=how_to_register(policy, name),
        )
    return rule


# --- kubeconfigs -------------------------------------------------------------------------------


def _named(items: Any, name: str, key: str) -> dict[str, Any] | None:
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("name") == name and isinstance(item.get(key), dict):
            found: dict[str, Any] = item[key]
            return found
    return None


@functools.lru_cache(maxsize=64)
def _parse(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(io.StringIO(text))


def _parsed(text: str) -> Any:
    """The YAML document in `text`. Every kube task of every host reads its cluster's
    kubeconfig; parsing it (pure-Python YAML) was a visible share of a busy worker's CPU, so
    parses are remembered by content: the file is still read and checked on every call, and a
    rewritten kubeconfig is a different text. Each caller gets its own copy."""
    return copy.deepcopy(_parse(text))


def checked_kubeconfig(rule: ClusterRule, what: str) -> dict[str, Any]:
    """The cluster's kubeconfig as data, read once, after refusing users that run programs.

    The Kubernetes client is then given this very data (never the file again), so the file
    cannot be swapped between the check and its use.
    """
    path = rule.kubeconfig
    if path is None:
        raise policy_violation(
            f"{what}: cluster {rule.name!r} has no Kubernetes access on this worker ({rule.origin})",
            fix=f"ask the worker's operator to give it a kubeconfig or in_cluster: true in {POLICY_ENV}",
        )
    try:
        data = _parsed(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, YAMLError) as exc:
        raise policy_violation(
            f"{what}: the kubeconfig of cluster {rule.name!r} ({path}) cannot be read: {exc}",
            fix="ask the worker's operator to fix it",
        ) from None
    if not isinstance(data, dict):
        raise policy_violation(
            f"{what}: the kubeconfig of cluster {rule.name!r} ({path}) is not a kubeconfig",
            fix="ask the worker's operator to fix it",
        )
    context_name = rule.context or data.get("current-context")
    context = _named(data.get("contexts"), str(context_name), "context") if context_name else None
    if context is None:
        raise policy_violation(
            f"{what}: the kubeconfig of cluster {rule.name!r} ({path}) has no context {context_name!r}",
            fix="ask the worker's operator to fix the cluster's context",
        )
    user_name = context.get("user")
    user = _named(data.get("users"), str(user_name), "user") if user_name else None
    plugins = [key for key in ("exec", "auth-provider") if user and user.get(key)]
    if plugins and not rule.allow_exec:
        raise policy_violation(
            f"{what}: the kubeconfig of cluster {rule.name!r} ({path}) authenticates user {user_name!r} "
            f"with an {plugins[0]!r} plugin, which runs a program on the worker; refused (policy "
            f"clusters.{rule.name}.allow_exec is false)",
            fix=f"ask the worker's operator to set clusters.{rule.name}.allow_exec: true in {POLICY_ENV} "
            "if that program is trusted",
        )
    return data


# --- registering -------------------------------------------------------------------------------


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    tmp.replace(path)


def register_cluster(
    name: str,
    *,
    kubeconfig: str | None = None,
    known_hosts: str | None = None,
    policy: WorkerPolicy | None = None,
) -> Path:
    """Register a cluster with the worker: write its kubeconfig and known_hosts (texts) into
    `<clusters_dir>/<name>/` (0600). What `pitstop sim serve` and the demo do, and what an
    operator's provisioning does for a real cluster. Returns the cluster's directory."""
    if not NAME.match(name) or ".." in name:
        raise ValueError(f"cluster name {name!r} is not valid; use letters, digits, '.', '_' and '-'")
    policy = policy or current_policy()
    directory = policy.clusters_dir.path / name
    for text, target in ((kubeconfig, KUBECONFIG), (known_hosts, KNOWN_HOSTS)):
        if text is not None:
            _replace(directory / target, text)
    return directory
