"""`pitstop sim serve`: run a rehearsal cluster on loopback and write its kubeconfig (and, with
SSH endpoints, known_hosts, the client key and an inventory of the nodes next to it).

It also registers the cluster with the worker (its kubeconfig and known_hosts in the worker
policy's clusters directory, `$PITSTOP_HOME/clusters/<name>/` by default), as an operator
registers a real cluster: the inventory only names it (docs/policy.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console

from pitstop.policy import PolicyError, WorkerPolicy, load_policy

if TYPE_CHECKING:
    # The simulator is imported only when `pitstop sim serve` runs (the `sim` extra): a worker
    # installed without it still loads this CLI.
    from pitstop_sim.cluster import SimCluster

# pitstop_sim.ssh.files.CLUSTER_NAME and pitstop_sim.etcd_store.DEFAULT_PREFIX, written out so
# that this module loads without the simulator (tests/unit/test_sim_package.py holds them equal).
CLUSTER_NAME = "pitstop-sim"
DEFAULT_PREFIX = "/registry/"

sim_app = typer.Typer(
    help="The rehearsal cluster: a simulated GPU Kubernetes cluster for kubectl and pitstop.",
    no_args_is_help=True,
    add_completion=False,
)

console = Console()
# soft_wrap: an error stays one line however narrow the terminal (scripts and CI logs grep it).
err_console = Console(stderr=True, soft_wrap=True)


def _default_kubeconfig() -> Path:
    """Next to the dev stack's state: $PITSTOP_HOME/sim/kubeconfig (default ./.pitstop)."""
    return Path(os.environ.get("PITSTOP_HOME") or ".pitstop") / "sim" / "kubeconfig"


@sim_app.callback()
def _group() -> None:
    """Keeps `serve` a sub-command even while it is the only one."""


# The options of `serve`, one alias each so that the command's signature stays readable.
_Nodes = Annotated[int | None, typer.Option(min=1, help="Number of nodes (overrides the scenario).")]
_Domains = Annotated[int | None, typer.Option(min=1, help="Failure domains (zones) the nodes spread over.")]
_GpusPerNode = Annotated[int | None, typer.Option(min=0, help="nvidia.com/gpu on each node.")]
_ScenarioFile = Annotated[
    Path | None,
    typer.Option(exists=False, dir_okay=False, help="Scenario YAML (workloads, health, faults)."),
]
_TimeScale = Annotated[
    float | None, typer.Option(help="Simulated seconds per real second (e.g. 60: a minute per second).")
]
_Port = Annotated[int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1 (0 picks a free one).")]
_Kubeconfig = Annotated[
    Path | None,
    typer.Option(help="Where to write the kubeconfig (default: $PITSTOP_HOME/sim/kubeconfig)."),
]
_Ssh = Annotated[
    bool,
    typer.Option(
        "--ssh/--no-ssh",
        help=(
            "An SSH endpoint per node; writes known_hosts, secrets/ and inventory.yaml next to "
            "the kubeconfig."
        ),
    ),
]
_SshUser = Annotated[str, typer.Option(help="The user the nodes' SSH endpoints let in.")]
_Name = Annotated[
    str,
    typer.Option(
        help="The cluster's name: in the inventory, and registered with the worker under it "
        "($PITSTOP_HOME/clusters/<name>/)."
    ),
]
_TaskQueue = Annotated[
    str | None,
    typer.Option(
        help="The cluster's own task queue, written into the inventory's cluster block: its module "
        "tasks go to the worker polling it (`python worker.py --activities-only --task-queue ...`)."
    ),
]
_Etcd = Annotated[
    str | None,
    typer.Option(
        metavar="ENDPOINT",
        help="Persist every object to this etcd (http://127.0.0.1:2379), under --etcd-prefix.",
    ),
]
_EtcdPrefix = Annotated[
    str, typer.Option(help="Key prefix in etcd; one per cluster when several share an etcd.")
]
_EtcdResume = Annotated[
    bool,
    typer.Option(
        "--etcd-resume/--etcd-clear",
        help="Load the objects found under the prefix (resume) instead of clearing them.",
    ),
]
_Rbac = Annotated[
    list[Path] | None,
    typer.Option(
        metavar="PATH",
        help=(
            "Enforce RBAC as an apiserver does, with the Namespaces, ServiceAccounts, roles and "
            "bindings of these YAML files or directories (e.g. deploy/kubernetes); repeatable."
        ),
    ),
]
_ServiceAccount = Annotated[
    str | None,
    typer.Option(
        metavar="NAMESPACE/NAME",
        help=(
            "With --rbac: write the kubeconfig with this ServiceAccount's token (e.g. "
            "pitstop/pitstop-worker); the admin's goes next to it as <kubeconfig>.admin."
        ),
    ),
]


@sim_app.command()
def serve(
    nodes: _Nodes = None,
    domains: _Domains = None,
    gpus_per_node: _GpusPerNode = None,
    scenario: _ScenarioFile = None,
    time_scale: _TimeScale = None,
    port: _Port = 0,
    kubeconfig: _Kubeconfig = None,
    ssh: _Ssh = True,
    ssh_user: _SshUser = "ops",
    name: _Name = CLUSTER_NAME,
    task_queue: _TaskQueue = None,
    etcd: _Etcd = None,
    etcd_prefix: _EtcdPrefix = DEFAULT_PREFIX,
    etcd_resume: _EtcdResume = False,
    rbac: _Rbac = None,
    service_account: _ServiceAccount = None,
) -> None:
    """Serve the Kubernetes API of a simulated GPU cluster until interrupted."""
    from pitstop_sim.cluster import SimCluster, SimConfig
    from pitstop_sim.scenario import Scenario, ScenarioError, load_scenario

    try:
        policy = load_policy()
    except PolicyError as exc:
        err_console.print(f"[red]invalid worker policy:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    try:
        loaded = load_scenario(scenario) if scenario is not None else Scenario()
        config = SimConfig(
            scenario=loaded,
            nodes=nodes,
            domains=domains,
            gpus_per_node=gpus_per_node,
            time_scale=time_scale,
            port=port,
            kubeconfig=kubeconfig or _default_kubeconfig(),
            ssh=ssh,
            ssh_user=ssh_user,
            cluster_name=name,
            cluster_task_queue=task_queue,
            etcd_endpoint=etcd,
            etcd_prefix=etcd_prefix,
            etcd_on_start="load" if etcd_resume else "clear",
            rbac=bool(rbac),
            rbac_policy=list(rbac or []),
            kubeconfig_service_account=service_account,
        )
        cluster = SimCluster(config)
    except ScenarioError as exc:
        err_console.print(f"[red]invalid scenario:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    except ValidationError as exc:
        _invalid_option(exc)
    _serve_until_interrupted(cluster, policy, port)


def _invalid_option(exc: ValidationError) -> NoReturn:
    """Name the command-line option a SimConfig field came from, and exit 2."""
    first = exc.errors(include_url=False)[0]
    where = str(first["loc"][0]) if first["loc"] else "rbac"
    option = "--" + where.replace("_", "-").replace("etcd-endpoint", "etcd")
    option = option.replace("--kubeconfig-service-account", "--service-account")
    option = option.replace("--cluster-task-queue", "--task-queue")
    err_console.print(f"[red]invalid {option}:[/] {first['msg']}", highlight=False)
    raise typer.Exit(2) from None


def _serve_until_interrupted(cluster: SimCluster, policy: WorkerPolicy, port: int) -> None:
    """Run the cluster; what stops it at start becomes one line and an exit code."""
    from pitstop_sim.etcd_store import EtcdStoreError
    from pitstop_sim.rbac_policy import PolicyError as RbacPolicyError
    from pitstop_sim.scenario import ScenarioError
    from pitstop_sim.ssh.server import SshStartError

    try:
        asyncio.run(_serve(cluster, policy))
    except ScenarioError as exc:
        err_console.print(f"[red]invalid scenario:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    except RbacPolicyError as exc:
        err_console.print(f"[red]invalid --rbac policy:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    except EtcdStoreError as exc:
        err_console.print(f"[red]cannot use etcd:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None
    except SshStartError as exc:
        err_console.print(f"[red]cannot start the SSH endpoints:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None
    except OSError as exc:
        err_console.print(f"[red]cannot serve on 127.0.0.1:{port}:[/] {exc.strerror or exc}", highlight=False)
        raise typer.Exit(1) from None


async def _serve(cluster: SimCluster, policy: WorkerPolicy) -> None:
    url = await cluster.start_async()
    registered = cluster.register(policy=policy)
    shape = cluster.scenario.cluster
    console.print(
        f"rehearsal cluster [bold]{cluster.scenario.name}[/] serving at {url}\n"
        f"  {shape.nodes} nodes in {shape.domains} failure domains, {shape.gpus_per_node} GPUs each, "
        f"time scale {cluster.scenario.timing.time_scale:g}\n"
        f"  kubeconfig: {cluster.kubeconfig_path}\n"
        f"  try: kubectl --kubeconfig {cluster.kubeconfig_path} get nodes -o wide\n"
        f"  admin: {url}/_sim/counters, {url}/_sim/timeline\n"
        f"  metrics: {url}/metrics/dcgm, {url}/metrics/kube-state (Xid: POST {url}/_sim/nodes/NODE/xid)\n"
        f"  registered with the worker as cluster '{cluster.config.cluster_name}' in {registered}\n"
        + _queue_summary(cluster)
        + _ssh_summary(cluster)
        + _etcd_summary(cluster)
        + _rbac_summary(cluster)
        + "Press Ctrl+C to stop.",
        highlight=False,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        waiter = asyncio.ensure_future(cluster.serve_forever())
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        stopper.cancel()
    finally:
        await cluster.stop_async()
        console.print("rehearsal cluster stopped")


def _ssh_summary(cluster: SimCluster) -> str:
    if not cluster.config.ssh:
        return ""
    nodes = cluster.node_names()
    shown = nodes if len(nodes) <= 16 else nodes[:3]
    ports = ", ".join(f"{n} {cluster.config.host}:{cluster.ssh_port(n)}" for n in shown)
    more = f", ... ({len(nodes) - len(shown)} more in the inventory)" if len(shown) < len(nodes) else ""
    return (
        f"  ssh ({cluster.config.ssh_user}): {ports}{more}\n"
        f"  inventory: {cluster.inventory_path}\n"
        f"  known_hosts: {cluster.known_hosts_path}\n"
        f"  the worker needs the key: export PITSTOP_SECRETS_DIR={cluster.ssh_secrets_dir}\n"
    )


def _queue_summary(cluster: SimCluster) -> str:
    queue = cluster.config.cluster_task_queue
    if not queue:
        return ""
    return (
        f"  its module tasks go to task queue '{queue}': serve it with the worker of this "
        f"PITSTOP_HOME, `python worker.py --activities-only --task-queue {queue}`\n"
    )


def _rbac_summary(cluster: SimCluster) -> str:
    config = cluster.config
    if not config.rbac:
        return ""
    who = (
        f"ServiceAccount {config.kubeconfig_service_account} (admin: {cluster.admin_kubeconfig_path})"
        if config.kubeconfig_service_account
        else "the admin"
    )
    return (
        f"  RBAC enforced, the kubeconfig is {who}: every request needs a token, and kubectl sends "
        "none over plain HTTP (use the Python client, as the worker does)\n"
    )


def _etcd_summary(cluster: SimCluster) -> str:
    config = cluster.config
    if config.etcd_endpoint is None:
        return ""
    return f"  objects persisted to etcd {config.etcd_endpoint} under {config.etcd_prefix}\n"


def main() -> None:
    sim_app()


if __name__ == "__main__":
    main()
