"""Connections: strict host keys, auth and reachability errors, jump hosts, the pool, and
connections dropped in the middle of a command."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.ssh import ssh_command
from pitstop.contracts import ModuleResult
from pitstop.ssh import SSHPool, close_all, default_pool, target_for
from tests.integration.ssh.lab import SshLab
from tests.sshd import (
    SshServer,
    client_key,
    descendants,
    free_port,
    process_alive,
    tcp_socket_owner,
    write_known_hosts,
)


@pytest.fixture
def extra_servers(lab: SshLab, tmp_path: Path) -> Iterator[list[SshServer]]:
    """Two more sshd nodes, added to the lab's known_hosts for the test."""
    servers = [
        SshServer(tmp_path / f"sshd-{i}", free_port(), [lab.key.public_line]).start() for i in range(2)
    ]
    known = lab.known_hosts.read_text()
    lab.known_hosts.write_text(known + "".join(s.known_hosts_line() + "\n" for s in servers))
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()
        lab.known_hosts.write_text(known)


def _fingerprint(server: SshServer) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-l", "-f", f"{server.host_key_path}.pub"], check=True, capture_output=True, text=True
    ).stdout
    return out.split()[1]


def _error(lab: SshLab, call_kwargs: dict[str, object], cmd: str = "true") -> ApplicationError:
    with pytest.raises(ApplicationError) as err:
        lab.run(ssh_command, lab.call("ssh.command", {"cmd": cmd}, **call_kwargs))  # type: ignore[arg-type]
    return err.value


# --- host keys ----------------------------------------------------------------------------
def test_changed_host_key_is_refused_naming_the_offered_fingerprint(
    lab: SshLab, extra_servers: list[SshServer]
) -> None:
    server = extra_servers[0]
    assert lab.run(ssh_command, lab.call("ssh.command", {"cmd": "true"}, server=server)).rc == 0
    old = _fingerprint(server)
    server.rotate_host_key()
    close_all()
    err = _error(lab, {"server": server})
    assert err.type == "HostKeyMismatch" and err.non_retryable
    assert f"[127.0.0.1]:{server.port}" in str(err)
    assert "CHANGED" in str(err)
    assert _fingerprint(server) in str(err) and old in str(err)


def test_unknown_host_is_refused_never_added(lab: SshLab, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("# no hosts yet\n")
    err = _error(lab, {"known_hosts": empty})
    assert err.type == "HostKeyMismatch" and err.non_retryable
    assert f"[127.0.0.1]:{lab.node.port} is not in known_hosts file {empty}" in str(err)
    assert _fingerprint(lab.node) in str(err)
    assert empty.read_text() == "# no hosts yet\n"


def test_hashed_known_hosts_entries_are_accepted(lab: SshLab, tmp_path: Path) -> None:
    hashed = tmp_path / "known_hosts"
    hashed.write_text(lab.node.known_hosts_line() + "\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(hashed)], check=True, capture_output=True)
    assert hashed.read_text().startswith("|1|")
    close_all()
    result = lab.run(ssh_command, lab.call("ssh.command", {"cmd": "echo ok"}, known_hosts=hashed))
    assert result.stdout == "ok\n"


def test_known_hosts_can_come_from_a_secret(lab: SshLab, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PITSTOP_SECRET_FLEET_KNOWN_HOSTS", lab.node.known_hosts_line() + "\n")
    close_all()
    result = lab.run(
        ssh_command, lab.call("ssh.command", {"cmd": "echo ok"}, known_hosts_secret="fleet-known-hosts")
    )
    assert result.stdout == "ok\n"
    monkeypatch.setenv("PITSTOP_SECRET_FLEET_KNOWN_HOSTS", "# rotated: no hosts yet\n")
    close_all()
    err = _error(lab, {"known_hosts_secret": "fleet-known-hosts"})
    assert err.type == "HostKeyMismatch"
    assert "is not in known_hosts secret 'fleet-known-hosts'" in str(err)


# --- auth and reachability ----------------------------------------------------------------
def test_refused_key_is_unauthorized_and_not_retried(lab: SshLab, tmp_path: Path) -> None:
    other = client_key(tmp_path / "other")
    server = SshServer(tmp_path / "sshd", free_port(), [other.public_line]).start()
    try:
        known = write_known_hosts(tmp_path / "known_hosts", [server])
        err = _error(lab, {"server": server, "known_hosts": known})
    finally:
        server.stop()
    assert err.type == "Unauthorized" and err.non_retryable
    assert f"root@127.0.0.1:{server.port}" in str(err) and "'ssh-test-key'" in str(err)
    key_body = lab.key.private_text.splitlines()[1]
    assert key_body not in str(err)


def test_unreachable_host_names_host_and_port_and_is_retryable(lab: SshLab) -> None:
    port = free_port()
    err = _error(lab, {"port": port})
    assert err.type == "HostUnreachable" and not err.non_retryable
    assert f"cannot reach 127.0.0.1:{port} over SSH: connection refused" in str(err)


def test_missing_key_secret_says_where_it_was_looked_for(lab: SshLab) -> None:
    err = _error(lab, {"key_secret": "no-such-key"})
    assert err.type == "PreconditionFailed" and err.non_retryable
    assert "PITSTOP_SECRET_NO_SUCH_KEY" in str(err)


# --- jump host -----------------------------------------------------------------------------
def test_jump_host_carries_the_connection(lab: SshLab, extra_servers: list[SshServer]) -> None:
    inner = extra_servers[0]
    jump = f"root@127.0.0.1:{lab.node.port}"
    result = lab.run(
        ssh_command, lab.call("ssh.command", {"cmd": "echo $SSH_CLIENT"}, server=inner, jump_host=jump)
    )
    client_ip, client_port, server_port = (result.stdout or "").split()
    assert (client_ip, int(server_port)) == ("127.0.0.1", inner.port)
    # The TCP connection that reached the inner sshd belongs to the jump host's sshd.
    owner = tcp_socket_owner(int(client_port), inner.port)
    assert owner is not None
    jump_listener = lab.node.listener_pid()
    assert jump_listener is not None and owner in descendants(jump_listener)


def test_jump_host_that_cannot_reach_the_target_says_so(lab: SshLab) -> None:
    port = free_port()
    err = _error(lab, {"port": port, "jump_host": f"127.0.0.1:{lab.node.port}"})
    assert err.type == "HostUnreachable"
    assert f"cannot reach 127.0.0.1:{port} via jump host 127.0.0.1:{lab.node.port}" in str(err)


# --- the pool -----------------------------------------------------------------------------
def test_consecutive_activities_reuse_one_pooled_connection(lab: SshLab) -> None:
    call = lab.call("ssh.command", {"cmd": "true"})
    pool, target = default_pool(), target_for(call)
    lab.run(ssh_command, call)
    first = pool.peek(target)
    assert first is not None
    transport, opened = first.transport, pool.opened
    lab.run(ssh_command, call)
    second = pool.peek(target)
    assert second is not None and second.transport is transport
    assert pool.opened == opened


def test_pool_is_bounded_and_evicts_the_least_recently_used(
    lab: SshLab, extra_servers: list[SshServer]
) -> None:
    a, b, c = (target_for(lab.call("ssh.command", {}, server=s)) for s in (lab.node, *extra_servers))
    pool = SSHPool(max_size=2)
    try:
        with pool.connection(a) as conn_a:
            transport_a = conn_a.transport
        with pool.connection(b) as conn_b:
            transport_b = conn_b.transport
        with pool.connection(a):
            pass  # a is now the most recently used
        with pool.connection(c):
            pass
        assert len(pool) == 2
        assert pool.peek(b) is None and not transport_b.is_active()
        kept = pool.peek(a)
        assert kept is not None and kept.transport is transport_a and transport_a.is_active()
    finally:
        pool.close_all()
    assert not transport_a.is_active() and len(pool) == 0


def test_pool_never_closes_a_connection_in_use(lab: SshLab, extra_servers: list[SshServer]) -> None:
    a, b = (target_for(lab.call("ssh.command", {}, server=s)) for s in extra_servers)
    pool = SSHPool(max_size=1)
    try:
        with pool.connection(a) as busy, pool.connection(b):
            assert busy.alive() and len(pool) == 2
        assert len(pool) == 1
    finally:
        pool.close_all()


# --- dropped connections ------------------------------------------------------------------
def _drop_mid_command(lab: SshLab, args: dict[str, object], pids: Path) -> ModuleResult | ApplicationError:
    """Run the command; once it has started, kill the sshd session serving it."""
    outcome: list[ModuleResult | ApplicationError] = []

    def run() -> None:
        try:
            outcome.append(lab.run(ssh_command, lab.call("ssh.command", args)))
        except ApplicationError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 10
    while not pids.exists() or not pids.read_text().strip():
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.02)
    session, shell = (int(p) for p in pids.read_text().split())
    os.kill(session, signal.SIGKILL)
    thread.join(timeout=20)
    # The command itself outlives its connection, as on a real host: stop it here.
    for pid in [shell, *descendants(shell)]:
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)
    return outcome[0]


def test_connection_lost_mid_command_is_not_retried_when_it_may_have_run(lab: SshLab) -> None:
    scratch = lab.base / f"drop-{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    cmd = f"echo run >> {scratch / 'log'}; echo $PPID $$ > {scratch / 'pids'}; sleep 30"
    outcome = _drop_mid_command(lab, {"cmd": cmd}, scratch / "pids")
    assert isinstance(outcome, ApplicationError)
    assert outcome.type == "ConnectionLost" and outcome.non_retryable
    assert "connection lost while running" in str(outcome)
    assert "not retried because it may have run" in str(outcome)
    assert (scratch / "log").read_text() == "run\n"


def test_connection_lost_mid_command_is_retried_when_guarded_by_creates(lab: SshLab) -> None:
    scratch = lab.base / f"drop-{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    done = scratch / "done"
    cmd = f"echo $PPID $$ > {scratch / 'pids'}; sleep 30; touch {done}"
    outcome = _drop_mid_command(lab, {"cmd": cmd, "creates": str(done)}, scratch / "pids")
    assert isinstance(outcome, ApplicationError)
    assert outcome.type == "ConnectionLost" and not outcome.non_retryable
    assert "retrying because the command is guarded by creates/removes" in str(outcome)
    # What Temporal's retry does next: a new connection, and the command runs to completion.
    again = lab.run(ssh_command, lab.call("ssh.command", {"cmd": f"touch {done}", "creates": str(done)}))
    assert again.changed and done.exists()


def test_concurrent_activities_on_a_new_host_share_one_handshake(
    lab: SshLab, extra_servers: list[SshServer]
) -> None:
    target = target_for(lab.call("ssh.command", {}, server=extra_servers[0]))
    pool = SSHPool()
    transports: list[object] = []

    def use() -> None:
        with pool.connection(target) as conn:
            transports.append(conn.transport)

    threads = [threading.Thread(target=use) for _ in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert len(transports) == 8 and all(t is transports[0] for t in transports)
        assert pool.opened == 1
    finally:
        pool.close_all()


def test_idle_connections_are_closed_after_the_idle_timeout(
    lab: SshLab, extra_servers: list[SshServer]
) -> None:
    a, b = (target_for(lab.call("ssh.command", {}, server=s)) for s in extra_servers)
    pool = SSHPool(idle_timeout_s=0.0)
    try:
        with pool.connection(a) as conn_a:
            transport_a = conn_a.transport
        time.sleep(0.01)
        with pool.connection(b):
            pass
        assert pool.peek(a) is None and not transport_a.is_active()
    finally:
        pool.close_all()
