"""Rehearsal cluster at fleet scale: 1,000 nodes and 20,000 pods, driven by the official
`kubernetes` client the way pitstop drives a cluster.

Prints p50/p99 latency of list and patch calls, each as a ratio to the raw HTTP round trip of
`GET /version` measured in the same run on the same connection pool (the floor any call
pays), plus the cost of the client's own model decoding for the big lists.

    .venv/bin/python bench/sim_scale.py [--nodes 1000] [--pods 20000] [--rounds 50]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kubernetes import client, config
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parent.parent
DAEMONSETS_PER_NODE = 3  # GPU Operator: driver, device plugin, DCGM exporter


def scenario(nodes: int, pods: int) -> dict[str, object]:
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
        "cluster": {"nodes": nodes, "domains": 10, "gpus_per_node": 8},
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


def start_simulator(workdir: Path, nodes: int, pods: int) -> tuple[subprocess.Popen[bytes], Path, float]:
    scenario_file = workdir / "scenario.yaml"
    scenario_file.write_text(json.dumps(scenario(nodes, pods), indent=1))  # JSON is YAML
    kubeconfig = workdir / "kubeconfig"
    log = (workdir / "sim.log").open("wb")
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pitstop.cli.sim",
            "serve",
            "--scenario",
            str(scenario_file),
            "--kubeconfig",
            str(kubeconfig),
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"},
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"simulator exited: {(workdir / 'sim.log').read_text()}")
        if kubeconfig.exists():
            loaded = YAML(typ="safe", pure=True).load(kubeconfig.read_text())
            server = loaded["clusters"][0]["cluster"]["server"]
            try:
                urllib.request.urlopen(f"{server}/version", timeout=1).read()
                return proc, kubeconfig, time.perf_counter() - started
            except OSError:
                pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("simulator did not start within 300s")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pitstop-sim-bench-") as tmp:
        proc, kubeconfig, startup = start_simulator(Path(tmp), args.nodes, args.pods)
        try:
            run(kubeconfig, args, startup, proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)


Operation = tuple[str, Callable[[int], object], int]


def run(kubeconfig: Path, args: argparse.Namespace, startup: float, pid: int) -> None:
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    core = client.CoreV1Api(api_client)
    nodes = [n.metadata.name for n in core.list_node().items]
    pods = core.list_pod_for_all_namespaces(limit=1).metadata.remaining_item_count + 1
    print(
        f"simulator: {len(nodes)} nodes, {pods} pods, seeded and serving in {startup:.1f}s, "
        f"RSS {rss_mb(pid):.0f} MiB"
    )
    # The first operation is the baseline the others are compared with.
    results = [(name, measure(fn, rounds)) for name, fn, rounds in operations(api_client, nodes, args.rounds)]
    floor = statistics.median(results[0][1])
    print(f"{'operation':52} {'p50 ms':>9} {'p99 ms':>9} {'p50/base':>9}")
    for name, samples in results:
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        print(f"{name:52} {p50 * 1000:9.2f} {p99 * 1000:9.2f} {p50 / floor:9.1f}x")
    print(f"simulator RSS after the run: {rss_mb(pid):.0f} MiB")


def operations(api_client: client.ApiClient, nodes: list[str], rounds: int) -> list[Operation]:
    """What is measured, in order: (name, the call for round i, how many rounds)."""
    core = client.CoreV1Api(api_client)
    version = client.VersionApi(api_client)
    host = api_client.configuration.host
    pool = api_client.rest_client.pool_manager

    def cordon_cycle(i: int) -> None:
        name = nodes[(i * 7) % len(nodes)]
        core.patch_node(name, {"spec": {"unschedulable": True}})
        core.patch_node(name, {"spec": {"unschedulable": None}})

    return [
        (
            "GET /version, raw HTTP (baseline)",
            lambda i: pool.request("GET", f"{host}/version").data,
            rounds * 4,
        ),
        ("GET /version, client (VersionApi.get_code)", lambda i: version.get_code(), rounds * 2),
        ("list nodes (1,000), raw bytes", lambda i: core.list_node(_preload_content=False).data, rounds),
        ("list nodes (1,000), client models", lambda i: core.list_node(), max(5, rounds // 5)),
        (
            "list nodes by label (one domain, 100)",
            lambda i: core.list_node(
                label_selector=f"topology.kubernetes.io/zone=zone-{'abcdefghij'[i % 10]}"
            ),
            rounds,
        ),
        (
            "list pods on a node (fieldSelector spec.nodeName)",
            lambda i: core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={nodes[i % len(nodes)]}"
            ),
            rounds,
        ),
        (
            "list pods by label (one deployment, 100)",
            lambda i: core.list_namespaced_pod(f"team-{i % 8}", label_selector=f"app=svc-{i % 8:03d}"),
            rounds,
        ),
        (
            "list all pods (20,000), raw bytes",
            lambda i: core.list_pod_for_all_namespaces(_preload_content=False).data,
            5,
        ),
        ("list all pods (20,000), client models", lambda i: core.list_pod_for_all_namespaces(), 3),
        (
            "patch node label (strategic merge)",
            lambda i: core.patch_node(
                nodes[i % len(nodes)], {"metadata": {"labels": {"bench/round": str(i)}}}
            ),
            rounds,
        ),
        ("cordon + uncordon (2 patches)", cordon_cycle, rounds),
    ]


if __name__ == "__main__":
    main()
