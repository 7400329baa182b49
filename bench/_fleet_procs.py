"""The processes of `bench/fleet_scale.py`, started as a user starts them from the README.

`pitstop dev up` in a temporary PITSTOP_HOME on free ports, `pitstop sim serve --no-ssh` as its
own process (it registers the cluster with the worker and writes a kubeconfig), and
`python worker.py` as its own process, whose peak RSS (VmHWM) is sampled while it runs and
which can be SIGKILLed and restarted. Every process logs to `<home>/logs/`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from pitstop.devstack import free_port

REPO = Path(__file__).resolve().parent.parent
PITSTOP = str(Path(sys.executable).parent / "pitstop")
WORKER_READY = "worker serving task queue"
SIM_READY = "registered with the worker"


class BenchError(RuntimeError):
    """A process of the benchmark did not start or stop as it should; the message says which."""


def stack_env(home: Path) -> dict[str, str]:
    """The environment every process of the run shares: the home and the stack's free ports."""
    temporal, ui = free_port(), free_port()
    ports = {
        "PITSTOP_TEMPORAL_PORT": temporal,
        "PITSTOP_UI_PORT": ui,
        "PITSTOP_S3_PORT": free_port(),
        "PITSTOP_ETCD_PORT": free_port(),
        "PITSTOP_ETCD_PEER_PORT": free_port(),
        "PITSTOP_CODEC_PORT": free_port(),
    }
    env = {**os.environ, **{k: str(v) for k, v in ports.items()}}
    env.update(
        PITSTOP_HOME=str(home),
        TEMPORAL_ADDRESS=f"127.0.0.1:{temporal}",
        PITSTOP_UI_URL=f"http://127.0.0.1:{ui}",
        PITSTOP_TASK_QUEUE="pitstop",
    )
    return env


def wait_for_line(log: Path, marker: str, proc: subprocess.Popen[bytes], within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if log.exists() and marker in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise BenchError(f"{proc.args} exited with {proc.returncode}; see {log}:\n{tail(log)}")
        time.sleep(0.2)
    raise BenchError(f"{marker!r} did not show in {log} within {within:g}s:\n{tail(log)}")


def tail(log: Path, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    return ""


def pitstop_cli(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    """Run one `pitstop` command; its stdout, or BenchError with what it said."""
    done = subprocess.run(
        [PITSTOP, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise BenchError(f"pitstop {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def spawn(env: dict[str, str], argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class Sim:
    """`pitstop sim serve --no-ssh` with N nodes in D domains, registered as `name`."""

    def __init__(self, env: dict[str, str], home: Path, nodes: int, domains: int, name: str) -> None:
        self.log = home / "logs" / "sim.log"
        self.kubeconfig = home / "sim" / "kubeconfig"
        argv = [PITSTOP, "sim", "serve", "--no-ssh", "--nodes", str(nodes), "--domains", str(domains)]
        self.proc = spawn(env, [*argv, "--name", name, "--kubeconfig", str(self.kubeconfig)], self.log)
        wait_for_line(self.log, SIM_READY, self.proc, within=600)
        config = yaml.safe_load(self.kubeconfig.read_text())
        self.url: str = config["clusters"][0]["cluster"]["server"]
        self.token: str = config["users"][0]["user"].get("token", "")

    def stop(self) -> None:
        stop(self.proc)


def cpu_seconds(pid: int) -> float:
    """User + system CPU a live process has used (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pid(home: Path) -> int:
    """The dev stack's Temporal server (`pitstop dev up` writes its pid)."""
    return int((home / "run" / "temporal.pid").read_text().strip())


class WorkerProcess:
    """`python worker.py`, restartable; samples VmHWM and CPU of every incarnation."""

    def __init__(self, env: dict[str, str], home: Path) -> None:
        self.env = env
        self.log = home / "logs" / "worker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.peak_kib = 0
        self.starts = 0
        self.cpu_done = 0.0  # CPU seconds of the incarnations that ended
        self._cpu_now = 0.0
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None

    def start(self) -> None:
        self.starts += 1
        mark = self.log.stat().st_size if self.log.exists() else 0
        self.proc = spawn(self.env, [sys.executable, "worker.py"], self.log)
        deadline = time.monotonic() + 120
        while WORKER_READY not in self._log_since(mark):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"the worker did not start; see {self.log}:\n{tail(self.log)}")
            time.sleep(0.2)
        if self._sampler is None:
            self._sampling.set()
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()

    def _log_since(self, offset: int) -> str:
        with self.log.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    @property
    def cpu_s(self) -> float:
        """CPU seconds of every incarnation so far (read now)."""
        self._read_hwm()
        return self.cpu_done + self._cpu_now

    def _read_hwm(self) -> None:
        proc = self.proc
        if proc is None:
            return
        self._cpu_now = cpu_seconds(proc.pid) or self._cpu_now
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_kib = max(self.peak_kib, int(line.split()[1]))

    def _sample(self) -> None:
        while self._sampling.is_set():
            self._read_hwm()
            time.sleep(0.5)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no goodbye to Temporal; in-flight tasks are simply lost."""
        assert self.proc is not None
        self._read_hwm()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.cpu_done, self._cpu_now = self.cpu_s, 0.0

    def stop(self) -> None:
        self._read_hwm()
        self._sampling.clear()
        if self.proc is not None:
            stop(self.proc)
        self.cpu_done, self._cpu_now = self.cpu_s, 0.0


def bare_fleet(
    env: dict[str, str],
    home: Path,
    hosts: int,
    tasks: int,
    max_in_flight: int,
    *,
    kube: BareKube | None = None,
) -> BareResult:
    """Seconds (and CPU seconds) bare Temporal takes for the run's shape (`bench/_bare_fleet.py`, shared with
    `bench/engine_overhead.py`), on its own worker process: no-op tasks, or with `kube` the
    same GETs and PATCHes as the engine's annotate tasks (`bench/_bare_kube.py`)."""
    from _bare_fleet import READY_LINE

    address = env["TEMPORAL_ADDRESS"]
    log = home / "logs" / "bare-worker.log"
    bare_env = {
        **env,
        "BARE_TASK_QUEUE": "bench-bare",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "bench"), env.get("PYTHONPATH", "")) if p),
    }
    if kube is not None:
        names = home / "bare-nodes.txt"
        names.write_text("\n".join(kube.nodes) + "\n")
        bare_env |= {"BARE_KUBECONFIG": str(kube.kubeconfig), "BARE_NODES": str(names)}
    proc = spawn(bare_env, [sys.executable, "-c", "import _bare_fleet; _bare_fleet.serve()"], log)
    try:
        wait_for_line(log, READY_LINE, proc, within=60)
        worker_cpu, server_cpu = cpu_seconds(proc.pid), cpu_seconds(server_pid(home))
        wall = asyncio.run(_bare_run(address, hosts, tasks, max_in_flight, kube))
        return BareResult(
            wall=wall,
            worker_cpu=cpu_seconds(proc.pid) - worker_cpu,
            server_cpu=cpu_seconds(server_pid(home)) - server_cpu,
        )
    finally:
        stop(proc)


@dataclass
class BareResult:
    wall: float
    worker_cpu: float  # CPU seconds of the bare worker during the run
    server_cpu: float  # ... and of the Temporal server


@dataclass
class BareKube:
    kubeconfig: Path
    nodes: list[str]  # host i annotates nodes[i]
    keys: list[str]  # one annotation key per task


async def _bare_run(address: str, hosts: int, tasks: int, max_in_flight: int, kube: BareKube | None) -> float:
    from _bare_fleet import FleetShape
    from temporalio.client import Client

    client = await Client.connect(address)
    workflow_id = f"bare-{hosts}-{time.time_ns()}"
    shape = FleetShape(hosts=hosts, tasks=tasks, in_flight=max_in_flight)
    if kube is not None:
        shape = FleetShape(
            hosts=hosts, tasks=tasks, in_flight=max_in_flight, annotate=kube.keys, value=workflow_id
        )
    started = time.monotonic()
    done = await client.execute_workflow(
        "BenchBareFleet", shape, id=workflow_id, task_queue="bench-bare", result_type=int
    )
    if done != hosts:
        raise BenchError(f"the bare fleet workflow finished {done} of {hosts} hosts")
    return time.monotonic() - started
