"""`@revoked` known_hosts lines are honoured; `@cert-authority` lines are reported, not ignored.

The attack: a host key marked `@revoked` in known_hosts (a stolen key) was still accepted,
because pitstop skipped every marker line. Now a revoked key is refused before authentication
even when another line lists it as the host's key, with a message naming its fingerprint and
the line; a pooled connection is re-checked when reused. Against a real OpenSSH sshd
(tests/sshd.py); "nothing happened" is a marker file the command would have created.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from temporalio.exceptions import ApplicationError

from activities.ssh import ssh_command
from pitstop.ssh.hostkeys import parse_known_hosts, read_known_hosts
from pitstop.ssh.keys import fingerprint
from pitstop.ssh.pool import default_pool
from pitstop.ssh.target import target_for
from tests.integration.ssh import conftest as ssh_fixtures
from tests.integration.ssh.lab import SshLab
from tests.sshd import SshServer, free_port

sshd_binary, ssh_lab, lab = ssh_fixtures.sshd_binary, ssh_fixtures.ssh_lab, ssh_fixtures.lab


@pytest.fixture
def node(lab: SshLab, tmp_path: Path) -> Iterator[SshServer]:
    server = SshServer(tmp_path / "node", free_port(), [lab.key.public_line]).start()
    yield server
    server.stop()


def _fingerprint(server: SshServer) -> str:
    key_type, blob = server.host_public_key().split()
    return fingerprint(paramiko.PKey.from_type_string(key_type, base64.b64decode(blob)))


def _touch(lab: SshLab, server: SshServer, known: Path, marker: Path) -> None:
    lab.run(
        ssh_command, lab.call("ssh.command", {"cmd": f"touch {marker}"}, server=server, known_hosts=known)
    )


def test_a_revoked_key_is_refused_even_when_also_listed_as_good(
    lab: SshLab, node: SshServer, tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"{node.known_hosts_line()}\n@revoked * {node.host_public_key()}\n")
    marker = tmp_path / "ran"
    with pytest.raises(ApplicationError) as err:
        _touch(lab, node, known, marker)
    assert err.value.type == "HostKeyMismatch" and err.value.non_retryable
    assert _fingerprint(node) in err.value.message
    assert f"marked @revoked in known_hosts file {known} line 2" in err.value.message
    assert not marker.exists()


def test_a_revoked_key_alone_is_refused_as_revoked_not_as_unknown(
    lab: SshLab, node: SshServer, tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"# the fleet\n@revoked [127.0.0.1]:* {node.host_public_key()}\n")
    marker = tmp_path / "ran"
    with pytest.raises(ApplicationError) as err:
        _touch(lab, node, known, marker)
    assert "@revoked" in err.value.message and _fingerprint(node) in err.value.message
    assert not marker.exists()


def test_revoking_the_key_of_a_pooled_connection_stops_its_reuse(
    lab: SshLab, node: SshServer, tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(node.known_hosts_line() + "\n")
    first = tmp_path / "first"
    _touch(lab, node, known, first)
    assert first.exists()
    call = lab.call("ssh.command", {"cmd": "true"}, server=node, known_hosts=known)
    assert default_pool().peek(target_for(call)) is not None, "the first command left a pooled connection"
    known.write_text(node.known_hosts_line() + f"\n@revoked * {node.host_public_key()}\n")
    second = tmp_path / "second"
    with pytest.raises(ApplicationError) as err:
        _touch(lab, node, known, second)
    assert "@revoked" in err.value.message
    assert not second.exists()


def test_a_host_covered_only_by_a_cert_authority_is_refused_with_the_reason(
    lab: SshLab, node: SshServer, tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    ca = SshServer(tmp_path / "ca", free_port(), [])
    ca.write_config()  # only for a key to name as the CA
    known.write_text(f"@cert-authority [127.0.0.1]:* {ca.host_public_key()}\n")
    marker = tmp_path / "ran"
    with pytest.raises(ApplicationError) as err:
        _touch(lab, node, known, marker)
    message = err.value.message
    assert err.value.type == "HostKeyMismatch"
    assert f"is not in known_hosts file {known}" in message and _fingerprint(node) in message
    assert (
        "has @cert-authority at line 1 for this host, but pitstop does not verify host certificates"
        in message
    )
    assert not marker.exists()


def test_parsing_keeps_good_keys_and_sets_revoked_ones_apart(node: SshServer, tmp_path: Path) -> None:
    other = SshServer(tmp_path / "other", free_port(), [])
    other.write_config()
    text = (
        f"{node.known_hosts_line()}\n{other.known_hosts_line()}\n"
        f"@revoked * {node.host_public_key()}\n@cert-authority *.example.com {other.host_public_key()}\n"
        "@unknown-marker * ssh-ed25519 AAAA\n"
    )
    parsed = read_known_hosts(text)
    assert parsed.keys.lookup(f"[127.0.0.1]:{node.port}") is None
    assert parsed.keys.lookup(f"[127.0.0.1]:{other.port}") is not None
    assert list(parsed.revoked.values()) == [3]
    assert parsed.cert_authorities == [(["*.example.com"], 4)]
    assert parse_known_hosts(text).lookup(f"[127.0.0.1]:{node.port}") is None
