"""Open one verified, authenticated SSH connection (directly or through a jump host)."""

from __future__ import annotations

import contextlib
import socket
import time

import paramiko
from temporalio.exceptions import ApplicationError

from pitstop.secrets import SecretNotFound, resolve_secret
from pitstop.ssh.errors import ChannelLost, invalid_args, precondition, unauthorized, unreachable
from pitstop.ssh.hostkeys import KnownHosts, known_hosts_for
from pitstop.ssh.keys import load_private_key
from pitstop.ssh.target import SSHTarget, known_hosts_name

DEFAULT_KEEPALIVE_S = 30.0


class Connection:
    """A live SSH connection to one target; shared by activities through the pool.

    paramiko multiplexes channels over one transport safely from several threads, so two
    activities on the same host may run commands at the same time.
    """

    def __init__(
        self, target: SSHTarget, client: paramiko.SSHClient, jump: paramiko.SSHClient | None
    ) -> None:
        self.target = target
        # The host keys this connection was verified with (target, then jump host), re-checked
        # against known_hosts whenever the pool hands the connection out again.
        self.server_keys: list[tuple[str, paramiko.PKey]] = []
        self.client = client
        self.jump = jump
        self.created = time.monotonic()
        self.last_used = self.created
        self.in_use = 0

    @property
    def transport(self) -> paramiko.Transport:
        transport = self.client.get_transport()
        if transport is None:
            raise ChannelLost(self.target.address, "(no command)", False, "connection closed")
        return transport

    def alive(self) -> bool:
        transport = self.client.get_transport()
        return transport is not None and transport.is_active()

    def check_still_trusted(self) -> None:
        """Raise HostKeyMismatch when known_hosts now marks a key this connection was verified
        with as @revoked (known_hosts changed while the connection was pooled)."""
        if not self.server_keys:
            return
        known = known_hosts_for(self.target)
        for name, key in self.server_keys:
            known.check_offered(name, key)

    def open_session(self, command: str) -> paramiko.Channel:
        """A new session channel; failing here means nothing ran on the host."""
        try:
            return self.transport.open_session(timeout=self.target.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ChannelLost(self.target.address, command, False, str(exc) or type(exc).__name__) from None

    def open_sftp(self) -> paramiko.SFTPClient:
        try:
            return paramiko.SFTPClient.from_transport(self.transport)  # type: ignore[return-value]
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ChannelLost(self.target.address, "SFTP", False, str(exc) or type(exc).__name__) from None

    def close(self) -> None:
        self.client.close()
        if self.jump is not None:
            self.jump.close()


class _LowLatencySocket(socket.socket):
    """A TCP socket that acknowledges at once (Linux TCP_QUICKACK, re-armed after each read).

    sshd sends small packets (channel confirmations, exit status, close) with Nagle on; with
    the kernel's delayed ACKs every SSH round trip would wait ~40 ms for nothing.
    """

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data = super().recv(bufsize, flags)
        with contextlib.suppress(OSError):
            self.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        return data


def _tcp_connect(host: str, port: int, timeout: float) -> socket.socket:
    plain = socket.create_connection((host, port), timeout=timeout)
    plain.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if not hasattr(socket, "TCP_QUICKACK"):
        return plain
    sock = _LowLatencySocket(plain.family, plain.type, plain.proto, fileno=plain.detach())
    sock.settimeout(timeout)
    return sock


def _reason(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return f"timed out after {timeout:g}s"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        errors = list(exc.errors.values())
        if errors and all(isinstance(e, ConnectionRefusedError) for e in errors):
            return "connection refused"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return str(exc) or type(exc).__name__


def _open_client(
    host: str,
    port: int,
    user: str,
    pkey: paramiko.PKey,
    key_name: str,
    known: KnownHosts,
    timeout: float,
    sock: paramiko.Channel | None = None,
    via: str | None = None,
) -> paramiko.SSHClient:
    name = known_hosts_name(host, port)
    address = f"{host}:{port}"
    client = paramiko.SSHClient()
    known.install(client, name)
    try:
        channel: socket.socket | paramiko.Channel
        if sock is not None:
            channel = sock
        else:
            try:
                channel = _tcp_connect(host, port, timeout)
            except socket.gaierror as exc:
                raise unreachable(address, f"cannot resolve {host!r} ({exc.strerror})", via) from None
        client.connect(
            host,
            port=port,
            username=user,
            pkey=pkey,
            sock=channel,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            channel_timeout=timeout,
            allow_agent=False,
            look_for_keys=False,
        )
        transport = client.get_transport()
        if transport is not None:
            known.check_offered(name, transport.get_remote_server_key())
        return client
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise known.changed_error(name, exc.key, exc.expected_key) from None
    except paramiko.AuthenticationException as exc:
        # A refusal leaves the transport up (the server answered USERAUTH_FAILURE); a host
        # that hung up mid-authentication (a rebooting node's sshd being stopped) is not
        # refusing the key and must be retried, so it is unreachable, not unauthorized.
        transport = client.get_transport()
        hung_up = transport is None or not transport.is_active()
        client.close()
        if hung_up:
            raise unreachable(address, "the host closed the connection during authentication", via) from None
        raise unauthorized(user, address, key_name, str(exc) or "authentication failed") from None
    except ApplicationError:
        client.close()
        raise
    except (paramiko.SSHException, OSError, EOFError) as exc:
        client.close()
        reason = _reason(exc, timeout)
        if isinstance(exc, paramiko.SSHException):
            reason = f"SSH handshake failed: {reason}"
        raise unreachable(address, reason, via) from None


def open_connection(target: SSHTarget, keepalive_s: float = DEFAULT_KEEPALIVE_S) -> Connection:
    """Connect to `target` with its key, verifying host keys strictly (jump host included)."""
    if target.key is None:
        raise invalid_args(
            f"host {target.name}: no SSH key configured; "
            "set `cluster.ssh.key: {secret: NAME}` in the inventory"
        )
    try:
        key_text = resolve_secret(target.key, "ssh_key", what="cluster.ssh.key", cluster=target.cluster)
    except SecretNotFound as exc:
        raise precondition(f"cluster.ssh.key: {exc}") from None
    pkey = load_private_key(key_text, target.key.secret)
    known = known_hosts_for(target)
    timeout = target.connect_timeout
    jump_client: paramiko.SSHClient | None = None
    sock: paramiko.Channel | None = None
    try:
        if target.jump is not None:
            hop = target.jump
            jump_client = _open_client(
                hop.host, hop.port, hop.user or target.user, pkey, target.key.secret, known, timeout
            )
            transport = jump_client.get_transport()
            assert transport is not None
            try:
                # ProxyJump: a direct-tcpip channel from the jump host to the target.
                sock = transport.open_channel(
                    "direct-tcpip", (target.host, target.port), ("127.0.0.1", 0), timeout=timeout
                )
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise unreachable(
                    target.address,
                    f"the jump host could not connect to it ({_reason(exc, timeout)})",
                    str(hop),
                ) from None
        client = _open_client(
            target.host,
            target.port,
            target.user,
            pkey,
            target.key.secret,
            known,
            timeout,
            sock=sock,
            via=str(target.jump) if target.jump else None,
        )
    except BaseException:
        if jump_client is not None:
            jump_client.close()
        raise
    transport = client.get_transport()
    assert transport is not None
    transport.set_keepalive(int(keepalive_s))
    conn = Connection(target, client, jump_client)
    conn.server_keys.append((target.known_hosts_name, transport.get_remote_server_key()))
    if jump_client is not None and target.jump is not None:
        jump_transport = jump_client.get_transport()
        if jump_transport is not None:
            name = known_hosts_name(target.jump.host, target.jump.port)
            conn.server_keys.append((name, jump_transport.get_remote_server_key()))
    return conn
