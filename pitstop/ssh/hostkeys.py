"""Strict host-key checking against a known_hosts file or secret, as OpenSSH's
`StrictHostKeyChecking yes`: an unknown host and a changed key are both refused, with the
offered key's SHA256 fingerprint in the message. Hashed known_hosts entries work.

Markers (OpenSSH's sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT"):
* `@revoked PATTERNS KEYTYPE KEY`: the key is never accepted, even where another line lists it
  as the host's key. pitstop refuses a revoked key for every host, whatever the line's host
  patterns (stricter than OpenSSH, which applies them: a revoked key is a stolen key).
* `@cert-authority PATTERNS KEYTYPE KEY`: host certificates are not supported (paramiko does
  not verify them), so such a line trusts nothing; a host it would have covered is refused as
  unknown, and the message says why and what to do.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from pitstop.secrets import SecretNotFound, resolve_secret
from pitstop.ssh.errors import host_key_changed, host_key_revoked, host_key_unknown, precondition
from pitstop.ssh.keys import fingerprint
from pitstop.ssh.target import SSHTarget


@dataclass(frozen=True)
class ParsedKnownHosts:
    """The lines of one known_hosts text: good keys, revoked keys, certificate authorities."""

    keys: paramiko.HostKeys
    # key blob -> the line (1-based) that revoked it
    revoked: dict[bytes, int] = field(default_factory=dict)
    # (host patterns, line) of each @cert-authority line (trusted for nothing)
    cert_authorities: list[tuple[list[str], int]] = field(default_factory=list)


@dataclass(frozen=True)
class KnownHosts:
    """Parsed known_hosts lines and where they came from (for messages)."""

    source: str
    keys: paramiko.HostKeys
    revoked: dict[bytes, int] = field(default_factory=dict)
    cert_authorities: list[tuple[list[str], int]] = field(default_factory=list)

    def install(self, client: paramiko.SSHClient, name: str) -> None:
        """Give `client` this host's known keys (never a revoked one) and a policy refusing
        unknown hosts: a revoked key is refused before authentication, as unknown or changed,
        and `check_offered` names it as revoked."""
        known = self.keys.lookup(name)
        if known is not None:
            for key_type, key in known.items():
                if key.asbytes() not in self.revoked:
                    client.get_host_keys().add(name, key_type, key)
        client.set_missing_host_key_policy(RefuseUnknownHost(self, name))

    def revoked_error(self, name: str, offered: paramiko.PKey) -> Exception | None:
        line = self.revoked.get(offered.asbytes())
        if line is None:
            return None
        return host_key_revoked(name, offered.get_name(), fingerprint(offered), f"{self.source} line {line}")

    def check_offered(self, name: str, offered: paramiko.PKey) -> None:
        """Refuse a connection whose server key is revoked (checked again after connecting, and
        whenever a pooled connection is reused: known_hosts may have changed since)."""
        revoked = self.revoked_error(name, offered)
        if revoked is not None:
            raise revoked

    def changed_error(self, name: str, offered: paramiko.PKey, expected: paramiko.PKey) -> Exception:
        revoked = self.revoked_error(name, offered)
        if revoked is not None:
            return revoked
        return host_key_changed(
            name, offered.get_name(), fingerprint(offered), fingerprint(expected), self.source
        )

    def unknown_error(self, name: str, offered: paramiko.PKey) -> Exception:
        revoked = self.revoked_error(name, offered)
        if revoked is not None:
            return revoked
        lines = [line for patterns, line in self.cert_authorities if _matches(name, patterns)]
        hint = (
            f"; {self.source} has @cert-authority at line {', '.join(map(str, lines))} for this host, "
            "but pitstop does not verify host certificates: list the host's own key instead"
            if lines
            else ""
        )
        return host_key_unknown(name, offered.get_name(), fingerprint(offered), self.source, hint)


def _glob(name: str, pattern: str) -> bool:
    """OpenSSH's wildcards: `*` and `?` only (`[` is literal, as in `[host]:port`)."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.IGNORECASE) is not None


def _matches(name: str, patterns: list[str]) -> bool:
    """OpenSSH host patterns (`*`, `?`, `!negation`) against a known_hosts name."""
    host = name
    bare = name[1:].split("]:", 1)[0] if name.startswith("[") else name
    allowed = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        if _glob(host, body) or _glob(bare, body):
            if negated:
                return False
            allowed = True
    return allowed


class RefuseUnknownHost(paramiko.MissingHostKeyPolicy):
    """Never AutoAdd, never just warn: a host missing from known_hosts is an error."""

    def __init__(self, known: KnownHosts, name: str) -> None:
        self.known = known
        self.name = name

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise self.known.unknown_error(self.name, key)


def read_known_hosts(text: str) -> ParsedKnownHosts:
    """Every line of a known_hosts text: plain and hashed host keys, `@revoked` keys (removed
    from the good ones) and `@cert-authority` lines (kept only for the message)."""
    keys = paramiko.HostKeys()
    revoked: dict[bytes, int] = {}
    authorities: list[tuple[list[str], int]] = []
    good: list[tuple[str, paramiko.PKey]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        marker = ""
        if line.startswith("@"):
            marker, _, line = line.partition(" ")
            line = line.strip()
            if marker not in ("@revoked", "@cert-authority"):
                continue  # an unknown marker trusts nothing (OpenSSH skips the line too)
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line)
        except (paramiko.SSHException, ValueError):
            continue
        if entry is None or entry.key is None:
            continue
        if marker == "@revoked":
            revoked[entry.key.asbytes()] = number
        elif marker == "@cert-authority":
            authorities.append((list(entry.hostnames), number))
        else:
            good.extend((hostname, entry.key) for hostname in entry.hostnames)
    for hostname, key in good:
        if key.asbytes() not in revoked:
            keys.add(hostname, key.get_name(), key)
    return ParsedKnownHosts(keys, revoked, authorities)


def parse_known_hosts(text: str) -> paramiko.HostKeys:
    """The keys a known_hosts text trusts (revoked ones left out)."""
    return read_known_hosts(text).keys


_cache: dict[tuple[str, str], KnownHosts] = {}
_cache_lock = threading.Lock()


def _cached(kind: str, stamp: str, text: str, source: str) -> KnownHosts:
    key = (kind, stamp)
    with _cache_lock:
        found = _cache.get(key)
        if found is None:
            parsed = read_known_hosts(text)
            found = KnownHosts(source, parsed.keys, parsed.revoked, parsed.cert_authorities)
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
