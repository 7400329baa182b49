"""`pitstop sim serve` gives every node an SSH endpoint and writes the inventory a demo runs
with; `/_sim/nodes/{node}/ssh` shows an endpoint and sets its faults."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.ssh import ssh_facts, ssh_firmware_update
from pitstop.contracts import ModuleCall
from pitstop.policy import current_policy
from pitstop.runbook import load_inventory
from pitstop.runbook.inventory import Inventory
from pitstop.secrets import DIR_ENV
from pitstop.ssh import close_all
from tests.conftest import REPO_ROOT
from tests.policy_site import PolicyLayer


def _http(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_serve_writes_an_inventory_of_ssh_endpoints_that_the_modules_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_policy: PolicyLayer
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    shape = ["--nodes", "3", "--domains", "3", "--time-scale", "60"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitstop.cli.sim", "serve", *shape, "--kubeconfig", str(kubeconfig)],
        cwd=REPO_ROOT,
        env={**os.environ, "COLUMNS": "250"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "inventory.yaml").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no inventory written"
            time.sleep(0.1)
        inventory = load_inventory(tmp_path / "inventory.yaml")
        registered = assert_the_inventory_names_the_registered_cluster(inventory, tmp_path, kubeconfig)
        node = inventory.hostvars("gpu-node-002")
        assert (node["ansible_host"], node["failure_domain"], node["node_name"]) == (
            "127.0.0.1",
            "zone-b",
            "gpu-node-002",
        )
        url = YAML(typ="safe").load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        assert_the_admin_api_shows_and_sets_ssh_faults(url, node, tmp_path)
        monkeypatch.setenv(DIR_ENV, str(tmp_path / "secrets"))
        worker_policy.grant("sim-ssh-key", "ssh_key").allow_read(tmp_path)
        assert_the_modules_reach_the_node(inventory, node, tmp_path)
    finally:
        close_all()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"gpu-node-002 127.0.0.1:{node['ansible_port']}" in out
    assert f"export PITSTOP_SECRETS_DIR={tmp_path / 'secrets'}" in out
    assert f"registered with the worker as cluster 'pitstop-sim' in {registered}" in out


def assert_the_inventory_names_the_registered_cluster(
    inventory: Inventory, tmp_path: Path, kubeconfig: Path
) -> Path:
    """The inventory names the cluster, its SSH user and key, and the groups the runbooks use;
    the worker's clusters directory holds how to reach it (returned)."""
    cluster = inventory.cluster
    assert cluster is not None and cluster.ssh is not None
    assert cluster.name == "pitstop-sim"
    assert cluster.ssh.key is not None and cluster.ssh.key.secret == "sim-ssh-key"
    assert cluster.ssh.user == "ops"
    # The worker holds how to reach it: registered in the worker's clusters directory.
    registered = current_policy().clusters_dir.path / "pitstop-sim"
    assert (registered / "known_hosts").read_text() == (tmp_path / "known_hosts").read_text()
    assert YAML(typ="safe").load((registered / "kubeconfig").read_text()) == YAML(typ="safe").load(
        kubeconfig.read_text()
    )
    assert inventory.resolve("gpu") == ["gpu-node-001", "gpu-node-002", "gpu-node-003"]
    assert inventory.resolve("zone_b") == ["gpu-node-002"]
    # The groups the shipped runbooks use, so that they run against `pitstop sim serve` as is.
    assert inventory.resolve("gpu_fleet") == inventory.resolve("gpu")
    assert inventory.resolve("gpu_canary") == ["gpu-node-001"]
    return registered


def assert_the_admin_api_shows_and_sets_ssh_faults(url: str, node: dict[str, Any], tmp_path: Path) -> None:
    """`/_sim/nodes/{node}/ssh` shows the endpoint the inventory names, and sets its faults."""
    status, info = _http(f"{url}/_sim/nodes/gpu-node-002/ssh")
    assert status == 200 and (info["port"], info["up"]) == (node["ansible_port"], True)
    assert f"[127.0.0.1]:{info['port']} ssh-ed25519 " in (tmp_path / "known_hosts").read_text()
    status, problem = _http(f"{url}/_sim/nodes/gpu-node-002/ssh", "POST", {"flash_second": 1})
    assert status == 422 and "flash_second" in problem["error"]
    status, info = _http(f"{url}/_sim/nodes/gpu-node-002/ssh", "POST", {"flash_fails": True})
    assert status == 200 and info["faults"]["flash_fails"] is True


def assert_the_modules_reach_the_node(inventory: Inventory, node: dict[str, Any], tmp_path: Path) -> None:
    """The SSH modules reach the node through the inventory, and see the fault set on it."""

    def call(module: str, args: dict[str, Any]) -> ModuleCall:
        return ModuleCall(
            module=module,
            host="gpu-node-002",
            args=args,
            run_id="run-1",
            task_path="stage/0/task/0",
            host_vars=node,
            cluster=inventory.cluster,
        )

    facts = ActivityEnvironment().run(ssh_facts, call("ssh.facts", {})).data
    assert facts["hostname"] == "gpu-node-002" and facts["gpu_count"] == 8
    image = tmp_path / "firmware.bin"
    image.write_bytes(b"FIRMWARE 97.00.01.00.01\n")
    with pytest.raises(ApplicationError) as failed:
        ActivityEnvironment().run(
            ssh_firmware_update,
            call("ssh.firmware_update", {"target": "97.00.01.00.01", "image": str(image)}),
        )
    assert failed.value.type == "FirmwareUpdateFailed"
    assert "flash failed: device busy" in failed.value.message
    assert "firmware stays at 96.00.89.00.01" in failed.value.message
