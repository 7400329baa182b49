"""A host that closes the connection in the middle of authentication is unreachable, not a
refusal: a rebooting node's sshd is stopped by systemd between accepting a connection and
answering it, and the reboot wait must poll again instead of failing for good (CI saw
`Unauthorized ... transport shut down or saw EOF` from exactly this during `ssh.reboot`)."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from temporalio.exceptions import ApplicationError

from activities.ssh import ssh_command
from pitstop.ssh import close_all
from tests.integration.ssh.lab import SshLab


class _HangUpOnAuth(paramiko.ServerInterface):
    """Speaks SSH up to the key exchange, then drops the connection when asked to authenticate."""

    def __init__(self) -> None:
        self.transport: paramiko.Transport | None = None
        self.auth_attempts = 0

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        self.auth_attempts += 1
        assert self.transport is not None
        self.transport.close()
        return int(paramiko.common.AUTH_FAILED)


@pytest.fixture
def hanging_server(tmp_path: Path) -> Iterator[tuple[int, Path, _HangUpOnAuth]]:
    host_key = paramiko.Ed25519Key.from_private_key_file(str(_keygen(tmp_path / "host_key")))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = int(listener.getsockname()[1])
    server = _HangUpOnAuth()
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(host_key)
            server.transport = transport
            transports.append(transport)
            transport.start_server(server=server)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    try:
        yield port, known, server
    finally:
        # close() alone does not wake a thread blocked in accept() on Linux; shutdown() does.
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        for transport in transports:
            transport.close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the hang-up server's accept loop did not stop"


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def test_hang_up_during_authentication_is_unreachable_and_retryable(
    lab: SshLab, hanging_server: tuple[int, Path, _HangUpOnAuth]
) -> None:
    port, known, server = hanging_server
    close_all()
    with pytest.raises(ApplicationError) as err:
        lab.run(ssh_command, lab.call("ssh.command", {"cmd": "true"}, port=port, known_hosts=known))
    assert server.auth_attempts >= 1  # it did get as far as authentication
    assert err.value.type == "HostUnreachable" and not err.value.non_retryable
    assert f"cannot reach 127.0.0.1:{port} over SSH" in str(err.value)
    assert "closed the connection during authentication" in str(err.value)
