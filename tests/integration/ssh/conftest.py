"""SSH fixtures: real OpenSSH sshd on loopback (installed when missing), a client key held
in a secret (environment variable), known_hosts, and a fake GPU node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pitstop.ssh import close_all

# The engine fixtures (a worker with every registered activity, `run` a runbook to its end).
from tests.integration.engine.conftest import engine_worker, run, start_run  # noqa: F401
from tests.integration.ssh.lab import KEY_ENV, KEY_SECRET, FakeNode, SshLab, make_fake_node
from tests.policy_site import PolicyLayer, TestSite
from tests.sshd import SshdUnavailable, SshServer, client_key, ensure_sshd, free_port, write_known_hosts


@pytest.fixture(scope="session")
def sshd_binary() -> str:
    try:
        return ensure_sshd()
    except SshdUnavailable as exc:
        pytest.skip(f"OpenSSH sshd unavailable: {exc}")


@pytest.fixture(scope="session")
def ssh_lab(
    tmp_path_factory: pytest.TempPathFactory, sshd_binary: str, worker_site: TestSite
) -> Iterator[SshLab]:
    base = tmp_path_factory.mktemp("ssh-lab")
    key = client_key(base / "client")
    node = SshServer(base / "node", free_port(), [key.public_line]).start()
    known = write_known_hosts(base / "known_hosts", [node])
    # The lab's site: cluster `lab` whose nodes' host keys are in the lab's known_hosts, the
    # client key granted as its SSH key (and the secrets the connection tests name).
    with pytest.MonkeyPatch.context() as patch, worker_site.layer() as policy:
        patch.setenv(KEY_ENV, key.private_text)
        policy.cluster("lab", known_hosts=known)
        policy.grant(KEY_SECRET, "ssh_key").grant("no-such-key", "ssh_key")
        policy.grant("fleet-known-hosts", "ssh_known_hosts")
        yield SshLab(base, key, node, known, policy)
    close_all()
    node.stop()


@pytest.fixture
def lab(ssh_lab: SshLab, worker_policy: PolicyLayer, tmp_path: Path) -> SshLab:
    ssh_lab.heartbeats.clear()
    # Files a test ships to nodes (scripts, images, copies) come from its own directory, which
    # the operator lets modules read.
    worker_policy.allow_read(tmp_path)
    return ssh_lab


@pytest.fixture
def fake_node(lab: SshLab, tmp_path: Path) -> Iterator[FakeNode]:
    """A fresh fake GPU node per test (firmware 1.0), in the lab's known_hosts file."""
    node = make_fake_node(tmp_path / "fake-node", free_port(), [lab.key.public_line])
    known = lab.known_hosts.read_text()
    lab.known_hosts.write_text(known + node.server.known_hosts_line() + "\n")
    try:
        yield node
    finally:
        node.stop()
        lab.known_hosts.write_text(known)
