"""Strict host-key checking against a known_hosts file or secret, as OpenSSH's
`StrictHostKeyChecking yes`: an unknown host and a changed key are both refused, with the
offered key's SHA256 fingerprint in the message. Hashed known_hosts entries work.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

import paramiko

from pitstop.secrets import SecretNotFound, resolve_secret
from pitstop.ssh.errors import host_key_changed, host_key_unknown, precondition
from pitstop.ssh.keys import fingerprint
from pitstop.ssh.target import SSHTarget


@dataclass(frozen=True)
class KnownHosts:
    """Parsed known_hosts lines and where they came from (for messages)."""

    source: str
    keys: paramiko.HostKeys

    def install(self, client: paramiko.SSHClient, name: str) -> None:
        """Give `client` this host's known keys and a policy refusing unknown hosts."""
        known = self.keys.lookup(name)
        if known is not None:
            for key_type, key in known.items():
                client.get_host_keys().add(name, key_type, key)
        client.set_missing_host_key_policy(RefuseUnknownHost(self.source))

    def changed_error(self, name: str, offered: paramiko.PKey, expected: paramiko.PKey) -> Exception:
        return host_key_changed(
            name, offered.get_name(), fingerprint(offered), fingerprint(expected), self.source
        )


class RefuseUnknownHost(paramiko.MissingHostKeyPolicy):
    """Never AutoAdd, never just warn: a host missing from known_hosts is an error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise host_key_unknown(hostname, key.get_name(), fingerprint(key), self.source)


def parse_known_hosts(text: str) -> paramiko.HostKeys:
    keys = paramiko.HostKeys()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("@"):
            continue  # @cert-authority / @revoked markers are not supported: skip, never trust
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line)
        except (paramiko.SSHException, ValueError):
            continue
        if entry is None or entry.key is None:
            continue
        for hostname in entry.hostnames:
            keys.add(hostname, entry.key.get_name(), entry.key)
    return keys


_cache: dict[tuple[str, str], KnownHosts] = {}
_cache_lock = threading.Lock()


def _cached(kind: str, stamp: str, text: str, source: str) -> KnownHosts:
    key = (kind, stamp)
    with _cache_lock:
        found = _cache.get(key)
        if found is None:
            found = KnownHosts(source, parse_known_hosts(text))
            if len(_cache) > 64:
                _cache.clear()
            _cache[key] = found
        return found


def known_hosts_for(target: SSHTarget) -> KnownHosts:
    """The known hosts to check `target` against: the inventory's secret (granted by the policy
    as the cluster's `ssh_known_hosts`), else the worker's file for the cluster."""
    if target.known_hosts_secret is not None:
        ref = target.known_hosts_secret
        try:
            text = resolve_secret(
                ref, "ssh_known_hosts", what="cluster.ssh.known_hosts_secret", cluster=target.cluster
            )
        except SecretNotFound as exc:
            raise precondition(f"cluster.ssh.known_hosts_secret: {exc}") from None
        digest = hashlib.sha256(text.encode()).hexdigest()
        return _cached(
            "secret", f"{ref.secret}/{ref.key}/{digest}", text, f"known_hosts secret {ref.secret!r}"
        )
    if target.known_hosts is None:
        raise precondition(f"no known_hosts for {target.name}: the worker policy names none for its cluster")
    path = Path(target.known_hosts)
    try:
        stat = path.stat()
        text = path.read_text()
    except OSError as exc:
        raise precondition(
            f"cannot read known_hosts file {path} for {target.name} ({exc.strerror}); the worker's "
            f"operator must put the nodes' host keys there (cluster {target.cluster!r} in the worker "
            "policy), or name a secret in cluster.ssh.known_hosts_secret"
        ) from None
    return _cached("file", f"{path}:{stat.st_mtime_ns}:{stat.st_size}", text, f"known_hosts file {path}")
