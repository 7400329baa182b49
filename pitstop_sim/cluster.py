"""`SimCluster`: a rehearsal cluster you start in-process (tests, demo) or from `pitstop sim serve`.

    with SimCluster(SimConfig(scenario=load_scenario("s.yaml"), kubeconfig=tmp / "kubeconfig")) as sim:
        subprocess.run(["kubectl", "--kubeconfig", str(sim.kubeconfig_path), "get", "nodes"])
        sim.reboot("gpu-node-001")
        assert sim.counters().pdb_violations == 0

The cluster runs on its own event loop (a background thread after `start()`, or the caller's
loop with `await start_async()`); every method here is safe to call from any thread.
"""

from __future__ import annotations

import asyncio
import builtins
import io
import json
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from ruamel.yaml import YAML

from pitstop.kube.objects import name_of
from pitstop_sim.access import AccessControl, Denial, TokenAuthenticator
from pitstop_sim.admin import AdminRoutes
from pitstop_sim.api import KubeApi
from pitstop_sim.clock import SimClock
from pitstop_sim.context import SimContext
from pitstop_sim.controllers.manager import ControllerManager
from pitstop_sim.controllers.nodes import NodeError
from pitstop_sim.counters import Recorder, unavailability
from pitstop_sim.errors import ApiError
from pitstop_sim.etcd_store import DEFAULT_PREFIX, EtcdObjectStore
from pitstop_sim.faults import FaultInjector
from pitstop_sim.heap import bulk_load
from pitstop_sim.http import HttpFrontend
from pitstop_sim.kubeconfig import DEFAULT_CONTEXT, DEFAULT_TOKEN, write_kubeconfig
from pitstop_sim.kubeconfig import kubeconfig as kubeconfig_data
from pitstop_sim.models import (
    ApiErrorFault,
    CountersSnapshot,
    DomainUnavailability,
    LatencyFault,
    NodeHealth,
    NodeProfile,
    ProfileUpdate,
    TimelineEvent,
    WriteCounts,
)
from pitstop_sim.platform import PlatformOps
from pitstop_sim.rbac import RbacAuthorizer
from pitstop_sim.rbac_policy import install_rbac, parse_account
from pitstop_sim.resources import ResourceRegistry, ResourceType, crd_resource_type
from pitstop_sim.scenario import Scenario, ScenarioError, load_scenario
from pitstop_sim.seed import Seeder, SeedError, node_profiles
from pitstop_sim.ssh.backend import ClusterBackend
from pitstop_sim.ssh.files import CLUSTER_NAME, InventoryHost, SshFiles, write_inventory, write_known_hosts
from pitstop_sim.ssh.keys import client_key
from pitstop_sim.ssh.models import SshEndpointInfo, SshNodeFaults
from pitstop_sim.ssh.server import SshEndpoints, follow_reboots
from pitstop_sim.store import InMemoryStore, ObjectStore, WatchEvent

if TYPE_CHECKING:
    from pitstop.policy.effective import WorkerPolicy

T = TypeVar("T")
Obj = dict[str, Any]


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is still pending (connections closing) so the loop closes cleanly."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


class SimConfig(BaseModel):
    """How to run a rehearsal cluster. Shape options override the scenario's `cluster:`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    scenario: Scenario = Field(default_factory=Scenario)
    nodes: int | None = Field(default=None, ge=1)
    domains: int | None = Field(default=None, ge=1)
    gpus_per_node: int | None = Field(default=None, ge=0)
    time_scale: float | None = Field(default=None, gt=0)
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port.")
    kubeconfig: Path | None = Field(default=None, description="Write a kubeconfig here on start.")
    token: str = DEFAULT_TOKEN
    require_token: bool = Field(
        default=False, description="Refuse anonymous requests (kubectl sends no token over plain HTTP)."
    )
    rbac: bool = Field(
        default=False,
        description=(
            "Authorize every API request with RBAC as the apiserver does (pitstop_sim.rbac): a "
            "token is required (401 without one) and only what the stored Roles, ClusterRoles and "
            "bindings grant is served (403 otherwise). The admin token can do anything."
        ),
    )
    rbac_policy: list[Path] = Field(
        default_factory=list,
        description=(
            "RBAC YAML files or directories (e.g. deploy/kubernetes): their Namespaces, "
            "ServiceAccounts, Roles, ClusterRoles and bindings are created at start (rbac only)."
        ),
    )
    service_accounts: list[str] = Field(
        default_factory=list,
        description=(
            "'namespace/name' of ServiceAccounts to issue tokens for (`service_account_token`); "
            "each must exist once the policy is applied (rbac only)."
        ),
    )
    kubeconfig_service_account: str | None = Field(
        default=None,
        description=(
            "Write `kubeconfig` with this ServiceAccount's token (issued for it), and the admin's "
            "kubeconfig next to it as `<kubeconfig>.admin` (rbac only)."
        ),
    )
    ssh: bool = Field(
        default=False, description="Give every node an SSH endpoint on `host` (pitstop_sim.ssh)."
    )
    ssh_user: str = Field(default="ops", min_length=1, description="The user the SSH endpoints let in.")
    cluster_name: str = Field(
        default=CLUSTER_NAME,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="The cluster's name in the inventory written next to the SSH files, and the name "
        "it is registered under with the worker (`register`).",
    )
    cluster_task_queue: str | None = Field(
        default=None,
        min_length=1,
        description="The cluster's own task queue, written into that inventory's `cluster:` block: the "
        "queue its activities-only worker polls (docs/deployment.md, 'A worker per cluster').",
    )
    ssh_dir: Path | None = Field(
        default=None,
        description="Where known_hosts, secrets/ and inventory.yaml go (default: next to the kubeconfig).",
    )

    etcd_endpoint: str | None = Field(
        default=None,
        description="Persist every object to this etcd (`http://127.0.0.1:2379`), under `etcd_prefix`.",
    )
    etcd_prefix: str = Field(
        default=DEFAULT_PREFIX, description="Key prefix in etcd; give each cluster sharing an etcd its own."
    )
    etcd_on_start: Literal["clear", "load"] = Field(
        default="clear",
        description="Objects already under the prefix: cleared (start from the scenario) or loaded.",
    )

    @field_validator("etcd_endpoint")
    @classmethod
    def _plain_http(cls, endpoint: str | None) -> str | None:
        if endpoint is not None and not endpoint.startswith("http://"):
            raise ValueError(
                f"{endpoint!r} is not an etcd client URL like http://127.0.0.1:2379 "
                "(plain http only: the simulator speaks etcd's JSON gateway without TLS)"
            )
        return endpoint

    @field_validator("etcd_prefix")
    @classmethod
    def _slashes(cls, prefix: str) -> str:
        if not (prefix.startswith("/") and prefix.endswith("/")):
            raise ValueError(
                f"the etcd key prefix must start and end with '/', e.g. /registry/ (got {prefix!r})"
            )
        return prefix

    @field_validator("service_accounts")
    @classmethod
    def _account_names(cls, accounts: list[str]) -> list[str]:
        for account in accounts:
            parse_account(account)
        return accounts

    @model_validator(mode="after")
    def _rbac_options(self) -> SimConfig:
        if not self.rbac and (self.rbac_policy or self.service_accounts or self.kubeconfig_service_account):
            raise ValueError(
                "rbac_policy, service_accounts and kubeconfig_service_account need rbac=True "
                "(--rbac): without RBAC every token is the admin's"
            )
        account = self.kubeconfig_service_account
        if account is not None:
            parse_account(account)
            if self.kubeconfig is None:
                raise ValueError("kubeconfig_service_account needs kubeconfig (where to write it)")
            if account not in self.service_accounts:
                self.service_accounts = [*self.service_accounts, account]
        return self

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> SimConfig:
        return cls(scenario=load_scenario(path), **overrides)

    def resolved_scenario(self) -> Scenario:
        scenario = self.scenario.with_shape(self.nodes, self.domains, self.gpus_per_node)
        if self.time_scale is not None:
            scenario = scenario.model_copy(
                update={"timing": scenario.timing.model_copy(update={"time_scale": self.time_scale})}
            )
        scenario.check_references()
        return scenario


def _resume(ctx: SimContext) -> None:
    """What seeding sets up besides the objects, for a cluster loaded back from etcd: the node
    profiles of the scenario's nodes still there, the served custom resources, PDB faults."""
    profiles = node_profiles(ctx.scenario)
    ctx.profiles.update({n: p for n, p in profiles.items() if ctx.store.get("nodes", None, n) is not None})
    for crd in ctx.store.list("customresourcedefinitions").items:
        for rt in crd_resource_type(crd):
            ctx.registry.add(rt)
    ctx.pdbs_never_allow.update(ctx.scenario.faults.pdbs_never_allow)
    if ctx.scenario.platform is not None:
        # The control plane runs what its apiserver mirror pod's image says (upgrades persist).
        ctx.kubernetes_version = ctx.scenario.platform.kubernetes_version
        for pod in ctx.store.list("pods", "kube-system").items:
            if (pod["metadata"].get("labels") or {}).get("component") == "kube-apiserver":
                ctx.kubernetes_version = pod["spec"]["containers"][0]["image"].rsplit(":", 1)[-1]


class SimControl:
    """Operations on a running cluster; call on its loop thread (SimCluster does that for you)."""

    def __init__(
        self, ctx: SimContext, api: KubeApi, manager: ControllerManager, ssh: SshEndpoints | None = None
    ) -> None:
        self.ctx = ctx
        self.api = api
        self.manager = manager
        self.ssh = ssh
        self.platform = PlatformOps(ctx, api, manager)
        self.access: AccessControl | None = None

    def counters(self) -> CountersSnapshot:
        return self.ctx.recorder.snapshot(self.ctx.faults.injected_counts())

    def reset_counters(self) -> None:
        self.ctx.recorder.reset()
        self.ctx.writes.reset()

    def writes(self, resource: str, annotation: str | None = None) -> WriteCounts:
        """Objects of `resource` (a plural: `nodes`, `pods`, `clusterqueues`) written so far."""
        served = [rt for rt in self.ctx.registry.all() if resource in (rt.plural, rt.storage)]
        if not served:
            raise KeyError(f"the rehearsal cluster does not serve {resource!r}")
        storage = min(served, key=lambda rt: (rt.group != "", rt.group)).storage
        return self.ctx.writes.counts(storage, annotation)

    def timeline(self) -> list[TimelineEvent]:
        return list(self.ctx.recorder.timeline)

    def reboot(self, node: str) -> None:
        try:
            self.manager.nodes.reboot(node)
        except NodeError as exc:
            raise KeyError(str(exc)) from None

    def node_profile(self, node: str) -> NodeProfile:
        profile = self.ctx.profiles.get(node)
        if profile is None:
            raise KeyError(f"node {node!r} not found")
        return profile.model_copy(deep=True)

    def set_node_profile(self, node: str, update: ProfileUpdate) -> NodeProfile:
        try:
            return self.manager.nodes.set_profile(node, update).model_copy(deep=True)
        except NodeError as exc:
            raise KeyError(str(exc)) from None

    def _endpoints(self) -> SshEndpoints:
        if self.ssh is None:
            raise KeyError(
                "the rehearsal cluster runs without SSH endpoints (start it with --ssh / ssh=True)"
            )
        return self.ssh

    def ssh_info(self, node: str) -> SshEndpointInfo:
        return self._endpoints().info(node)

    def set_ssh_faults(self, node: str, faults: SshNodeFaults) -> SshEndpointInfo:
        return self._endpoints().set_faults(node, faults)

    def faults(self) -> dict[str, Any]:
        return self.ctx.faults.describe()

    def add_fault(self, fault: ApiErrorFault | LatencyFault) -> int:
        if isinstance(fault, ApiErrorFault):
            return self.ctx.faults.add_error(fault)
        return self.ctx.faults.add_latency(fault)

    def clear_faults(self) -> None:
        self.ctx.faults.clear()

    def block_pdb(self, namespace: str, name: str, *, blocked: bool) -> None:
        key = f"{namespace}/{name}"
        if self.ctx.store.get("poddisruptionbudgets", namespace, name) is None:
            raise KeyError(f"poddisruptionbudget {key!r} not found")
        if blocked:
            self.ctx.pdbs_never_allow.add(key)
        else:
            self.ctx.pdbs_never_allow.discard(key)
        # Recompute now so that the PDB's status shows the change.
        self.manager.disruption.mark(namespace)
        self.manager.wake()

    def rbac_denials(self) -> list[Denial]:
        return self.access.denials() if self.access is not None else []

    def state(self) -> dict[str, Any]:
        counts = {rt.plural: self.ctx.store.count(rt.storage) for rt in self.ctx.registry.all()}
        return {
            "scenario": self.ctx.scenario.name,
            "kubernetes_version": self.ctx.kubernetes_version,
            "sim_seconds": round(self.ctx.clock.now(), 3),
            "time_scale": self.ctx.clock.time_scale,
            "resource_version": self.ctx.store.resource_version,
            "objects": {k: v for k, v in counts.items() if v},
        }


class SimCluster:
    def __init__(self, config: SimConfig | None = None, *, store: ObjectStore | None = None) -> None:
        self.config = config or SimConfig()
        self.scenario = self.config.resolved_scenario()
        self._store = store
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._thread: threading.Thread | None = None
        self._stop_event: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._frontend: HttpFrontend | None = None
        self._control: SimControl | None = None
        self._port = 0
        self.kubeconfig_path: Path | None = None
        self._ssh: SshEndpoints | None = None
        self._ssh_files: SshFiles | None = None
        self._ssh_tmp: Path | None = None
        self._unsubscribe_ssh: Callable[[], None] = lambda: None
        self._etcd: EtcdObjectStore | None = None
        self._tokens: dict[str, tuple[str, str]] = {}
        self.admin_kubeconfig_path: Path | None = None
        # Who the kubeconfig handed out (`kubeconfig_path`) authenticates as: (token, user name;
        # None for the admin's). `register` gives the worker the same credentials.
        self._handed_out: tuple[str, str | None] = (self.config.token, None)
        # Names this cluster was registered under: the embedded stack's Prometheus scrapes them
        # until the cluster stops (pitstop/prometheus_stack.py).
        self._scraped_as: dict[str, Path] = {}

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if not self._port:
            raise RuntimeError("the simulator is not running; call start() first")
        return f"http://{self.config.host}:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    @property
    def token(self) -> str:
        return self.config.token

    @property
    def control(self) -> SimControl:
        if self._control is None:
            raise RuntimeError("the simulator is not running; call start() first")
        return self._control

    async def start_async(self) -> str:
        """Seed and serve on the running loop; returns the base URL."""
        scenario = self.scenario
        clock = SimClock(scenario.timing.time_scale)
        store = self._store or await self._open_store()
        profiles: dict[str, NodeProfile] = {}

        def domain_of(node: str) -> str:
            profile = profiles.get(node)
            return profile.domain if profile else ""

        ctx = SimContext(
            scenario=scenario,
            clock=clock,
            store=store,
            registry=ResourceRegistry(),
            recorder=Recorder(
                clock, domain_of, lambda node: ctx.pods_on_node(node), lambda pod: ctx.is_training(pod)
            ),
            faults=FaultInjector(seed=scenario.seed),
            rng=random.Random(scenario.seed),
            profiles=profiles,
        )
        for fault in scenario.faults.api_errors:
            ctx.faults.add_error(fault)
        for latency in scenario.faults.latency:
            ctx.faults.add_latency(latency)
        store.subscribe(ctx.recorder.observe)
        api = KubeApi(ctx)
        manager = ControllerManager(ctx, api)
        try:
            if store.count("namespaces"):  # it holds a cluster already (loaded from etcd): resume
                _resume(ctx)
            else:
                with bulk_load(lambda: store.resource_version):
                    Seeder(ctx, api, manager.kubelet).seed()
        except (SeedError, ApiError) as exc:
            raise ScenarioError(f"scenario {scenario.name!r} cannot be set up: {exc}") from None
        store.subscribe(ctx.writes.observe)  # counts what happens from now on, not the seeding
        access = self._access_control(ctx, api)
        manager.start()
        self._control = SimControl(ctx, api, manager)
        self._control.access = access
        self._frontend = HttpFrontend(
            ctx,
            api,
            AdminRoutes(self._control),
            self.config.token,
            require_token=self.config.require_token,
            access=access,
        )
        self._runner = web.AppRunner(
            self._frontend.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, reuse_address=True)
        await site.start()
        address = self._runner.addresses[0]
        self._port = int(address[1])
        self._frontend.server_address = f"{self.config.host}:{self._port}"
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stop_event = asyncio.Event()
        self._write_kubeconfigs()
        if self.config.ssh:
            self._start_ssh(store, manager)
        return self.url

    def _access_control(self, ctx: SimContext, api: KubeApi) -> AccessControl | None:
        """With `rbac`: the policy's objects installed, and who may do what by their tokens."""
        if not self.config.rbac:
            return None
        try:
            self._tokens = install_rbac(
                ctx, api, [p.expanduser() for p in self.config.rbac_policy], self.config.service_accounts
            )
        except ApiError as exc:
            raise ScenarioError(f"the RBAC policy cannot be applied: {exc}") from None
        authenticator = TokenAuthenticator(ctx.store, self.config.token, self._tokens)
        return AccessControl(authenticator, RbacAuthorizer(ctx.store))

    def _write_kubeconfigs(self) -> None:
        """The kubeconfig; with a service account it holds that account's token and the
        admin's goes next to it as `<kubeconfig>.admin`."""
        kubeconfig = self.config.kubeconfig
        if kubeconfig is None:
            return
        if self.config.kubeconfig_service_account is not None:
            self.admin_kubeconfig_path = self.write_kubeconfig(
                kubeconfig.with_name(f"{kubeconfig.name}.admin")
            )
            self.write_kubeconfig(kubeconfig, service_account=self.config.kubeconfig_service_account)
        else:
            self.admin_kubeconfig_path = self.write_kubeconfig(kubeconfig)

    async def _open_store(self) -> ObjectStore:
        if self.config.etcd_endpoint is None:
            return InMemoryStore()
        self._etcd = EtcdObjectStore(
            self.config.etcd_endpoint, prefix=self.config.etcd_prefix, on_start=self.config.etcd_on_start
        )
        await asyncio.to_thread(self._etcd.open)
        return self._etcd

    def _close_etcd(self) -> None:
        etcd, self._etcd = self._etcd, None
        if etcd is not None:
            etcd.close()

    def flush_etcd(self, timeout: float = 30.0) -> None:
        """Wait until etcd holds every change made so far (SimConfig(etcd_endpoint=...) only)."""
        if self._etcd is None:
            raise RuntimeError(
                "the simulator is not running on etcd; start it with SimConfig(etcd_endpoint=...)"
            )
        self._etcd.flush(timeout)

    def _start_ssh(self, store: ObjectStore, manager: ControllerManager) -> None:
        """One SSH endpoint per node, and the files a worker needs to use them."""
        if self.config.ssh_dir is not None:
            directory = self.config.ssh_dir.expanduser()
        elif self.kubeconfig_path is not None:
            directory = self.kubeconfig_path.parent
        else:
            self._ssh_tmp = directory = Path(tempfile.mkdtemp(prefix="pitstop-sim-ssh-"))
        files = SshFiles(directory)
        endpoints = SshEndpoints(
            self.node_names(),
            ClusterBackend(self),
            user=self.config.ssh_user,
            client_key=client_key(files.client_key),
            bind_host=self.config.host,
            faults=self.scenario.faults.ssh,
        )
        endpoints.start()
        changed = follow_reboots(endpoints, manager.nodes.is_rebooting)

        def observe(event: WatchEvent) -> None:
            if event.storage == "nodes":
                changed(name_of(event.obj), event.type == "DELETED")

        self._unsubscribe_ssh = store.subscribe(observe)
        write_known_hosts(files.known_hosts, endpoints.known_hosts_lines())
        profiles = self.control.ctx.profiles
        write_inventory(
            files.inventory,
            [
                InventoryHost(
                    n,
                    endpoints.port(n),
                    profiles[n].domain,
                    profiles[n].role,
                    profiles[n].gpu_product,
                    profiles[n].gpus,
                )
                for n in endpoints.nodes()
            ],
            user=self.config.ssh_user,
            bind_host=self.config.host,
            cluster_name=self.config.cluster_name,
            task_queue=self.config.cluster_task_queue,
        )
        self._ssh, self._ssh_files = endpoints, files
        self.control.ssh = endpoints

    def _stop_ssh(self) -> None:
        self._unsubscribe_ssh()
        if self._ssh is not None:
            self._ssh.stop()
            self._ssh = None
        if self._ssh_tmp is not None:
            shutil.rmtree(self._ssh_tmp, ignore_errors=True)
            self._ssh_tmp = None

    async def stop_async(self) -> None:
        from pitstop.prometheus_stack import remove_sim_targets

        for name, home in self._scraped_as.items():
            remove_sim_targets(home, name)
        self._scraped_as.clear()
        self._stop_ssh()
        if self._frontend is not None:
            self._frontend.close()
        if self._control is not None:
            await self._control.manager.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await asyncio.to_thread(self._close_etcd)
        self._port = 0

    async def serve_forever(self) -> None:
        """For `pitstop sim serve`: run until cancelled or `stop()`."""
        assert self._stop_event is not None
        await self._stop_event.wait()

    def start(self, timeout: float = 120.0) -> str:
        """Start on a background thread; returns the base URL once it is serving."""
        if self._thread is not None:
            raise RuntimeError("the simulator is already running")
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as exc:  # reported to the caller of start()
                failure.append(exc)
                self._close_etcd()
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_until_complete(self.serve_forever())
            finally:
                loop.run_until_complete(self.stop_async())
                _cancel_remaining(loop)
                loop.close()

        self._thread = threading.Thread(target=main, name="pitstop-sim", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"the simulator did not start within {timeout}s")
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self.url

    def stop(self, timeout: float = 30.0) -> None:
        loop, event = self._loop, self._stop_event
        if loop is not None and event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> SimCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: str | Path, *, service_account: str | None = None) -> Path:
        """A kubeconfig for this cluster: the admin's, or a ServiceAccount's ('namespace/name',
        one of `SimConfig.service_accounts`) on a cluster with RBAC."""
        token, user = self._credentials(service_account)
        written = write_kubeconfig(path, self.url, token, user=user)
        self.kubeconfig_path = written
        self._handed_out = (token, user)
        return written

    def _credentials(self, service_account: str | None) -> tuple[str, str | None]:
        """(token, kubeconfig user name) of the admin (None) or of a ServiceAccount."""
        if service_account is None:
            return self.config.token, None
        return (
            self.service_account_token(service_account),
            f"{DEFAULT_CONTEXT}-{service_account.replace('/', '-')}",
        )

    def service_account_token(self, account: str) -> str:
        """The bearer token issued for a ServiceAccount ('namespace/name') of SimConfig.service_accounts."""
        wanted = parse_account(account)
        for token, issued in self._tokens.items():
            if issued == wanted:
                return token
        raise KeyError(
            f"no token was issued for ServiceAccount {account}; name it in SimConfig.service_accounts "
            "(the cluster must run with rbac=True)"
        )

    def rbac_denials(self) -> builtins.list[Denial]:
        """Every request RBAC refused so far (empty without rbac)."""
        return self.call(lambda c: c.rbac_denials())

    def register(
        self,
        name: str | None = None,
        policy: WorkerPolicy | None = None,
        *,
        service_account: str | None = None,
    ) -> Path:
        """Register this cluster with the worker, as an operator would a real one: its kubeconfig
        (and, with SSH endpoints, its nodes' known_hosts) in the worker's clusters directory
        under `name` (default: `cluster_name`). Returns that directory.

        The registered kubeconfig authenticates as the one this cluster hands out
        (`kubeconfig_path`): the ServiceAccount's of `SimConfig.kubeconfig_service_account` or
        of the last `write_kubeconfig(service_account=)`, else the admin's; `service_account`
        chooses one explicitly. So a worker under RBAC never gets the admin token by accident."""
        from pitstop.policy.clusters import register_cluster

        token, user = self._credentials(service_account) if service_account else self._handed_out
        config = io.StringIO()
        yaml = YAML(typ="safe", pure=True)
        yaml.default_flow_style = False
        yaml.dump(kubeconfig_data(self.url, token, user=user), config)
        known = self.known_hosts_path.read_text(encoding="utf-8") if self._ssh_files is not None else None
        name = name or self.config.cluster_name
        directory = register_cluster(name, kubeconfig=config.getvalue(), known_hosts=known, policy=policy)
        # A cluster the worker knows is one the stack's Prometheus (`pitstop dev up --with
        # prometheus`) scrapes: list its exporters there (cheap when no Prometheus runs).
        from pitstop.prometheus_stack import stack_home, write_sim_targets

        home = stack_home()
        write_sim_targets(home, name, self.url, self.gpu_node_names(), self.control_plane_names())
        self._scraped_as[name] = home
        return directory

    # --- SSH endpoints (SimConfig(ssh=True)) ------------------------------------------------------

    @property
    def ssh_endpoints(self) -> SshEndpoints:
        if self._ssh is None:
            raise RuntimeError("the simulator runs without SSH endpoints; start it with SimConfig(ssh=True)")
        return self._ssh

    @property
    def ssh_files(self) -> SshFiles:
        if self._ssh_files is None:
            raise RuntimeError("the simulator runs without SSH endpoints; start it with SimConfig(ssh=True)")
        return self._ssh_files

    def ssh_port(self, node: str) -> int:
        return self.ssh_endpoints.port(node)

    @property
    def known_hosts_path(self) -> Path:
        return self.ssh_files.known_hosts

    @property
    def client_key_path(self) -> Path:
        """The secret `sim-ssh-key` in `ssh_secrets_dir` (set PITSTOP_SECRETS_DIR to that)."""
        return self.ssh_files.client_key

    @property
    def ssh_secrets_dir(self) -> Path:
        return self.ssh_files.secrets_dir

    @property
    def inventory_path(self) -> Path:
        return self.ssh_files.inventory

    def ssh_info(self, node: str) -> SshEndpointInfo:
        return self.call(lambda c: c.ssh_info(node))

    def set_ssh_faults(self, node: str, faults: SshNodeFaults) -> SshEndpointInfo:
        return self.call(lambda c: c.set_ssh_faults(node, faults))

    # --- thread-safe operations -----------------------------------------------------------------

    def call(self, fn: Callable[[SimControl], T], timeout: float = 30.0) -> T:
        """Run `fn(control)` on the simulator's loop and return its result."""
        control = self.control
        if threading.get_ident() == self._loop_thread:
            return fn(control)
        assert self._loop is not None

        async def run() -> T:
            return fn(control)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def counters(self) -> CountersSnapshot:
        return self.call(lambda c: c.counters())

    def reset_counters(self) -> None:
        """Counters, the write counts and annotation changes start again from zero."""
        self.call(lambda c: c.reset_counters())

    def writes(self, resource: str = "nodes", annotation: str | None = None) -> WriteCounts:
        """Per object of `resource`: changes stored and annotation changes (GET /_sim/writes)."""
        return self.call(lambda c: c.writes(resource, annotation))

    def timeline(self) -> list[TimelineEvent]:
        return self.call(lambda c: c.timeline())

    def unavailability(self) -> list[DomainUnavailability]:
        return unavailability(self.timeline())

    def reboot(self, node: str) -> None:
        self.call(lambda c: c.reboot(node))

    def node_profile(self, node: str) -> NodeProfile:
        return self.call(lambda c: c.node_profile(node))

    def node_health(self, node: str) -> NodeHealth:
        """The health validation on `node` finds now: its own, with the scenario's regressions
        that hold for the versions it runs."""
        return self.call(lambda c: c.ctx.effective_profile(c.node_profile(node)).health)

    def kubernetes_version(self) -> str:
        """The control plane's version (what /version answers)."""
        return self.call(lambda c: c.platform.kubernetes_version())

    def set_node_profile(self, node: str, update: ProfileUpdate) -> NodeProfile:
        return self.call(lambda c: c.set_node_profile(node, update))

    def inject_xid(self, node: str, xid: int, gpu: int = 0) -> NodeHealth:
        """GPU `gpu` of `node` raises Xid `xid` (what POST /_sim/nodes/{node}/xid does): the
        dcgm-exporter metrics, dmesg and dcgmi of the node show it until `clear_xids`."""
        from pitstop_sim.metrics.routes import XidInjection, inject_xid

        return self.call(lambda c: inject_xid(c, node, XidInjection(xid=xid, gpu=gpu)))

    def clear_xids(self, node: str) -> NodeHealth:
        from pitstop_sim.metrics.routes import clear_xids

        return self.call(lambda c: clear_xids(c, node))

    def add_fault(self, fault: ApiErrorFault | LatencyFault) -> int:
        return self.call(lambda c: c.add_fault(fault))

    def clear_faults(self) -> None:
        self.call(lambda c: c.clear_faults())

    def block_pdb(self, namespace: str, name: str, *, blocked: bool = True) -> None:
        self.call(lambda c: c.block_pdb(namespace, name, blocked=blocked))

    def resource(self, resource: str) -> ResourceType:
        """`pods`, `nodes`, `deployments`, `apps/deployments`, `kueue.x-k8s.io/clusterqueues`."""

        def find(c: SimControl) -> ResourceType:
            if "/" in resource:
                group, plural = resource.rsplit("/", 1)
                return c.ctx.registry.lookup(group, plural)
            matches = sorted(
                (rt for rt in c.ctx.registry.all() if resource in (rt.plural, rt.singular, *rt.short_names)),
                key=lambda rt: (rt.group != "", rt.group),
            )
            if not matches:
                raise KeyError(f"the rehearsal cluster does not serve {resource!r}")
            return matches[0]

        return self.call(find)

    def get(self, resource: str, name: str, namespace: str | None = None) -> Obj | None:
        rt = self.resource(resource)
        return self.call(lambda c: c.ctx.store.get(rt.storage, namespace if rt.namespaced else None, name))

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        rt = self.resource(resource)
        return self.call(
            lambda c: (
                c.api.list(
                    rt, namespace, label_selector=label_selector, field_selector=field_selector
                ).result.items
            )
        )

    def create(self, resource: str, body: Obj, namespace: str | None = None) -> Obj:
        rt = self.resource(resource)
        return self.call(lambda c: c.api.create(rt, namespace, body))

    def patch(
        self, resource: str, name: str, patch: Obj, namespace: str | None = None, *, status: bool = False
    ) -> Obj:
        """JSON merge patch (in-process, no faults applied)."""
        rt = self.resource(resource)
        raw = json.dumps(patch).encode()
        return self.call(
            lambda c: c.api.patch(
                rt,
                namespace,
                name,
                "application/merge-patch+json",
                raw,
                subresource="status" if status else None,
            )
        )

    def delete(self, resource: str, name: str, namespace: str | None = None) -> Obj:
        rt = self.resource(resource)
        return self.call(lambda c: c.api.delete(rt, namespace, name))

    def wait_for(
        self, predicate: Callable[[SimCluster], bool], timeout: float = 30.0, what: str = "condition"
    ) -> None:
        """Poll `predicate(self)` until true; TimeoutError names `what`."""
        deadline = time.monotonic() + timeout
        while True:
            if predicate(self):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.05)

    def node_names(self) -> builtins.list[str]:
        """Every node: the GPU nodes, then control-plane nodes (scenarios with a `platform:`)."""
        return self.scenario.all_node_names()

    def gpu_node_names(self) -> builtins.list[str]:
        return self.scenario.cluster.node_names()

    def control_plane_names(self) -> builtins.list[str]:
        return self.scenario.control_plane_names()
