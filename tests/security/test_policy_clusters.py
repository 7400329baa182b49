# ruff: noqa: F811  (pytest fixtures imported from the engine and kube fixtures by name)
"""Worker policy, clusters rule: an inventory names a cluster; the worker alone holds how to
reach it, and a kubeconfig that would run a program is refused before the client reads it
(issue #13).

The attack: inventory `cluster.kubeconfig` names any worker file, and the kubernetes client runs
that kubeconfig's `exec:` plugin. Here the plugin would create a marker file: it never does.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from typer.testing import CliRunner

from activities.kube.generic import get
from pitstop.cli.app import app
from pitstop.policy.clusters import register_cluster
from pitstop.runbook.inventory import ClusterConfig
from pitstop_sim import SimCluster
from pitstop_sim.kubeconfig import kubeconfig as kubeconfig_data
from tests.integration.kube.conftest import ModuleRunner, StartSim, module_runner, start_sim  # noqa: F401
from tests.policy_site import PolicyLayer
from tests.security.policy_fixtures import engine_worker, run, run_history_json, start_run, tasks  # noqa: F401

pytestmark = pytest.mark.integration

CLUSTER = "cluster: {nodes: 1, domains: 1}"


def exec_kubeconfig(sim: SimCluster, directory: Path, plugin: str = "exec") -> tuple[str, Path]:
    """A kubeconfig for the simulator whose user runs a program that leaves a marker file."""
    marker = directory / "the-plugin-ran"
    script = directory / "credential-plugin"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "pitstop-sim-token"},
    }
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho '{json.dumps(credential)}'\n")
    script.chmod(0o755)
    user: dict[str, Any] = (
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(script), "args": []}}
        if plugin == "exec"
        else {"auth-provider": {"name": "oidc", "config": {"client-id": "x", "idp-issuer-url": "https://x"}}}
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sim", "cluster": {"server": sim.url}}],
        "users": [{"name": "plugged", "user": user}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "plugged"}}],
        "current-context": "sim",
    }
    return json.dumps(config), marker


def _get_nodes(module_runner: ModuleRunner, sim: SimCluster, cluster: str) -> Any:
    request = module_runner.call(sim, "kube.get", {"kind": "Node", "api_version": "v1"})
    request = request.model_copy(update={"cluster": ClusterConfig(name=cluster)})
    return module_runner.env().run(get, request)


def test_an_exec_plugin_in_a_registered_kubeconfig_never_runs_unless_the_policy_allows_it(
    start_sim: StartSim, module_runner: ModuleRunner, tmp_path: Path, worker_policy: PolicyLayer
) -> None:
    sim = start_sim(CLUSTER)
    kubeconfig, marker = exec_kubeconfig(sim, tmp_path)
    register_cluster("plugged", kubeconfig=kubeconfig)
    with pytest.raises(ApplicationError) as refused:
        _get_nodes(module_runner, sim, "plugged")
    assert refused.value.type == "PolicyViolation" and refused.value.non_retryable
    assert "authenticates user 'plugged' with an 'exec' plugin, which runs a program on the worker" in str(
        refused.value
    )
    assert "set clusters.plugged.allow_exec: true in PITSTOP_WORKER_POLICY" in str(refused.value)
    assert not marker.exists(), "the plugin never ran"

    # The operator trusts this plugin: the same kubeconfig now works, and the plugin ran.
    worker_policy.cluster("plugged", allow_exec=True)
    result = _get_nodes(module_runner, sim, "plugged")
    assert [n["metadata"]["name"] for n in result.data["resources"]] == ["gpu-node-001"]
    assert marker.exists()


def test_a_kubeconfig_rewritten_with_a_plugin_after_it_was_used_is_refused_on_the_next_task(
    start_sim: StartSim, module_runner: ModuleRunner, tmp_path: Path
) -> None:
    # Parsed kubeconfigs are remembered by content: the file is read and checked on every task,
    # so a rewrite is seen at once and a remembered parse never stands in for the new text.
    sim = start_sim(CLUSTER)
    register_cluster("swapped", kubeconfig=json.dumps(kubeconfig_data(sim.url)))
    assert [n["metadata"]["name"] for n in _get_nodes(module_runner, sim, "swapped").data["resources"]] == [
        "gpu-node-001"
    ]
    kubeconfig, marker = exec_kubeconfig(sim, tmp_path)
    register_cluster("swapped", kubeconfig=kubeconfig)
    with pytest.raises(ApplicationError) as refused:
        _get_nodes(module_runner, sim, "swapped")
    assert "authenticates user 'plugged' with an 'exec' plugin" in str(refused.value)
    assert not marker.exists(), "the plugin never ran"


def test_an_auth_provider_user_is_refused_like_an_exec_plugin(
    start_sim: StartSim, module_runner: ModuleRunner, tmp_path: Path
) -> None:
    sim = start_sim(CLUSTER)
    kubeconfig, _ = exec_kubeconfig(sim, tmp_path, plugin="auth-provider")
    register_cluster("oidc", kubeconfig=kubeconfig)
    with pytest.raises(ApplicationError) as refused:
        _get_nodes(module_runner, sim, "oidc")
    assert "with an 'auth-provider' plugin" in str(refused.value)


async def test_an_inventory_naming_a_kubeconfig_is_refused_and_its_plugin_never_runs(
    start_run: Any, temporal_client: Client, start_sim: StartSim, tmp_path: Path
) -> None:
    sim = start_sim(CLUSTER)
    kubeconfig, marker = exec_kubeconfig(sim, tmp_path)
    planted = _write(tmp_path / "planted-kubeconfig", kubeconfig)
    inventory = textwrap.dedent(
        f"""
        cluster:
          name: rehearsal
          kubeconfig: {planted}
        all:
          hosts:
            gpu-node-001: {{}}
        """
    )
    handle = await start_run(
        "name: nodes\nhosts: all\ntasks:\n  - kube.get: {kind: Node, api_version: v1}\n", inventory
    )
    report = await handle.result()
    assert report.status == "failed" and report.stages == []
    assert "inventory.yaml:4:3: cluster.kubeconfig is not the inventory's to set" in report.msg
    assert "$PITSTOP_HOME/clusters/rehearsal/kubeconfig" in report.msg
    assert not _exists(marker), "the plugin never ran"
    assert "pitstop-sim-token" not in await run_history_json(temporal_client, handle)


def test_pitstop_validate_says_where_the_worker_configures_the_cluster(tmp_path: Path) -> None:
    inventory = _write(
        tmp_path / "inventory.yaml",
        "cluster:\n  name: prod\n  context: admin@prod\nall:\n  hosts:\n    gpu-01: {}\n",
    )
    runbook = _write(tmp_path / "runbook.yaml", "name: r\nhosts: all\ntasks:\n  - debug: {msg: hi}\n")
    result = CliRunner().invoke(app, ["validate", str(runbook), "-i", str(inventory)])
    assert result.exit_code != 0
    assert result.stderr.strip().startswith(
        f"{inventory}:3:3: cluster.context is not the inventory's to set: the worker holds how it reaches "
        "cluster 'prod'. Remove it, and have the worker's operator register the cluster on the worker: "
        "clusters.prod.context in PITSTOP_WORKER_POLICY (see docs/policy.md)"
    )


async def test_a_cluster_the_worker_does_not_know_is_refused_with_where_to_register_it(
    start_run: Any, temporal_client: Client
) -> None:
    handle = await start_run(
        "name: nodes\nhosts: all\ntasks:\n  - kube.get: {kind: Node, api_version: v1}\n",
        "cluster: {name: somebody-elses}\nall:\n  hosts:\n    n1: {}\n",
    )
    report = await handle.result()
    outcome = tasks(report)["kube.get"]
    assert outcome.status == "failed"
    assert outcome.msg.startswith(
        "PolicyViolation: kube.get: cluster 'somebody-elses' is not one this worker may act on "
        "(known clusters: "
    )
    assert "put its kubeconfig at " in outcome.msg
    assert "clusters/somebody-elses/kubeconfig" in outcome.msg


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _exists(path: Path) -> bool:
    return path.exists()
