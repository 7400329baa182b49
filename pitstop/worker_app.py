"""Build and run one pitstop worker: the library side of `python worker.py` and `pitstop worker`.

Activities: pitstop's activities are mostly blocking I/O (the Kubernetes client, paramiko,
boto3, etcdctl subprocesses), so plain `def` activities run on a thread pool sized to
`max_concurrent_activities`; `async def` activities, if any, run on the event loop. On
SIGTERM/SIGINT the worker stops polling, gives in-flight activities `--grace-seconds` to
finish, then cancels them (sync activities see the cancellation on their next heartbeat).

Policy: the worker runs under the worker policy (`PITSTOP_WORKER_POLICY`, see docs/policy.md),
logs which one at start, and refuses to start when it is invalid. `--show-policy` prints the
effective policy (defaults resolved, each rule with where it came from) and exits. Every
activity runs inside a scope that scrubs the secrets it resolved from its error, result and
log lines (`pitstop.policy.scrub`).

Activities only (`--activities-only`): a worker deployed inside one cluster serves that
cluster's module activities on the cluster's own task queue (the inventory's
`cluster.task_queue`) and no workflows; the orchestrating workflows run on a central worker.
Local activities run in the worker that runs the workflow, so such a worker has no use for the
trust activities (signing and checking the run's messages) and holds no worker key.

Keys (`pitstop/keys.py`): a worker signs and checks the messages of its runs with the worker
key and refuses to start without one; it checks signed votes with the vote key, and without
one no vote is verified (gates with `require_verified` cannot pass). Both come from
PITSTOP_WORKER_KEY[_FILE] and PITSTOP_VOTE_KEY[_FILE], or from the embedded stack's home
(`.pitstop/keys/`, written by `pitstop dev up`) when those are not set.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.worker import Interceptor, Worker

from pitstop.client import (
    PitstopConnectionError,
    connect,
    encryption_summary,
    payload_store_summary,
    tracing_interceptor,
)
from pitstop.keys import KeyConfigError, KeyRing, load_key, require_key
from pitstop.logs import configure_logging
from pitstop.metrics.server import MetricsAddressError, parse_address
from pitstop.policy import PolicyError, WorkerPolicy, load_policy
from pitstop.policy.scrub import ScrubSecretsInterceptor
from pitstop.process_exit import exit_now
from pitstop.sandbox import workflow_runner
from pitstop.settings import Settings
from pitstop.telemetry import setup_tracing, shutdown_tracing

# Two cores on the reference machines; activities mostly wait on the network, so a few
# per core keeps the host busy without starving the workflow task threads.
DEFAULT_MAX_CONCURRENT_ACTIVITIES = 16
# Local activities (short SSH reads, signing; see pitstop/local_tasks.py) have their own slots
# and their own threads in the same pool, so a burst of them never keeps a regular activity the
# server already handed out waiting for a thread while its timeouts run.
DEFAULT_MAX_CONCURRENT_LOCAL_ACTIVITIES = 16
DEFAULT_GRACE_SECONDS = 30.0

if TYPE_CHECKING:
    from pitstop.metrics.worker import WorkerMetrics

log = logging.getLogger("pitstop.worker")


class EmptyRegistryError(ValueError):
    """No workflow and no activity to serve: a worker would only fail inside Temporal."""


class WorkerKeys:
    """The keys a worker holds: the worker key (required) and the vote key (optional)."""

    def __init__(self, worker: KeyRing, vote: KeyRing | None) -> None:
        self.worker = worker
        self.vote = vote

    @classmethod
    def load(cls, home: Path | None = None) -> WorkerKeys:
        """From the environment, or the embedded stack's home; KeyConfigError says what to do."""
        keys = cls(require_key("worker", home=home), load_key("vote", home=home))
        if keys.vote is None:
            log.warning(
                "no vote key (PITSTOP_VOTE_KEY or PITSTOP_VOTE_KEY_FILE): no vote can be verified, "
                "so gates with require_verified refuse every vote; give it the Slack bridge's vote key"
            )
        return keys


def _client_has_tracing(client: Client) -> bool:
    return any(isinstance(i, TracingInterceptor) for i in client.config().get("interceptors", []))


def site_activities(environ: Mapping[str, str] = os.environ) -> list[Callable[..., Any]]:
    """The activities of the site modules named in PITSTOP_MODULES (each module's `ACTIVITIES`).

    The same variable makes their specs known to the loader (`pitstop.modules`); without this a
    site module would pass validation and then wait forever for a worker that serves it.
    """
    found: list[Callable[..., Any]] = []
    for name in environ.get("PITSTOP_MODULES", "").split(","):
        if name.strip():
            found.extend(getattr(importlib.import_module(name.strip()), "ACTIVITIES", ()))
    return found


def registered(
    workflows: Sequence[type] | None = None,
    activities: Sequence[Callable[..., Any]] | None = None,
) -> tuple[list[type], list[Callable[..., Any]]]:
    """The given workflows and activities, defaulting to the registries; never both empty."""
    if workflows is None:
        from workflows import WORKFLOWS

        workflows = WORKFLOWS
    if activities is None:
        from activities import ACTIVITIES

        activities = [*ACTIVITIES, *site_activities()]
    if not workflows and not activities:
        raise EmptyRegistryError(
            "no workflows or activities are registered: add them to WORKFLOWS in workflows/__init__.py "
            "and ACTIVITIES in activities/__init__.py"
        )
    return list(workflows), list(activities)


def build_worker(
    client: Client,
    task_queue: str,
    workflows: Sequence[type] | None = None,
    activities: Sequence[Callable[..., Any]] | None = None,
    *,
    max_concurrent_activities: int = DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    max_concurrent_local_activities: int = DEFAULT_MAX_CONCURRENT_LOCAL_ACTIVITIES,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    keys: WorkerKeys | None = None,
    extra_interceptors: Sequence[Interceptor] = (),
    activities_only: bool = False,
) -> Worker:
    """A worker for `task_queue` serving the given (default: registered) workflows and activities,
    and the local activities that sign and check its runs' messages with `keys` (default: read
    from the environment, see `WorkerKeys.load`).

    With `activities_only`, no workflows (whatever `workflows` says) and no trust activities: they
    are local activities of the workflows, run where the workflows run, so no key is needed.

    Raises EmptyRegistryError when there is nothing to serve, KeyConfigError without a worker key.
    """
    workflows, activities = registered([] if activities_only else workflows, activities)
    if not activities_only:
        from activities.trust import TrustActivities

        keys = keys or WorkerKeys.load()
        activities = [*activities, *TrustActivities(keys.worker, keys.vote).activities()]
    # A client made by pitstop.client.connect already carries the tracing interceptor, and
    # Temporal applies client interceptors to the worker too; adding it twice doubles spans.
    interceptors: list[Interceptor] = [] if _client_has_tracing(client) else [tracing_interceptor()]
    # Outside the scrub (e.g. pitstop.metrics: they see an activity's outcome, never its secrets).
    interceptors.extend(extra_interceptors)
    # Innermost: secrets an activity resolved are scrubbed before anything else sees its outcome.
    interceptors.append(ScrubSecretsInterceptor())
    executor = ThreadPoolExecutor(
        max_workers=max_concurrent_activities + max_concurrent_local_activities,
        thread_name_prefix=f"activity-{task_queue}",
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=workflows,
        activities=activities,
        activity_executor=executor,
        max_concurrent_activities=max_concurrent_activities,
        max_concurrent_local_activities=max_concurrent_local_activities,
        interceptors=interceptors,
        graceful_shutdown_timeout=timedelta(seconds=grace_seconds),
        # The engine's own workflow code is passed through (see pitstop/sandbox.py for why that is
        # safe): re-importing it for every new workflow instance cost ~100 ms of CPU per host.
        workflow_runner=workflow_runner(engine=True),
    )


async def run_worker(
    settings: Settings,
    task_queue: str,
    *,
    max_concurrent_activities: int = DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    max_concurrent_local_activities: int = DEFAULT_MAX_CONCURRENT_LOCAL_ACTIVITIES,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    metrics_address: str | None = None,
    activities_only: bool = False,
) -> None:
    """Connect, serve `task_queue` until SIGTERM/SIGINT, then shut down gracefully. With
    `metrics_address` (HOST:PORT), serve pitstop's and the Temporal SDK's metrics there; with
    `activities_only`, only the module activities (a cluster's own worker)."""
    registered([] if activities_only else None)  # fail on empty registries before needing a server
    if metrics_address:
        parse_address(metrics_address)  # MetricsAddressError: refuse to start on a bad address
    policy = load_policy()  # PolicyError: refuse to start, before connecting
    log_policy(policy)
    # And on a missing key; a worker of activities only signs nothing (see the module's doc).
    keys = None if activities_only else WorkerKeys.load(settings.home)
    # Before connecting: the Temporal SDK's metrics need its runtime set up before any client.
    metrics = start_worker_metrics(metrics_address) if metrics_address else None
    client = await connect(settings)
    worker = build_worker(
        client,
        task_queue,
        max_concurrent_activities=max_concurrent_activities,
        max_concurrent_local_activities=max_concurrent_local_activities,
        grace_seconds=grace_seconds,
        keys=keys,
        extra_interceptors=metrics.interceptors if metrics else (),
        activities_only=activities_only,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "worker serving task queue %r on %s (namespace %s): %s",
        task_queue,
        settings.temporal_address,
        settings.temporal_namespace,
        serving_mode(activities_only),
    )
    log.info("payload encryption: %s", encryption_summary(client.data_converter))
    # Clients and the codec server must use this same store, or they cannot read what it writes.
    log.info("payload store: %s", payload_store_summary(client.data_converter))
    async with worker:
        if metrics:
            metrics.sweep(client, task_queue)
        await stop.wait()
        log.info("stopping: in-flight activities have %gs to finish", grace_seconds)
    if metrics:
        metrics.stop()
    # Activities are done: close pooled SSH connections now rather than at interpreter exit.
    from pitstop.ssh import close_all

    close_all()
    log.info("worker stopped")


def serving_mode(activities_only: bool) -> str:
    """What a worker serves, as its start line says it."""
    if activities_only:
        return (
            "activities only (a cluster's worker: the module tasks of runs whose inventory's "
            "cluster names this queue; workflows run on the central worker)"
        )
    return "workflows and activities"


def start_worker_metrics(address: str) -> WorkerMetrics:
    from pitstop.metrics.worker import WorkerMetrics

    return WorkerMetrics.start(address)


def log_policy(policy: WorkerPolicy) -> None:
    from pitstop.policy.show import policy_summary

    log.info("worker %s", policy_summary(policy))


def show_policy() -> int:
    """Print the effective policy; 0, or 2 with the one-line reason when it is invalid."""
    from rich.console import Console

    from pitstop.policy.show import policy_view

    try:
        policy = load_policy()
    except PolicyError as exc:
        typer.echo(f"pitstop worker: invalid worker policy: {exc}", err=True)
        return 2
    Console().print(policy_view(policy))
    return 0


def main(
    task_queue: Annotated[
        str | None, typer.Option(help="Task queue to serve (default: $PITSTOP_TASK_QUEUE or 'pitstop').")
    ] = None,
    max_concurrent_activities: Annotated[
        int, typer.Option(min=1, help="Activities run at once (size of the thread pool).")
    ] = DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    max_concurrent_local_activities: Annotated[
        int,
        typer.Option(
            min=1, help="Local activities run at once (short SSH reads, signing), on their own threads."
        ),
    ] = DEFAULT_MAX_CONCURRENT_LOCAL_ACTIVITIES,
    grace_seconds: Annotated[
        float, typer.Option(min=0, help="On SIGTERM, how long in-flight activities may finish.")
    ] = DEFAULT_GRACE_SECONDS,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
    metrics_address: Annotated[
        str | None,
        typer.Option(
            envvar="PITSTOP_METRICS_ADDRESS",
            help="Serve pitstop's and the Temporal SDK's metrics at http://HOST:PORT/metrics "
            "(e.g. 0.0.0.0:9464; default: off).",
        ),
    ] = None,
    activities_only: Annotated[
        bool,
        typer.Option(
            "--activities-only",
            envvar="PITSTOP_ACTIVITIES_ONLY",
            help="Serve only the module activities, no workflows: the worker deployed inside one "
            "cluster, on that cluster's task queue (the inventory's cluster.task_queue).",
        ),
    ] = False,
    show_policy_: Annotated[
        bool,
        typer.Option(
            "--show-policy",
            help="Print the effective worker policy ($PITSTOP_WORKER_POLICY, defaults resolved) and exit.",
        ),
    ] = False,
) -> None:
    """Run a pitstop worker until SIGTERM or Ctrl-C."""
    if show_policy_:
        raise typer.Exit(code=show_policy())
    configure_logging(log_level)
    settings = Settings.from_env()
    setup_tracing("pitstop-worker")
    code = 0
    try:
        asyncio.run(
            run_worker(
                settings,
                task_queue or settings.task_queue,
                max_concurrent_activities=max_concurrent_activities,
                max_concurrent_local_activities=max_concurrent_local_activities,
                grace_seconds=grace_seconds,
                metrics_address=metrics_address,
                activities_only=activities_only,
            )
        )
    except (EmptyRegistryError, PitstopConnectionError, KeyConfigError, MetricsAddressError) as exc:
        typer.echo(f"pitstop worker: {exc}", err=True)
        code = 2
    except PolicyError as exc:
        typer.echo(f"pitstop worker: invalid worker policy, not starting: {exc}", err=True)
        code = 2
    finally:
        shutdown_tracing()
    # Stopped cleanly (or refused to start): leave without interpreter finalization, which can
    # abort the process while the Temporal core's threads wind down (pitstop/process_exit.py).
    exit_now(code)
