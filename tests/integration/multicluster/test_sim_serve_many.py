"""Three `pitstop sim serve` at once — lab, staging, prod — as an operator rehearses many
clusters on one machine: free ports each, and each registered under its own name in its own
worker's PITSTOP_HOME only, its inventory naming the cluster and its own task queue."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ruamel.yaml import YAML

from pitstop.policy.errors import POLICY_ENV
from pitstop.runbook.inventory import load_inventory

REPO = Path(__file__).resolve().parents[3]
NAMES = ["lab", "staging", "prod"]
URL = re.compile(r"serving at (http://\S+)")


def serve(name: str, home: Path) -> tuple[subprocess.Popen[bytes], Path]:
    # The home decides where the cluster is registered: not the session's policy file.
    env = {k: v for k, v in os.environ.items() if k != POLICY_ENV}
    env.update({"PITSTOP_HOME": str(home), "COLUMNS": "250"})
    out = home / "sim.out"
    home.mkdir(parents=True)
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pitstop.cli.sim", "serve", "--name", name, "--task-queue",
             f"pitstop-{name}", "--nodes", "2", "--domains", "1"],
            cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return proc, out


def url_of(proc: subprocess.Popen[bytes], out: Path, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while True:
        text = out.read_text(errors="replace")
        found = URL.search(text)
        if found and "Press Ctrl+C" in text:
            return found.group(1)
        assert proc.poll() is None, f"pitstop sim serve exited with {proc.returncode}:\n{text}"
        assert time.monotonic() < deadline, f"pitstop sim serve did not come up:\n{text}"
        time.sleep(0.1)


def test_three_simulators_serve_at_once_each_registered_in_its_own_home(tmp_path: Path) -> None:
    started = {name: serve(name, tmp_path / name) for name in NAMES}
    try:
        urls = {name: url_of(proc, out) for name, (proc, out) in started.items()}
        assert len(set(urls.values())) == len(NAMES), urls
        for name in NAMES:
            home = tmp_path / name
            # Registered under its name, in its own home only.
            assert [p.name for p in (home / "clusters").iterdir()] == [name]
            kubeconfig = YAML(typ="safe").load((home / "clusters" / name / "kubeconfig").read_text())
            assert kubeconfig["clusters"][0]["cluster"]["server"] == urls[name]
            # Its inventory names the cluster and the queue its own worker polls.
            inventory = load_inventory(home / "sim" / "inventory.yaml")
            assert inventory.cluster is not None
            assert (inventory.cluster.name, inventory.cluster.task_queue) == (name, f"pitstop-{name}")
            assert f"task queue 'pitstop-{name}'" in started[name][1].read_text()
            with urllib.request.urlopen(f"{urls[name]}/_sim/counters", timeout=10) as response:
                assert response.status == 200 and "evictions_total" in json.loads(response.read())
    finally:
        for proc, _ in started.values():
            proc.send_signal(signal.SIGTERM)
        for proc, _ in started.values():
            proc.wait(timeout=30)
    for name, (proc, out) in started.items():
        assert proc.returncode == 0, (name, out.read_text())
