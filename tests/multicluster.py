"""Many clusters, rehearsed: a worker per cluster, as production runs them (docs/deployment.md,
"A worker per cluster").

Each cluster has its own activities-only worker — a real process, `python worker.py
--activities-only`, on the cluster's own task queue — with its own PITSTOP_HOME and worker
policy, in which only its own cluster is registered. The orchestrating workflows run on the
test's central worker (the in-process `engine_worker` of tests/integration/engine). Optionally a
cluster has a rehearsal cluster (an in-process `SimCluster`), registered under the cluster's
name in that worker's home only.

The workers share what every pitstop process of one deployment shares: the Temporal server,
the payload store and the codec key (the session's); they do not share a worker key — an
activities-only worker runs none of the workflows' local activities, so it holds none.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from pitstop.cluster_queue import live_pollers
from pitstop.codec_keys import HOME_KEY_FILE
from pitstop.policy import load_policy
from pitstop.policy.errors import POLICY_ENV
from pitstop.settings import Settings
from pitstop_sim import SimCluster, SimConfig
from tests.testmodules import CALL_LOG_ENV, HOLD_FILE_ENV

REPO_ROOT = Path(__file__).resolve().parent.parent
# What an activities-only worker must do without: the keys that sign and check runs' messages.
_NOT_GIVEN = ("PITSTOP_WORKER_KEY", "PITSTOP_WORKER_KEY_FILE", "PITSTOP_VOTE_KEY", "PITSTOP_VOTE_KEY_FILE")


async def wait_for(what: str, check: Callable[[], Awaitable[bool]], seconds: float = 45.0) -> None:
    """Poll `check` until it holds; fail naming `what` after `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            while True:
                if await check():
                    return
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"timed out after {seconds:g}s waiting for {what}") from None


class ClusterHome:
    """One cluster worker's PITSTOP_HOME and worker policy: its clusters directory holds only the
    clusters registered here (the rehearsal cluster of its own name, when there is one)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clusters_dir = root / "clusters"
        self.policy_path = root / "worker-policy.yaml"
        self.clusters_dir.mkdir(parents=True, exist_ok=True)
        self.policy_path.write_text(
            "# A cluster's worker: it reaches only the clusters registered next to it.\n"
            f"clusters_dir: {self.clusters_dir}\n"
        )

    def environ(self) -> dict[str, str]:
        return {"PITSTOP_HOME": str(self.root), POLICY_ENV: str(self.policy_path)}

    def register(self, sim: SimCluster, name: str) -> Path:
        """As an operator registers a real cluster with this one worker."""
        return sim.register(name, policy=load_policy(self.environ()))


class ClusterWorker:
    """`python worker.py --activities-only` on one task queue, in its own home; started, stopped
    and SIGKILLed at will (each start is a new process)."""

    def __init__(self, settings: Settings, task_queue: str, home: ClusterHome, workdir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k not in _NOT_GIVEN}
        shared = Path(settings.home)
        env.update(
            {
                "TEMPORAL_ADDRESS": settings.temporal_address,
                "TEMPORAL_NAMESPACE": settings.temporal_namespace,
                "PITSTOP_TASK_QUEUE": task_queue,
                # The deployment's payload store and codec key, which every worker shares.
                "PITSTOP_PAYLOAD_STORE": f"dir:{shared / 'payloads'}",
                # The test modules (test.durable_step counts calls across processes).
                "PITSTOP_MODULES": "tests.testmodules",
                "PYTHONPATH": str(REPO_ROOT),
                CALL_LOG_ENV: str(workdir / "calls.log"),
                HOLD_FILE_ENV: str(workdir / "hold"),
                **home.environ(),
            }
        )
        if (shared / HOME_KEY_FILE).is_file():
            env["PITSTOP_CODEC_KEY_FILE"] = str(shared / HOME_KEY_FILE)
        self.env = env
        self.task_queue = task_queue
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.pids: list[int] = []

    @property
    def output(self) -> Path:
        return self.workdir / f"cluster-worker-{self.starts}.out"

    def spawn(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        with self.output.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "worker.py", "--activities-only", "--grace-seconds", "1"],
                cwd=REPO_ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.pids.append(self.proc.pid)
        return self.proc

    async def start(self, client: Client, seconds: float = 45.0) -> None:
        """Spawn the worker and wait until Temporal lists it polling its queue."""
        proc = self.spawn()

        async def polling() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"cluster worker exited with {proc.returncode}:\n{self.tail()}")
            return any(self.owns(who) for who in await live_pollers(client, self.task_queue))

        await wait_for(f"the cluster worker of {self.task_queue!r} to poll", polling, seconds)

    def owns(self, identity: str) -> bool:
        """Whether a worker identity (Temporal's default: pid@host) is one of this worker's processes."""
        return identity.split("@", 1)[0] in {str(pid) for pid in self.pids}

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown; in-flight activities are lost and retried elsewhere."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def tail(self, lines: int = 30) -> str:
        text = self.output.read_text(errors="replace") if self.output.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class RehearsedCluster:
    """One cluster of the rehearsal, as a test uses it."""

    name: str
    task_queue: str
    inventory: Path
    sim: SimCluster
    worker: ClusterWorker
    home: ClusterHome
    nodes: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.sim.url


def inventory_text(cluster: str, task_queue: str, hosts: list[str]) -> str:
    """An inventory naming its cluster and the cluster's own task queue."""
    lines = [f"cluster: {{name: {cluster}, task_queue: {task_queue}}}", "all:", "  children:", "    gpu:"]
    lines.append("      hosts:")
    lines.extend(f"        {host}: {{}}" for host in hosts)
    return "\n".join(lines) + "\n"


@contextmanager
def rehearsal_clusters(
    settings: Settings, workdir: Path, names: list[str], queue_prefix: str, nodes: int = 2
) -> Iterator[list[RehearsedCluster]]:
    """A simulator and a (not yet started) activities-only worker per name, each worker's home
    registering only its own simulator; all stopped on exit."""
    clusters: list[RehearsedCluster] = []
    with ExitStack() as stack:
        for name in names:
            base = workdir / name
            home = ClusterHome(base / "home")
            sim = SimCluster(SimConfig(nodes=nodes, domains=1, kubeconfig=base / "kubeconfig", ssh=False))
            sim.start()
            stack.callback(sim.stop)
            home.register(sim, name)
            queue = f"{queue_prefix}-{name}"
            worker = ClusterWorker(settings, queue, home, base)
            stack.callback(worker.stop)
            hosts = sim.gpu_node_names()
            inventory = base / "inventory.yaml"
            inventory.write_text(inventory_text(name, queue, hosts))
            clusters.append(RehearsedCluster(name, queue, inventory, sim, worker, home, hosts))
        yield clusters


async def module_identities(client: Client, handle: WorkflowHandle[Any, Any]) -> dict[str, set[str]]:
    """For each module activity type the run's host workflows started, the identities of the
    workers that started it (from history: the ActivityTaskStarted events)."""
    children: list[str] = []
    async for event in handle.fetch_history_events():
        if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
            children.append(event.start_child_workflow_execution_initiated_event_attributes.workflow_id)
    found: dict[str, set[str]] = {}
    for child in children:
        scheduled: dict[int, str] = {}
        async for event in client.get_workflow_handle(child).fetch_history_events():
            if event.HasField("activity_task_scheduled_event_attributes"):
                scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
            elif event.HasField("activity_task_started_event_attributes"):
                started = event.activity_task_started_event_attributes
                kind = scheduled.get(started.scheduled_event_id, "")
                if kind.startswith("module."):
                    found.setdefault(kind, set()).add(started.identity)
    return found


def completed_calls(log: Path) -> Counter[tuple[str, str]]:
    """(host, task) -> completed `test.durable_step` calls, across every worker process."""
    done: Counter[tuple[str, str]] = Counter()
    for line in log.read_text().splitlines() if log.exists() else []:
        event, host, task, _attempt = line.split("\t")
        if event == "done":
            done[(host, task)] += 1
    return done


def started_calls(log: Path) -> int:
    return sum(
        1 for line in (log.read_text().splitlines() if log.exists() else []) if line.startswith("start")
    )
