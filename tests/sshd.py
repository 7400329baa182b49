"""Real OpenSSH `sshd` instances on loopback ports, for the SSH tests and the benchmark.

Each `SshServer` runs `/usr/sbin/sshd -f CONFIG -D -e` (as root, as sshd requires) on a free
127.0.0.1 port with its own host key, an `AuthorizedKeysFile` in its own directory (the
machine's ~/.ssh is never touched), `PermitRootLogin prohibit-password` and `StrictModes no`
(the directory lives under /tmp), and `SetEnv SHLVL=1` (see `write_config`).
`known_hosts_line()` gives the line a client needs to verify it, in OpenSSH's `[host]:port` form.

`ensure_sshd()` installs `openssh-server` with apt-get when it is missing and we are root,
as `make sysdeps` does; callers skip with its reason when that is impossible.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.leftovers import SESSION_ENV

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
LOOPBACK = "127.0.0.1"


class SshdUnavailable(RuntimeError):
    """sshd is missing and cannot be installed here; the message says why."""


def _apt_install(*packages: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True, timeout=600)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", *packages], check=True, env=env, capture_output=True, timeout=900
    )


def ensure_sshd() -> str:
    """Path of sshd, installing openssh-server (and sudo, for `become`) when missing."""
    missing = [
        pkg for pkg, path in (("openssh-server", SSHD), ("sudo", "/usr/bin/sudo")) if not Path(path).exists()
    ]
    if missing:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise SshdUnavailable(
                f"{' and '.join(missing)} missing and cannot be installed (needs root and apt-get); "
                "run `sudo apt-get install -y openssh-server sudo`"
            )
        try:
            _apt_install(*missing)
        except (subprocess.SubprocessError, OSError) as exc:
            raise SshdUnavailable(f"could not install {' '.join(missing)}: {exc}") from exc
    if not Path(SSHD).exists():
        raise SshdUnavailable(f"{SSHD} still missing after installing openssh-server")
    if os.geteuid() != 0:
        raise SshdUnavailable("sshd must run as root to accept logins; run the SSH tests as root")
    # sshd refuses to start without its privilege-separation directory.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    return SSHD


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def keygen(path: Path, key_type: str = "ed25519", comment: str = "pitstop-test") -> Path:
    """Generate an unencrypted key pair at `path` / `path.pub`."""
    path.unlink(missing_ok=True)
    Path(f"{path}.pub").unlink(missing_ok=True)
    args = ["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", comment, "-f", str(path)]
    if key_type == "rsa":
        args[4:4] = ["-b", "2048"]
    subprocess.run(args, check=True, capture_output=True)
    return path


@dataclass
class ClientKey:
    """A client key pair: `private_text` is what a secret holds."""

    path: Path

    @property
    def private_text(self) -> str:
        return self.path.read_text()

    @property
    def public_line(self) -> str:
        return Path(f"{self.path}.pub").read_text().strip()


def client_key(directory: Path, key_type: str = "ed25519") -> ClientKey:
    directory.mkdir(parents=True, exist_ok=True)
    return ClientKey(keygen(directory / f"id_{key_type}", key_type))


@dataclass
class SshServer:
    """One sshd on 127.0.0.1:`port`, configured and owned by the test."""

    directory: Path
    port: int
    authorized_keys: list[str]
    host_key_type: str = "ed25519"
    extra_config: list[str] = field(default_factory=list)
    # Prepended to PATH of every session: fake node tools (firmware updater, reboot).
    path_prefix: str | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        return self.directory / "sshd_config"

    @property
    def host_key_path(self) -> Path:
        return self.directory / f"ssh_host_{self.host_key_type}_key"

    @property
    def pid_file(self) -> Path:
        return self.directory / "sshd.pid"

    @property
    def log_path(self) -> Path:
        return self.directory / "sshd.log"

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def host_public_key(self) -> str:
        """`<type> <base64>` of the host key, as in known_hosts."""
        parts = Path(f"{self.host_key_path}.pub").read_text().split()
        return f"{parts[0]} {parts[1]}"

    def known_hosts_line(self, name: str = LOOPBACK) -> str:
        return f"[{name}]:{self.port} {self.host_public_key()}"

    def write_config(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.host_key_path.exists():
            keygen(self.host_key_path, self.host_key_type, comment=f"sshd-{self.port}")
        (self.directory / "authorized_keys").write_text("\n".join(self.authorized_keys) + "\n")
        lines = [
            f"ListenAddress {LOOPBACK}:{self.port}",
            f"HostKey {self.host_key_path}",
            f"PidFile {self.pid_file}",
            f"AuthorizedKeysFile {self.directory / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "AllowTcpForwarding yes",
            "MaxSessions 64",
            "MaxStartups 200:30:400",
            "LogLevel VERBOSE",
            f"Subsystem sftp {SFTP_SERVER}",
        ]
        # Debian's bash sources ~/.bashrc for every command sshd runs unless SHLVL says it is
        # nested, and root's ~/.bashrc on these machines runs `pyenv init` (~80 ms, ~100
        # processes per command). A GPU node pays nothing like it, so neither do our nodes.
        env = ["SHLVL=1"]
        # The test session's marker reaches every SSH session's processes and what they start
        # detached (the fake reboot): the session-end check (tests/leftovers.py) counts them.
        if os.environ.get(SESSION_ENV):
            env.append(f"{SESSION_ENV}={os.environ[SESSION_ENV]}")
        if self.path_prefix:
            env.append(
                f"PATH={self.path_prefix}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            )
        lines.append("SetEnv " + " ".join(env))
        lines.extend(self.extra_config)
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self, timeout: float = 15.0) -> SshServer:
        ensure_sshd()
        self.write_config()
        log = self.log_path.open("ab")
        # Its own session, so stopping it never signals the test runner.
        self.proc = subprocess.Popen(
            [SSHD, "-f", str(self.config_path), "-D", "-e"],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None and not self.pid_file.exists():
                raise RuntimeError(f"sshd on port {self.port} exited: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=1.0) as sock:
                    if sock.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(
            f"sshd on port {self.port} not ready after {timeout}s: {self.log_path.read_text()[-2000:]}"
        )

    def listener_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def own_pids(self) -> set[int]:
        """Live sshd listeners of this server: the one `start` made, and any started with this
        config elsewhere (the fake node's reboot restarts sshd detached, daemonized: not our
        child, and its pid file may not be written yet). A pid file alone is not trusted: its
        pid may have been reused by an unrelated process."""
        pids = running_with(self.config_path)
        if self.proc is not None and process_alive(self.proc.pid):
            pids.add(self.proc.pid)
        return pids

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the listener and every session it started (as a reboot would), and wait until
        they are gone: a stopped server leaves no process behind."""
        deadline = time.monotonic() + timeout
        while pids := self.own_pids():
            # Politely first; whatever is still there at the deadline is killed.
            sig = signal.SIGTERM if time.monotonic() < deadline else signal.SIGKILL
            for pid in pids:
                for child in descendants(pid):
                    _kill(child, signal.SIGKILL)
                _kill(pid, sig)
            wait_gone(pids, within=1.0)
            if time.monotonic() > deadline + timeout:
                raise RuntimeError(f"sshd on port {self.port} did not stop: pids {sorted(pids)}")
        if self.proc is not None:
            self.proc.wait(timeout=5)  # reaped: it is gone already
            self.proc = None
        self.pid_file.unlink(missing_ok=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    def rotate_host_key(self) -> None:
        """A new host key (the host was reinstalled, or someone is in the middle)."""
        self.stop()
        self.host_key_path.unlink()
        self.start()


def _kill(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children first found, deepest last)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            ppid = parent_pid(int(entry.name))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            out.append(child)
            pending.append(child)
    return out


def process_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def running_with(path: Path) -> set[int]:
    """Live processes whose command line names `path` (sshd rewrites its own as one string,
    `sshd: /usr/sbin/sshd -f <config> ... [listener]`, so this is a substring match)."""
    needle = str(path).encode()
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline and process_alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def wait_gone(pids: set[int], within: float) -> bool:
    """Whether every pid exited within `within` seconds (zombies count as gone)."""
    deadline = time.monotonic() + within
    while any(process_alive(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def start_servers(base: Path, count: int, authorized_keys: list[str], **kwargs: object) -> list[SshServer]:
    """`count` sshd instances, each with its own directory, port and host key."""
    servers: list[SshServer] = []
    try:
        for i in range(count):
            server = SshServer(base / f"sshd-{i}", free_port(), authorized_keys, **kwargs)  # type: ignore[arg-type]
            servers.append(server.start())
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


def write_known_hosts(path: Path, servers: list[SshServer]) -> Path:
    path.write_text("".join(s.known_hosts_line() + "\n" for s in servers))
    return path


def tcp_socket_owner(local_port: int, remote_port: int) -> int | None:
    """Pid of the process holding the loopback TCP connection local_port -> remote_port."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == local_port and int(remote.split(":")[1], 16) == remote_port:
            inode = fields[9]
            break
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) == target:
                    return int(entry.name)
        except OSError:
            continue
    return None
