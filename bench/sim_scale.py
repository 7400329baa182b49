"""Rehearsal cluster at fleet scale (default 1,000 nodes and 20,000 pods; the fleet benchmark
runs 10,000 and 100,000), driven by the official `kubernetes` client the way a rollout drives
a cluster: list nodes by label, get a node, patch its annotations and `spec.unschedulable`,
list the pods on a node (drain's field selector), evict a pod, and watch nodes.

Prints the server's start-up time (wall and CPU: the machine may be shared) and RSS, then
p50/p99 latency of each call (the response read as bytes), each as a ratio to the raw HTTP
round trip of `GET /version` measured in the same run on the same connection pool (the floor
any call pays). "watch" is
the time from sending a patch to the watch event for it arriving. `kubectl` checks two answers
independently at the end.

    .venv/bin/python bench/sim_scale.py [--nodes 1000] [--pods 20000] [--domains 16] [--rounds 50]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kubernetes import client, config, watch
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parent.parent
DAEMONSETS_PER_NODE = 3  # GPU Operator: driver, device plugin, DCGM exporter
DOMAIN_LABEL = "topology.kubernetes.io/zone"
WATCH_KEY = "bench.pitstop.dev/watch"
START_TIMEOUT = 900.0
# Calls return the response's bytes: the server's latency, not the client's model decoding
# (one row shows that cost).
RAW = {"_preload_content": False}


def scenario(nodes: int, pods: int, domains: int = 10) -> dict[str, object]:
    """Deployments sized so that DaemonSet pods plus replicas make exactly `pods` pods."""
    workload_pods = pods - DAEMONSETS_PER_NODE * nodes
    if workload_pods < 0:
        raise SystemExit(
            f"{pods} pods cannot hold the {DAEMONSETS_PER_NODE * nodes} DaemonSet pods of {nodes} nodes"
        )
    gpu_replicas = min(nodes, workload_pods // 10)
    deployments: list[dict[str, object]] = []
    for i in range(gpu_replicas // 10):
        deployments.append(
            {
                "name": f"gpu-svc-{i:03d}",
                "namespace": "serving",
                "replicas": 10,
                "gpus": 1,
                "cpu": "1",
                "memory": "4Gi",
                "pdb": {"max_unavailable": 1},
            }
        )
    rest = workload_pods - 10 * (gpu_replicas // 10)
    index = 0
    while rest > 0:
        replicas = min(100, rest)
        deployments.append(
            {
                "name": f"svc-{index:03d}",
                "namespace": f"team-{index % 8}",
                "replicas": replicas,
                "cpu": "100m",
                "memory": "128Mi",
                "pdb": {"max_unavailable": "10%"},
            }
        )
        rest -= replicas
        index += 1
    return {
        "name": "fleet-scale",
        "cluster": {"nodes": nodes, "domains": domains, "gpus_per_node": 8},
        "timing": {"time_scale": 60},
        "workloads": {"deployments": deployments},
    }


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(fn: Callable[[int], object], rounds: int) -> list[float]:
    fn(0)  # warm-up (connection, caches)
    out = []
    for i in range(rounds):
        start = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - start)
    return out


class Simulator:
    """`pitstop sim serve --no-ssh` in a subprocess, with its own PITSTOP_HOME."""

    def __init__(self, workdir: Path, nodes: int, pods: int, domains: int) -> None:
        self.workdir = workdir
        scenario_file = workdir / "scenario.yaml"
        scenario_file.write_text(json.dumps(scenario(nodes, pods, domains), indent=1))  # JSON is YAML
        self.kubeconfig = workdir / "kubeconfig"
        self.log = workdir / "sim.log"
        started = time.perf_counter()
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pitstop.cli.sim",
                    "serve",
                    "--no-ssh",
                    "--scenario",
                    str(scenario_file),
                    "--kubeconfig",
                    str(self.kubeconfig),
                ],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "COLUMNS": "200", "PITSTOP_HOME": str(workdir / "home")},
            )
        self.server = self._wait_serving()
        self.startup_wall = time.perf_counter() - started
        self.startup_cpu = self.cpu_seconds()

    def _wait_serving(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"simulator exited: {self.log.read_text()}")
            if self.kubeconfig.exists():
                loaded = YAML(typ="safe", pure=True).load(self.kubeconfig.read_text())
                server = str(loaded["clusters"][0]["cluster"]["server"])
                try:
                    urllib.request.urlopen(f"{server}/version", timeout=1).read()
                    return server
                except OSError:
                    pass
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"simulator did not start within {START_TIMEOUT:.0f}s")

    def status_mb(self, field: str) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class NodeWatcher:
    """A watch on nodes (its own client and connection), noting when each `WATCH_KEY` value
    is first seen, so that a patch's latency to its watch event can be measured."""

    def __init__(self, kubeconfig: Path, resource_version: str) -> None:
        self._core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self._watch = watch.Watch()
        self._seen: dict[str, float] = {}
        self._stopping = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(resource_version,), daemon=True)
        self._thread.start()

    def _run(self, resource_version: str) -> None:
        try:
            for event in self._watch.stream(
                self._core.list_node, resource_version=resource_version, timeout_seconds=3600
            ):
                value = (event["object"].metadata.annotations or {}).get(WATCH_KEY)
                if value is not None:
                    with self._changed:
                        self._seen.setdefault(value, time.perf_counter())
                        self._changed.notify_all()
        except Exception:
            if not self._stopping:  # the simulator going away at the end ends the stream
                raise

    def wait_for(self, value: str, timeout: float = 30.0) -> float:
        with self._changed:
            if not self._changed.wait_for(lambda: value in self._seen, timeout):
                raise SystemExit(f"the watch did not see {WATCH_KEY}={value} within {timeout}s")
            return self._seen[value]

    def stop(self) -> None:
        self._stopping = True
        self._watch.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--domains", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pitstop-sim-bench-") as tmp:
        sim = Simulator(Path(tmp), args.nodes, args.pods, args.domains)
        try:
            run(sim, args)
        finally:
            sim.stop()


Operation = tuple[str, Callable[[int], object], int]


def run(sim: Simulator, args: argparse.Namespace) -> None:
    api_client = config.new_client_from_config(config_file=str(sim.kubeconfig))
    core = client.CoreV1Api(api_client)
    listed = json.loads(core.list_node(_preload_content=False).data)
    nodes = [n["metadata"]["name"] for n in listed["items"]]
    pods = core.list_pod_for_all_namespaces(limit=1).metadata.remaining_item_count + 1
    print(
        f"simulator: {len(nodes)} nodes in {args.domains} domains, {pods} pods; seeded and serving in "
        f"{sim.startup_wall:.1f}s wall, {sim.startup_cpu:.1f}s CPU; RSS {sim.status_mb('VmRSS'):.0f} MiB"
    )
    watchers: list[NodeWatcher] = []
    try:
        # The first operation is the baseline the others are compared with.
        results = [
            (name, measure(fn, rounds))
            for name, fn, rounds in operations(api_client, nodes, args, sim.kubeconfig, watchers)
        ]
    finally:
        for watcher in watchers:
            watcher.stop()
    floor = statistics.median(results[0][1])
    print(f"{'operation':58} {'p50 ms':>9} {'p99 ms':>9} {'p50/base':>9} {'p99/base':>9}")
    for name, samples in results:
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        print(f"{name:58} {p50 * 1000:9.2f} {p99 * 1000:9.2f} {p50 / floor:8.1f}x {p99 / floor:8.1f}x")
    print(
        f"simulator RSS after the run: {sim.status_mb('VmRSS'):.0f} MiB "
        f"(peak {sim.status_mb('VmHWM'):.0f} MiB), CPU {sim.cpu_seconds():.1f}s"
    )
    kubectl_checks(sim.kubeconfig, core, nodes)


def operations(
    api_client: client.ApiClient,
    nodes: list[str],
    args: argparse.Namespace,
    kubeconfig: Path,
    watchers: list[NodeWatcher],
) -> list[Operation]:
    """What is measured, in order: (name, the call for round i, how many rounds)."""
    core = client.CoreV1Api(api_client)
    host = api_client.configuration.host
    pool = api_client.rest_client.pool_manager
    rounds = args.rounds
    domain = "abcdefghijklmnopqrstuvwxyz"
    per_domain = -(-len(nodes) // args.domains)
    counter = itertools.count()

    def zone(i: int) -> str:
        return f"zone-{domain[i % args.domains]}" if args.domains <= 26 else f"zone-{i % args.domains + 1}"

    def annotate(i: int, content_type: str) -> None:
        core.patch_node(
            nodes[(i * 7) % len(nodes)],
            {"metadata": {"annotations": {"bench.pitstop.dev/round": str(i)}}},
            _content_type=content_type,
            **RAW,
        ).read()

    def cordon_cycle(i: int) -> None:
        name = nodes[(i * 11) % len(nodes)]
        core.patch_node(name, {"spec": {"unschedulable": True}}, **RAW).read()
        core.patch_node(name, {"spec": {"unschedulable": None}}, **RAW).read()

    def patch_to_event(i: int) -> float:
        if not watchers:  # started now, so that it decodes no event of the earlier operations
            watchers.append(NodeWatcher(kubeconfig, core.list_node(limit=1).metadata.resource_version))
        watcher = watchers[0]
        value = str(next(counter))
        sent = time.perf_counter()
        core.patch_node(
            nodes[(i * 13) % len(nodes)],
            {"metadata": {"annotations": {WATCH_KEY: value}}},
            _content_type="application/merge-patch+json",
        )
        return watcher.wait_for(value) - sent

    evict = evictor(core, rounds + 1)
    return [
        (
            "GET /version, raw HTTP (baseline)",
            lambda i: pool.request("GET", f"{host}/version").data,
            rounds * 4,
        ),
        ("get node", lambda i: core.read_node(nodes[(i * 17) % len(nodes)], **RAW).data, rounds),
        (
            f"list nodes by label (one domain, ~{per_domain})",
            lambda i: core.list_node(label_selector=f"{DOMAIN_LABEL}={zone(i)}", **RAW).data,
            rounds,
        ),
        (
            "  the same, decoded into the client's models",
            lambda i: core.list_node(label_selector=f"{DOMAIN_LABEL}={zone(i)}"),
            max(5, rounds // 5),
        ),
        (
            f"list nodes (all {len(nodes)})",
            lambda i: core.list_node(**RAW).data,
            max(5, rounds // 5),
        ),
        (
            "list pods on a node (fieldSelector spec.nodeName)",
            lambda i: (
                core.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={nodes[(i * 19) % len(nodes)]}", **RAW
                ).data
            ),
            rounds,
        ),
        (
            "list pods by label (one deployment)",
            lambda i: (
                core.list_namespaced_pod(f"team-{i % 8}", label_selector=f"app=svc-{i % 8:03d}", **RAW).data
            ),
            rounds,
        ),
        (
            "patch node annotation (merge patch)",
            lambda i: annotate(i, "application/merge-patch+json"),
            rounds,
        ),
        (
            "patch node annotation (strategic merge)",
            lambda i: annotate(i, "application/strategic-merge-patch+json"),
            rounds,
        ),
        ("cordon + uncordon (2 strategic patches)", cordon_cycle, rounds),
        ("evict a pod (PDB-checked)", evict, rounds),
        ("watch nodes: patch sent -> its event received", patch_to_event, rounds),
        ("list all pods", lambda i: core.list_pod_for_all_namespaces(**RAW).data, 3),
    ]


def evictor(core: client.CoreV1Api, count: int) -> Callable[[int], object]:
    """Evicts the first pod of a different Deployment each call (a 10% budget allows it)."""
    victims: list[tuple[str, str]] = []
    for index in range(count):
        ns, app = f"team-{index % 8}", f"svc-{index:03d}"
        found = core.list_namespaced_pod(ns, label_selector=f"app={app}", limit=1).items
        if found:
            victims.append((ns, found[0].metadata.name))
    calls = itertools.count()

    def evict(i: int) -> object:
        ns, name = victims[next(calls) % len(victims)]
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))
        try:
            return core.create_namespaced_pod_eviction(name, ns, body, **RAW).data
        except client.ApiException as exc:
            if exc.status in (404, 429):  # evicted already (more rounds than deployments)
                return None
            raise

    return evict


def kubectl_checks(kubeconfig: Path, core: client.CoreV1Api, nodes: list[str]) -> None:
    """Two answers checked with kubectl, an independent client."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("kubectl not found: independent checks skipped")
        return
    base = [kubectl, "--kubeconfig", str(kubeconfig)]
    zone_a = f"{DOMAIN_LABEL}=zone-a"
    names = subprocess.run(
        [*base, "get", "nodes", "-l", zone_a, "-o", "name"], capture_output=True, text=True, check=True
    ).stdout.split()
    by_client = len(core.list_node(label_selector=zone_a).items)
    node = nodes[len(nodes) // 2]
    subprocess.run(
        [*base, "annotate", "node", node, "--overwrite", "bench.pitstop.dev/kubectl=checked"],
        capture_output=True,
        check=True,
    )
    seen = (core.read_node(node).metadata.annotations or {}).get("bench.pitstop.dev/kubectl")
    print(
        f"kubectl: {len(names)} nodes in zone-a (client: {by_client}); "
        f"kubectl annotate {node} -> client reads {seen!r}"
    )
    if len(names) != by_client or seen != "checked":
        raise SystemExit("kubectl and the client disagree")


if __name__ == "__main__":
    main()
