"""`pitstop sim serve` as a user runs it, the shipped scenarios, and the `/_sim/` admin endpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pitstop_sim import ScenarioError, SimCluster, SimConfig, load_scenario
from tests.integration.sim.conftest import Kubectl, StartSim

REPO = Path(__file__).resolve().parents[3]
SCENARIOS = sorted((REPO / "runbooks" / "scenarios").glob("*.yaml"))


def _serve(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-m", "pitstop.cli.sim", "serve", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _http(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_serve_writes_a_kubeconfig_that_kubectl_uses_and_stops_on_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = _serve("--nodes", "5", "--domains", "5", "--gpus-per-node", "4", "--kubeconfig", str(kubeconfig))
    try:
        deadline = time.monotonic() + 60
        while not kubeconfig.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no kubeconfig written"
            time.sleep(0.1)
        out = Kubectl(kubeconfig, tmp_path / "cache")(
            "get", "nodes", "-L", "topology.kubernetes.io/zone,nvidia.com/gpu.count"
        )
        rows = [line.split() for line in out.strip().splitlines()[1:]]
        assert len(rows) == 5
        assert sorted(row[-2] for row in rows) == ["zone-a", "zone-b", "zone-c", "zone-d", "zone-e"]
        assert {row[-1] for row in rows} == {"4"}
        assert "pitstop-sim-token" in kubeconfig.read_text()
        assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "rehearsal cluster stopped" in out


def test_serve_refuses_a_scenario_with_a_misspelt_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster:\n  nodes: 3\nworkloads:\n  deployments:\n    - name: web\n      replicaz: 2\n")
    proc = _serve("--scenario", str(bad), "--kubeconfig", str(tmp_path / "kc"))
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    message = " ".join(err.split())
    assert (
        f"{bad}:6:7: unknown key 'replicaz' in workloads.deployments[0] (did you mean 'replicas'?)" in message
    )
    assert not (tmp_path / "kc").exists()


def test_serve_refuses_a_time_scale_that_is_not_positive(tmp_path: Path) -> None:
    proc = _serve("--time-scale", "0", "--kubeconfig", str(tmp_path / "kc"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "invalid --time-scale: Input should be greater than 0" in err


def test_a_scenario_whose_workloads_do_not_fit_says_which_pod(tmp_path: Path) -> None:
    scenario = tmp_path / "full.yaml"
    scenario.write_text(
        "cluster: {nodes: 1, domains: 1, gpus_per_node: 8}\n"
        "workloads: {deployments: [{name: hungry, replicas: 2, gpus: 8}]}\n"
    )
    with pytest.raises(ScenarioError) as caught:
        SimCluster(SimConfig.from_file(scenario)).start()
    assert "the scenario's workloads do not fit: no node has room for pod hungry-" in str(caught.value)
    assert "nvidia.com/gpu=8" in str(caught.value)


def test_a_command_line_shape_that_breaks_the_scenario_is_refused(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("faults: {nodes_never_return: [gpu-node-004]}\n")
    with pytest.raises(ScenarioError) as caught:
        SimCluster(SimConfig.from_file(scenario, nodes=2, domains=1))
    assert (
        "faults.nodes_never_return: unknown node 'gpu-node-004' "
        "(the cluster has gpu-node-001 .. gpu-node-002)" in str(caught.value)
    )


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenarios_start_with_their_workloads_running(path: Path, tmp_path: Path) -> None:
    scenario = load_scenario(path)
    with SimCluster(SimConfig(scenario=scenario)) as sim:
        expected = sum(d.replicas for d in scenario.workloads.deployments)
        expected += sum(t.pods for t in scenario.workloads.training_jobs)
        # Platform scenarios also run the control plane and components (tests/integration/sim_platform).
        platform_apps = {c.name for c in scenario.platform.components} if scenario.platform else set()
        workload_pods = [
            p
            for p in sim.list("pods")
            if p["metadata"]["namespace"] not in ("gpu-operator", "kube-system")
            and p["metadata"]["labels"].get("app") not in platform_apps
        ]
        assert len(workload_pods) == expected
        assert all(p["status"]["phase"] == "Running" for p in workload_pods)
        assert len(sim.list("nodes")) == scenario.cluster.nodes + len(scenario.control_plane_names())


def test_admin_endpoints_reboot_profile_faults_and_counters(start_sim: StartSim) -> None:
    sim = start_sim("cluster: {nodes: 2, domains: 2}\ntiming: {time_scale: 100, reboot_seconds: 30}\n")
    base = f"{sim.url}/_sim"
    assert _http(f"{base}/reboot/gpu-node-002", "POST") == (202, {"rebooting": "gpu-node-002"})
    status, body = _http(f"{base}/reboot/gpu-node-404", "POST")
    assert status == 404 and "gpu-node-404" in body["error"]
    status, profile = _http(f"{base}/nodes/gpu-node-001/profile", "POST", {"driver_version": "560.35.03"})
    assert status == 200 and profile["driver_version"] == "560.35.03"
    status, body = _http(f"{base}/nodes/gpu-node-001/profile", "POST", {"driver": "x"})
    assert status == 422 and "driver" in body["error"]
    status, body = _http(
        f"{base}/faults",
        "POST",
        {"api_error": {"verb": "list", "resource": "nodes", "status": 503, "count": 1}},
    )
    assert status == 201
    assert _http(f"{sim.url}/api/v1/nodes")[0] == 503
    assert _http(f"{sim.url}/api/v1/nodes")[0] == 200
    sim.wait_for(
        lambda s: any(e.event == "ready" for e in s.timeline() if e.node == "gpu-node-002"),
        timeout=10,
        what="the rebooted node to return",
    )
    status, counters = _http(f"{base}/counters")
    assert counters["reboots"] == {"gpu-node-002": 1}
    assert sum(counters["faults_injected"].values()) == 1
    assert counters["requests"]["list nodes"] == 2
    status, timeline = _http(f"{base}/timeline")
    assert [e["event"] for e in timeline if e["node"] == "gpu-node-002"] == [
        "registered",
        "reboot",
        "not_ready",
        "ready",
    ]
    status, domains = _http(f"{base}/unavailability")
    assert {d["domain"]: d["max_unavailable"] for d in domains} == {"zone-a": 0, "zone-b": 1}
    assert _http(f"{base}/counters/reset", "POST")[0] == 200
    assert _http(f"{base}/counters")[1]["reboots"] == {}
    assert _http(f"{base}/nope")[0] == 404


def test_watch_resumes_from_a_resource_version(
    start_sim: StartSim, kube_client_for: Callable[[SimCluster], Any]
) -> None:
    from kubernetes import client, watch

    sim = start_sim("cluster: {nodes: 2, domains: 1}\n")
    core = client.CoreV1Api(kube_client_for(sim))
    listed = core.list_node()
    sim.patch("nodes", "gpu-node-002", {"metadata": {"labels": {"maintenance": "now"}}})
    seen = []
    stream = watch.Watch()
    for event in stream.stream(
        core.list_node,
        resource_version=listed.metadata.resource_version,
        label_selector="maintenance=now",
        timeout_seconds=5,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        stream.stop()
    assert seen == [("ADDED", "gpu-node-002")]  # it entered the selection after the list
