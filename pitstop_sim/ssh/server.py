"""The simulated nodes' SSH endpoints: one paramiko server per node on its own 127.0.0.1 port,
each with its own ed25519 host key (a client tells nodes apart by host key, so one port per
node), public-key authentication for one user and one client key, `exec` requests run by
the node's shell (`shell.py`), and SFTP.

Accepting runs on the simulator's event loop (one reader per listening socket, so a thousand
nodes need no thousand threads); each connection is a paramiko Transport with its own
thread, and each command runs on a thread of its own.

While a node is down (rebooting, or never coming back) its listening socket is closed and
connections are refused; a second socket stays bound to the port without listening
(SO_REUSEPORT), so no other program can take the port meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import threading
from collections.abc import Callable

import paramiko
from paramiko.common import (
    AUTH_FAILED,
    AUTH_SUCCESSFUL,
    MSG_CHANNEL_REQUEST,
    OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED,
    OPEN_SUCCEEDED,
)

from pitstop.ssh import protocol
from pitstop.ssh.keys import fingerprint
from pitstop_sim.ssh import shell
from pitstop_sim.ssh.backend import SshBackend
from pitstop_sim.ssh.context import ConnectionGone, ExecContext, ShellExit, TimedOut
from pitstop_sim.ssh.host import NodeHost
from pitstop_sim.ssh.keys import new_key
from pitstop_sim.ssh.models import SshEndpointInfo, SshNodeFaults
from pitstop_sim.ssh.pki import ClusterPki
from pitstop_sim.ssh.sftp import SimSftpServer

log = logging.getLogger("pitstop_sim.ssh")
# paramiko logs every client that disconnects abruptly as an error with a traceback; for a
# simulator whose clients are killed on purpose, that is noise.
PARAMIKO_LOG = "pitstop_sim.ssh.paramiko"
logging.getLogger(PARAMIKO_LOG).setLevel(logging.CRITICAL)

BACKLOG = 128
INTERNAL_ERROR_RC = 255


class SshStartError(RuntimeError):
    """The endpoints cannot start (ports, file descriptors); the message says what to change."""


def _bound_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _ensure_file_descriptors(nodes: int) -> None:
    """Two sockets per node stay open; raise the soft limit when that is not enough."""
    needed = 2 * nodes + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft != resource.RLIM_INFINITY and soft < needed:
            raise SshStartError(
                f"SSH endpoints for {nodes} nodes need about {needed} open files, the limit is {soft}; "
                "raise it (`ulimit -n`) or run without SSH (`--no-ssh`)"
            )


def _handle_request_then_run(channel: paramiko.Channel, message: paramiko.Message) -> None:
    """paramiko answers a channel request only after `check_channel_exec_request` returns; a
    command started from there could send its exit status and close the channel before that
    answer, and the client would see "Channel closed". So commands start after the answer."""
    _PARAMIKO_HANDLE_REQUEST(channel, message)
    transport = channel.get_transport()
    server = transport.server_object if transport is not None else None
    if isinstance(server, NodeServer):
        server.start_command(channel)


_PARAMIKO_HANDLE_REQUEST = getattr(paramiko.Channel, "_handle_request")  # noqa: B009


class NodeTransport(paramiko.Transport):
    _channel_handler_table = {
        **getattr(paramiko.Transport, "_channel_handler_table"),  # noqa: B009
        MSG_CHANNEL_REQUEST: _handle_request_then_run,
    }


class NodeEndpoint:
    """One node's SSH server: host key, port, connections."""

    def __init__(self, host: NodeHost, bind_host: str, user: str, client_key: paramiko.PKey) -> None:
        self.host = host
        self.bind_host = bind_host
        self.user = user
        self.client_key = client_key
        self.host_key, _ = new_key()
        # Holds the port while the listener is closed (node down).
        self.placeholder = _bound_socket(bind_host, 0)
        self.port = int(self.placeholder.getsockname()[1])
        self.listener: socket.socket | None = None
        self.transports: set[paramiko.Transport] = set()
        self.lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.host.name

    def known_hosts_line(self) -> str:
        return f"[{self.bind_host}]:{self.port} {self.host_key.get_name()} {self.host_key.get_base64()}"

    def listen(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.listener is not None:
            return
        listener = _bound_socket(self.bind_host, self.port)
        listener.listen(BACKLOG)
        listener.setblocking(False)
        self.listener = listener
        loop.add_reader(listener.fileno(), self._accept)

    def stop_listening(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.listener is None:
            return
        loop.remove_reader(self.listener.fileno())
        self.listener.close()
        self.listener = None

    def drop_connections(self) -> None:
        with self.lock:
            transports, self.transports = list(self.transports), set()
        for transport in transports:
            transport.close()

    def connections(self) -> int:
        with self.lock:
            self.transports = {t for t in self.transports if t.is_active()}
            return len(self.transports)

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stop_listening(loop)
        self.drop_connections()
        self.placeholder.close()

    def _accept(self) -> None:
        if self.listener is None:
            return
        try:
            sock, _ = self.listener.accept()
        except OSError:  # BlockingIOError: another wake-up took it
            return
        if self.host.down:
            sock.close()
            return
        try:
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            transport = NodeTransport(sock)
            transport.set_log_channel(PARAMIKO_LOG)
            transport.add_server_key(self.host_key)
            transport.set_subsystem_handler("sftp", paramiko.SFTPServer, SimSftpServer, self.host, self.user)
            # With an event, start_server returns at once; the handshake runs on the transport's thread.
            transport.start_server(event=threading.Event(), server=NodeServer(self))
        except (OSError, paramiko.SSHException):  # the client hung up already
            sock.close()
            return
        with self.lock:
            self.transports = {t for t in self.transports if t.is_active()}
            self.transports.add(transport)


class NodeServer(paramiko.ServerInterface):
    """Authentication and channel policy of one node: key auth for the one user, sessions
    with `exec` and the `sftp` subsystem; no shells, no port forwarding."""

    def __init__(self, endpoint: NodeEndpoint) -> None:
        self.endpoint = endpoint
        self._commands: dict[int, str] = {}
        self._lock = threading.Lock()

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        allowed = self.endpoint.client_key
        if username == self.endpoint.user and key.asbytes() == allowed.asbytes():
            return AUTH_SUCCESSFUL
        return AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return OPEN_SUCCEEDED
        return OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        with self._lock:
            self._commands[channel.get_id()] = command.decode(errors="replace")
        return True

    def start_command(self, channel: paramiko.Channel) -> None:
        """Run the command accepted on `channel`, now that the client knows it was accepted."""
        with self._lock:
            command = self._commands.pop(channel.get_id(), None)
        if command is not None:
            threading.Thread(
                target=run_exec,
                args=(self.endpoint, channel, command),
                name=f"sim-ssh-{self.endpoint.name}",
                daemon=True,
            ).start()


def _close(transport: paramiko.Transport | None) -> None:
    if transport is not None:
        transport.close()


def run_exec(endpoint: NodeEndpoint, channel: paramiko.Channel, command: str) -> None:
    """Run one `exec` request and answer with its output and exit status (or not, on a drop)."""
    host = endpoint.host
    transport = channel.get_transport()
    if host.down:
        _close(transport)
        return
    pid = host.spawn(command)
    drop = host.take_drop(protocol.unwrap_become(command))
    if drop is not None:
        timer = threading.Timer(host.backend.real_seconds(drop.after_seconds), _close, args=(transport,))
        timer.daemon = True
        timer.start()

    def connected() -> bool:
        # A command whose connection is dropped on purpose runs on, as a process that
        # ignores SIGHUP would; otherwise a closed channel stops it (the client gave up).
        return drop is not None or (not channel.closed and transport is not None and transport.is_active())

    home = "/root" if endpoint.user == "root" else f"/home/{endpoint.user}"
    ctx = ExecContext(host=host, user=endpoint.user, pid=pid, cwd=home, connected=connected)
    try:
        rc = shell.run(command, ctx)
    except ShellExit as done:
        rc = done.rc
    except (ConnectionGone, TimedOut):
        if host.down:
            _close(transport)
        else:
            channel.close()
        return
    except Exception as exc:  # a bug in the simulator: say so instead of hanging the client
        log.exception("simulated command failed on %s: %s", host.name, command)
        ctx.error(f"pitstop sim: internal error running this command: {exc}\n")
        rc = INTERNAL_ERROR_RC
    finally:
        host.exit(pid)
    if drop is not None:
        _close(transport)
    else:
        _answer(channel, ctx, rc)
    for action in ctx.after_exit:
        try:
            action()
        except Exception:
            log.exception("after %r on %s", command, host.name)


def _answer(channel: paramiko.Channel, ctx: ExecContext, rc: int) -> None:
    with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
        if ctx.out:
            channel.sendall(bytes(ctx.out))
        if ctx.err:
            channel.sendall_stderr(bytes(ctx.err))
        channel.send_exit_status(rc)
        channel.close()


class SshEndpoints:
    """Every node's endpoint. `start`/`stop` and `set_down` run on the simulator's loop; the
    rest is thread-safe."""

    def __init__(
        self,
        nodes: list[str],
        backend: SshBackend,
        *,
        user: str,
        client_key: paramiko.PKey,
        bind_host: str = "127.0.0.1",
        faults: dict[str, SshNodeFaults] | None = None,
    ) -> None:
        self.user = user
        self.bind_host = bind_host
        self._backend = backend
        self._client_key = client_key
        self._nodes = list(nodes)
        self._faults = faults or {}
        self._endpoints: dict[str, NodeEndpoint] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        _ensure_file_descriptors(len(self._nodes))
        # Control-plane nodes carry kubeadm's /etc/kubernetes (one PKI for the cluster).
        control_plane = [n for n in self._nodes if self._backend.profile(n).role == "control-plane"]
        cluster_pki = ClusterPki()
        try:
            for name in self._nodes:
                host = NodeHost(name, self._backend, self._faults.get(name))
                if self.user != "root":
                    host.fs.mkdir(f"/home/{self.user}", self.user)
                if name in control_plane:
                    version = self._backend.kubernetes_version()
                    cluster_pki.install(host.fs, "kubernetes", control_plane, version)
                endpoint = NodeEndpoint(host, self.bind_host, self.user, self._client_key)
                self._endpoints[name] = endpoint
                endpoint.listen(self._loop)
        except OSError as exc:
            self.stop()
            raise SshStartError(f"cannot open SSH ports on {self.bind_host}: {exc.strerror or exc}") from None

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        for endpoint in self._endpoints.values():
            endpoint.host.went_down()
            endpoint.close(loop)
        self._endpoints.clear()
        self._loop = None

    # --- the nodes' state ---------------------------------------------------------------------
    def __contains__(self, node: object) -> bool:
        return node in self._endpoints

    def nodes(self) -> list[str]:
        return list(self._endpoints)

    def endpoint(self, node: str) -> NodeEndpoint:
        try:
            return self._endpoints[node]
        except KeyError:
            raise KeyError(f"node {node!r} has no SSH endpoint") from None

    def host(self, node: str) -> NodeHost:
        return self.endpoint(node).host

    def port(self, node: str) -> int:
        return self.endpoint(node).port

    def known_hosts_lines(self) -> list[str]:
        return [e.known_hosts_line() for e in self._endpoints.values()]

    def set_down(self, node: str, down: bool) -> None:
        """The node went down (reboot) or came back: refuse or accept connections."""
        endpoint = self._endpoints.get(node)
        if endpoint is None or self._loop is None or endpoint.host.down == down:
            return
        if down:
            endpoint.host.went_down()
            endpoint.stop_listening(self._loop)
            # Closing is quick, but not the loop's business: a client may be mid-packet.
            threading.Thread(target=endpoint.drop_connections, name="sim-ssh-down", daemon=True).start()
        else:
            endpoint.host.came_up()
            endpoint.listen(self._loop)

    def info(self, node: str) -> SshEndpointInfo:
        endpoint = self.endpoint(node)
        host = endpoint.host
        return SshEndpointInfo(
            node=node,
            host=self.bind_host,
            port=endpoint.port,
            up=not host.down,
            host_key_type=endpoint.host_key.get_name(),
            host_key_fingerprint=fingerprint(endpoint.host_key),
            connections=endpoint.connections(),
            commands=host.commands,
            running=host.process_list(),
            drops_injected=host.drops_injected,
            faults=host.faults,
        )

    def set_faults(self, node: str, faults: SshNodeFaults) -> SshEndpointInfo:
        self.host(node).set_faults(faults)
        return self.info(node)


def follow_reboots(
    endpoints: SshEndpoints, is_rebooting: Callable[[str], bool]
) -> Callable[[str, bool], None]:
    """A callback for node changes: `(name, deleted)` -> endpoint down or up."""

    def changed(name: str, deleted: bool) -> None:
        if name in endpoints:
            endpoints.set_down(name, deleted or is_rebooting(name))

    return changed
